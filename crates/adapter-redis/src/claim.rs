//! [`ClaimStore`] on Redis: one `EVALSHA` per batch (the claims of one queue share
//! the queue's hash slot). Values are `pending:<token>` and `done:<token>`.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{ClaimState, ClaimStore, MessageId, SettleAction, SettleResult, Settlement};
use drain_core::{LeaseToken, PortError};
use futures::future::try_join_all;

use crate::error::shape_error;
use crate::lease::millis;
use crate::reply;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

#[async_trait]
impl ClaimStore for RedisStore {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys().message_claims(queue, ids);
        let keys = keys.as_slice();
        let ttl = millis(pending_ttl);
        let groups = self.groups(keys.iter().map(String::as_str));
        let replies = try_join_all(groups.iter().map(|group| async move {
            let group_keys: Vec<&str> = group.iter().map(|&i| keys[i].as_str()).collect();
            let args = |cmd: &mut redis::Cmd| {
                cmd.arg(token.as_str()).arg(ttl);
            };
            let v = self.eval("claim_batch", &SCRIPTS.claim, &group_keys, args).await?;
            reply::array(v, group.len())
                .ok_or_else(|| shape_error("claim_batch", self.endpoint(), "a reply of the wrong shape"))
        }))
        .await?;
        let mut out = vec![ClaimState::Claimed; keys.len()];
        for (group, values) in groups.iter().zip(replies) {
            for (&i, v) in group.iter().zip(&values) {
                out[i] = reply::claim_state(v)
                    .ok_or_else(|| shape_error("claim_batch", self.endpoint(), &format!("{v:?}")))?;
            }
        }
        Ok(out)
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys().message_claims(queue, settlements.iter().map(|s| &s.id));
        let keys = keys.as_slice();
        let groups = self.groups(keys.iter().map(String::as_str));
        let replies = try_join_all(groups.iter().map(|group| async move {
            let group_keys: Vec<&str> = group.iter().map(|&i| keys[i].as_str()).collect();
            let args = |cmd: &mut redis::Cmd| {
                cmd.arg(token.as_str()).arg(millis(done_ttl));
                for &i in group {
                    cmd.arg(match settlements[i].action {
                        SettleAction::MarkDone => "d",
                        SettleAction::Release => "r",
                    });
                }
            };
            let v = self.eval("settle_batch", &SCRIPTS.settle, &group_keys, args).await?;
            reply::array(v, group.len())
                .ok_or_else(|| shape_error("settle_batch", self.endpoint(), "a reply of the wrong shape"))
        }))
        .await?;
        let mut out = vec![SettleResult::NotOwner; settlements.len()];
        for (group, values) in groups.iter().zip(replies) {
            for (&i, v) in group.iter().zip(&values) {
                out[i] = match reply::flag(v) {
                    Some(true) => SettleResult::Settled,
                    Some(false) => SettleResult::NotOwner,
                    None => return Err(shape_error("settle_batch", self.endpoint(), &format!("{v:?}"))),
                };
            }
        }
        Ok(out)
    }
}

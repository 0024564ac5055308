//! [`ClaimStore`] on Redis: one `EVALSHA` per batch (the claims of one queue share
//! the queue's hash slot), and one for a batch's settlements with the next batch's
//! claims. Values are `pending:<token>` and `done:<token>`.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{
    ClaimState, ClaimStore, ClaimTtls, MessageId, SettleAction, SettleResult, SettledThenClaimed, Settlement,
    settle_then_claim_in_two_calls,
};
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
                    cmd.arg(action(settlements[i].action));
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
                out[i] = self.settle_result("settle_batch", v)?;
            }
        }
        Ok(out)
    }

    /// One `EVALSHA` (`settle_claim.lua`) when there is something to settle and to
    /// claim and every key is in one hash slot (always, for one queue's claims);
    /// otherwise the two calls, each one round trip of its own.
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        let keys = self.keys().message_claims(queue, settlements.iter().map(|s| &s.id).chain(ids));
        if settlements.is_empty() || ids.is_empty() || self.groups(keys.iter().map(String::as_str)).len() > 1 {
            return settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await;
        }
        match self.settle_claim(settlements, &keys, token, ttls).await {
            Ok((settled, claimed)) => SettledThenClaimed { settled: Ok(settled), claimed: Ok(claimed) },
            Err(e) => SettledThenClaimed { settled: Err(e.clone()), claimed: Err(e) },
        }
    }
}

impl RedisStore {
    /// The `settle_claim` script over `keys`: the keys of `settlements`, then those to claim.
    async fn settle_claim(
        &self,
        settlements: &[Settlement],
        keys: &[String],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> Result<(Vec<SettleResult>, Vec<ClaimState>), PortError> {
        const OP: &str = "settle_then_claim";
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttls.done)).arg(millis(ttls.pending)).arg(settlements.len());
            for s in settlements {
                cmd.arg(action(s.action));
            }
        };
        let v = self.eval(OP, &SCRIPTS.settle_claim, &key_refs, args).await?;
        let bad = || shape_error(OP, self.endpoint(), "a reply of the wrong shape");
        let [settled, claimed]: [redis::Value; 2] =
            reply::array(v, 2).and_then(|v| v.try_into().ok()).ok_or_else(bad)?;
        let settled = reply::array(settled, settlements.len()).ok_or_else(bad)?;
        let claimed = reply::array(claimed, keys.len() - settlements.len()).ok_or_else(bad)?;
        let settled = settled.iter().map(|v| self.settle_result(OP, v)).collect::<Result<_, _>>()?;
        let claimed = claimed
            .iter()
            .map(|v| reply::claim_state(v).ok_or_else(|| shape_error(OP, self.endpoint(), &format!("{v:?}"))))
            .collect::<Result<_, _>>()?;
        Ok((settled, claimed))
    }

    /// One element of a settlement reply: `1` settled, `0` not ours.
    fn settle_result(&self, op: &str, v: &redis::Value) -> Result<SettleResult, PortError> {
        match reply::flag(v) {
            Some(true) => Ok(SettleResult::Settled),
            Some(false) => Ok(SettleResult::NotOwner),
            None => Err(shape_error(op, self.endpoint(), &format!("{v:?}"))),
        }
    }
}

/// A settlement's action as the scripts spell it.
fn action(action: SettleAction) -> &'static str {
    match action {
        SettleAction::MarkDone => "d",
        SettleAction::Release => "r",
    }
}

//! [`ClaimStore`] on Redis: one script (`src/scripts/claims.lua`) settles claims and
//! then takes others, one `EVALSHA` per hash slot (the claims of one queue share the
//! queue's hash slot): `claim_batch` sends only claims, `settle_batch` only
//! settlements, and `settle_then_claim` (the tick's call per batch) both. Values are
//! `pending:<token>` and `done:<token>`.

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
        let ttls = ClaimTtls { pending: pending_ttl, done: pending_ttl };
        let groups = self.groups(keys.iter().map(String::as_str));
        let replies = try_join_all(groups.iter().map(|group| {
            let group_keys: Vec<&str> = group.iter().map(|&i| keys[i].as_str()).collect();
            async move { self.claims("claim_batch", &[], &group_keys, token, ttls).await }
        }))
        .await?;
        let mut out = vec![ClaimState::Claimed; keys.len()];
        for (group, (_, states)) in groups.iter().zip(replies) {
            for (&i, state) in group.iter().zip(states) {
                out[i] = state;
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
        let ttls = ClaimTtls { pending: done_ttl, done: done_ttl };
        let groups = self.groups(keys.iter().map(String::as_str));
        let replies = try_join_all(groups.iter().map(|group| {
            let group_keys: Vec<&str> = group.iter().map(|&i| keys[i].as_str()).collect();
            let actions: Vec<SettleAction> = group.iter().map(|&i| settlements[i].action).collect();
            async move { self.claims("settle_batch", &actions, &group_keys, token, ttls).await }
        }))
        .await?;
        let mut out = vec![SettleResult::NotOwner; settlements.len()];
        for (group, (results, _)) in groups.iter().zip(replies) {
            for (&i, result) in group.iter().zip(results) {
                out[i] = result;
            }
        }
        Ok(out)
    }

    /// One `EVALSHA` when there is something to settle and to claim and every key is
    /// in one hash slot (always, for one queue's claims); otherwise the two calls,
    /// each one round trip of its own.
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        if settlements.is_empty() || ids.is_empty() {
            return settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await;
        }
        let keys = self.keys().message_claims(queue, settlements.iter().map(|s| &s.id).chain(ids));
        if self.groups(keys.iter().map(String::as_str)).len() > 1 {
            return settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await;
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let actions: Vec<SettleAction> = settlements.iter().map(|s| s.action).collect();
        match self.claims("settle_then_claim", &actions, &keys, token, ttls).await {
            Ok((settled, claimed)) => SettledThenClaimed { settled: Ok(settled), claimed: Ok(claimed) },
            Err(e) => SettledThenClaimed::failed(e),
        }
    }
}

impl RedisStore {
    /// The claims script over `keys` (one hash slot): the first `actions.len()` are
    /// settled with those actions, the rest claimed.
    async fn claims(
        &self,
        op: &'static str,
        actions: &[SettleAction],
        keys: &[&str],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> Result<(Vec<SettleResult>, Vec<ClaimState>), PortError> {
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttls.done)).arg(millis(ttls.pending)).arg(actions.len());
            for action in actions {
                cmd.arg(match action {
                    SettleAction::Done => "d",
                    SettleAction::Release => "r",
                });
            }
        };
        let v = self.eval(op, &SCRIPTS.claims, keys, args).await?;
        let bad = |what: &str| shape_error(op, self.endpoint(), what);
        let shape = "a reply of the wrong shape";
        let [settled, claimed]: [redis::Value; 2] =
            reply::array(v, 2).and_then(|v| v.try_into().ok()).ok_or_else(|| bad(shape))?;
        let settled = reply::array(settled, actions.len()).ok_or_else(|| bad(shape))?;
        let claimed = reply::array(claimed, keys.len() - actions.len()).ok_or_else(|| bad(shape))?;
        let settled = settled
            .iter()
            .map(|v| match reply::flag(v) {
                Some(true) => Ok(SettleResult::Settled),
                Some(false) => Ok(SettleResult::NotOwner),
                None => Err(bad(&format!("{v:?}"))),
            })
            .collect::<Result<_, _>>()?;
        let claimed = claimed
            .iter()
            .map(|v| reply::claim_state(v).ok_or_else(|| bad(&format!("{v:?}"))))
            .collect::<Result<_, _>>()?;
        Ok((settled, claimed))
    }
}

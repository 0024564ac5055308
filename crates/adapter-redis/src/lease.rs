//! [`LeaseStore`] and [`OwnerClaims`] on Redis: one `EVALSHA` per acquire, release
//! and renew; one pipelined round trip per peek (per hash slot for many owners).

use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, Holding, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release, Renew};
use drain_core::{LeaseToken, PortError};
use futures::future::try_join_all;

use crate::error::shape_error;
use crate::reply;
use crate::scripts::SCRIPTS;
use crate::store::{RedisStore, Scanned, peek_pipe};

/// A TTL in whole milliseconds for `PX`/`PEXPIRE`: at least 1 (Redis rejects 0).
pub(crate) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).clamp(1, i64::MAX as u64 / 2)
}

#[async_trait]
impl LeaseStore for RedisStore {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        let keys = self.keys().lease_args(lease);
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttl));
        };
        let key_bytes = keys.iter().map(|k| k.plain_len()).sum();
        let v = self.eval_keys("acquire", &SCRIPTS.acquire, &keys, key_bytes, args).await?;
        reply::acquire(&v).ok_or_else(|| shape_error("acquire", self.endpoint(), &format!("{v:?}")))
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        let [key, _] = self.keys().lease_args(lease);
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str());
        };
        let v = self.eval_keys("release", &SCRIPTS.release, &[key], key.plain_len(), args).await?;
        match reply::flag(&v) {
            Some(true) => Ok(Release::Released),
            Some(false) => Ok(Release::NotOwner),
            None => Err(shape_error("release", self.endpoint(), &format!("{v:?}"))),
        }
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        let [key, _] = self.keys().lease_args(lease);
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttl));
        };
        let v = self.eval_keys("renew", &SCRIPTS.renew, &[key], key.plain_len(), args).await?;
        match reply::flag(&v) {
            Some(true) => Ok(Renew::Renewed),
            Some(false) => Ok(Renew::Lost),
            None => Err(shape_error("renew", self.endpoint(), &format!("{v:?}"))),
        }
    }

    /// One pipeline: `GET` + `PTTL` of the lease, `GET` of its fence.
    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        let key = self.keys().lease(lease);
        let mut pipe = peek_pipe([key.lease.as_str()]);
        pipe.cmd("GET").arg(&key.fence);
        let values = self.pipeline("peek", &pipe).await?;
        let [get, pttl, fence] = values.as_slice() else {
            return Err(shape_error("peek", self.endpoint(), "a pipeline reply of the wrong length"));
        };
        let bad = |what: &str| shape_error("peek", self.endpoint(), what);
        let Some(held) = reply::holding(get, pttl).ok_or_else(|| bad("a lease that is not a string"))? else {
            return Ok(None);
        };
        let Some(remaining) = reply::remaining(held.remaining) else { return Ok(None) };
        let fence = reply::counter(fence).ok_or_else(|| {
            crate::error::wrong_type(self.endpoint(), &format!("the fence key {} does not hold a counter", key.fence))
        })?;
        Ok(Some(Holding { holder: LeaseToken::holder_of(&held.value).to_owned(), remaining, fence }))
    }
}

#[async_trait]
impl OwnerClaims for RedisStore {
    /// `GET` + `PTTL` of every owner's claim key, one pipeline per hash slot, the
    /// slots in parallel.
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        let keys: Vec<String> = owners.iter().map(|o| self.keys().owner_claim(o.as_str())).collect();
        let read = self.read_keys("peek_owners", &keys).await?;
        Ok(read.into_iter().map(reply::owner_claim).collect())
    }

    /// The release wake-up of `src/wake.rs`: waiter lists and pub/sub.
    fn release_wake(&self) -> Option<&dyn drain_core::ports::ReleaseWake> {
        Some(self)
    }

    /// The drain stamps of `src/drained.rs`: two keys beside the claim.
    fn drain_stamps(&self) -> Option<&dyn drain_core::ports::DrainStamps> {
        Some(self)
    }
}

impl RedisStore {
    /// `GET` + `PTTL` of every key, one pipeline per hash slot (in parallel), the
    /// answers in key order; an empty slice makes no call.
    pub(crate) async fn read_keys(&self, op: &'static str, keys: &[String]) -> Result<Vec<Option<Scanned>>, PortError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups(keys.iter().map(String::as_str));
        self.holdings_by_slot(op, keys.len(), &groups, |group| async move {
            let pipe = peek_pipe(group.iter().map(|&i| keys[i].as_str()));
            let values = self.pipeline(op, &pipe).await?;
            if values.len() != group.len() * 2 {
                return Err(shape_error(op, self.endpoint(), "a pipeline reply of the wrong length"));
            }
            Ok(values)
        })
        .await
    }

    /// One call of `fetch` per hash-slot group of `n` keys (in parallel), each
    /// answering a value and a PTTL per key of its group; the values back in key
    /// order. Shared by the plain batched peek and the peek that registers a waiter.
    pub(crate) async fn holdings_by_slot<'g, F, Fut>(
        &self,
        op: &'static str,
        n: usize,
        groups: &'g [Vec<usize>],
        fetch: F,
    ) -> Result<Vec<Option<Scanned>>, PortError>
    where
        F: Fn(&'g [usize]) -> Fut,
        Fut: Future<Output = Result<Vec<redis::Value>, PortError>>,
    {
        let replies = try_join_all(groups.iter().map(|group| fetch(group))).await?;
        let mut out = vec![None; n];
        for (group, values) in groups.iter().zip(replies) {
            for (&i, pair) in group.iter().zip(values.chunks(2)) {
                out[i] = reply::holding(&pair[0], &pair[1])
                    .ok_or_else(|| shape_error(op, self.endpoint(), "a non-string value"))?;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_in_millis() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 1);
        assert_eq!(millis(Duration::from_secs(120)), 120_000);
        assert_eq!(millis(Duration::MAX), i64::MAX as u64 / 2);
    }
}

//! [`DrainStamps`] on Redis, with the commands of the minimal lease ACL only (`SET`,
//! `GET`, `DEL`, `PTTL`; the waiter list's only with a waiter): time is kept in
//! keys' time to live, so every age is measured on the server's clock.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `peek_marked` (K owners) | `EVALSHA peek_marked` (`GET` + `PTTL` of the claim, `PTTL` of the mark; a waiter: as `peek_wait`) | 1 (1 per hash slot on a Cluster, in parallel) |
//! | `acquire_marked` | `EVALSHA acquire_marked` (as `acquire`/`acquire_wait`, plus `SET` of the start key) | 1 |
//! | `release_drained` | `EVALSHA release_drained` (compare-and-`DEL`, the start key's `PTTL` into the mark's `SET PX`, a waiter woken as `release_wake`) | 1 |
//!
//! Keys ([`KeySpace::owner_drain`](crate::KeySpace::owner_drain)), in the claim's hash
//! slot: the start key holds the token of the turn that took the claim and expires
//! [`MARK_TTL`] after it did; a drained release moves that time left onto the mark
//! key, whose `PTTL` then tells how long ago the drain began. A mark older than
//! [`MARK_TTL`] is gone, which only costs a turn.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, DrainStamps, LeaseName, Release, StampedClaim, Waiter, WakeRelease};
use drain_core::{LeaseToken, PortError};
use redis::Value;

use crate::error::shape_error;
use crate::lease::millis;
use crate::reply;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// How long a start and a mark live: a turn held longer publishes no mark, and a
/// request older than a mark that lapsed gets a turn.
pub(crate) const MARK_TTL: Duration = Duration::from_secs(3600);

/// Waiters a standalone release tries before giving up (as the release wake-up's).
const STANDALONE_TRIES: u32 = 4;

#[async_trait]
impl DrainStamps for RedisStore {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys();
        let triples: Vec<[String; 3]> = owners
            .iter()
            .map(|o| {
                let (_, mark) = keys.owner_drain(o.as_str());
                [keys.owner_claim(o.as_str()), keys.owner_waiters(o.as_str()), mark]
            })
            .collect();
        let triples = triples.as_slice();
        let channel = waiter.map(|w| keys.wake_channel(&w.instance)).unwrap_or_default();
        let channel = channel.as_str();
        let waiter_ttl = waiter.map_or(1, |w| millis(w.ttl));
        let groups = self.groups(triples.iter().map(|t| t[0].as_str()));
        let replies = futures::future::try_join_all(groups.iter().map(|group| async move {
            let keys: Vec<&str> = group.iter().flat_map(|&i| triples[i].iter().map(String::as_str)).collect();
            let args = |cmd: &mut redis::Cmd| {
                cmd.arg(channel).arg(waiter_ttl).arg(millis(MARK_TTL));
            };
            match self.eval("peek_marked", &SCRIPTS.peek_marked, &keys, args).await? {
                Value::Array(values) if values.len() == group.len() * 3 => Ok(values),
                _ => Err(shape_error("peek_marked", self.endpoint(), "a reply of the wrong shape")),
            }
        }))
        .await?;
        let mut out = vec![None; owners.len()];
        for (group, values) in groups.iter().zip(replies) {
            for (&i, v) in group.iter().zip(values.chunks(3)) {
                let claim = reply::holding(&v[0], &v[1])
                    .ok_or_else(|| shape_error("peek_marked", self.endpoint(), "a non-string value"))?;
                let drained = match v[2] {
                    Value::Int(age) => u64::try_from(age).ok().map(Duration::from_millis),
                    _ => return Err(shape_error("peek_marked", self.endpoint(), "an age that is not a number")),
                };
                out[i] = Some(StampedClaim { claim: reply::owner_claim(claim), drained });
            }
        }
        out.into_iter()
            .map(|m| m.ok_or_else(|| shape_error("peek_marked", self.endpoint(), "an owner unanswered")))
            .collect()
    }

    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        let keys = self.keys();
        let key = keys.lease(&LeaseName::owner(owner.as_str()));
        let waiters = keys.owner_waiters(owner.as_str());
        let (start, _) = keys.owner_drain(owner.as_str());
        let channel = waiter.map(|w| keys.wake_channel(&w.instance)).unwrap_or_default();
        let waiter_ttl = waiter.map_or(1, |w| millis(w.ttl));
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttl)).arg(channel.as_str()).arg(waiter_ttl).arg(millis(MARK_TTL));
        };
        let all = [key.lease.as_str(), key.fence.as_str(), waiters.as_str(), start.as_str()];
        let v = self.eval("acquire_marked", &SCRIPTS.acquire_marked, &all, args).await?;
        reply::acquire(&v).ok_or_else(|| shape_error("acquire_marked", self.endpoint(), &format!("{v:?}")))
    }

    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        let keys = self.keys();
        let key = keys.lease(&LeaseName::owner(owner.as_str()));
        let waiters = keys.owner_waiters(owner.as_str());
        let (start, mark) = keys.owner_drain(owner.as_str());
        let standalone = !self.is_cluster();
        let tries = match (wake, standalone) {
            (false, _) => 0,
            (true, true) => STANDALONE_TRIES,
            (true, false) => 1,
        };
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str())
                .arg(owner.as_str())
                .arg(tries)
                .arg(if standalone { "1" } else { "0" })
                .arg(if drained { "1" } else { "0" });
        };
        let all = [key.lease.as_str(), waiters.as_str(), start.as_str(), mark.as_str()];
        let v = self.eval("release_drained", &SCRIPTS.release_drained, &all, args).await?;
        let bad = || shape_error("release_drained", self.endpoint(), &format!("{v:?}"));
        let Value::Array(items) = &v else { return Err(bad()) };
        match items.as_slice() {
            [Value::Int(1), Value::Int(woke)] => Ok(WakeRelease { release: Release::Released, woke: *woke == 1 }),
            [Value::Int(0), Value::Int(_)] => Ok(WakeRelease { release: Release::NotOwner, woke: false }),
            _ => Err(bad()),
        }
    }
}

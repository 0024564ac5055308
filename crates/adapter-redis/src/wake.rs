//! [`ReleaseWake`] on Redis: an instance that finds an owner's claim held registers
//! as a waiter in the same round trip, and the holder's release pops ONE waiter and
//! publishes the owner on that waiter's channel, in the release's round trip.
//! drain-core's scheduler turns the notification into
//! [`Scheduler::on_release`](drain_core::admission::Scheduler::on_release).
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `peek_and_wait` (K owners) | `EVALSHA peek_wait` (`GET` + `PTTL`; held: `LREM` + `RPUSH` + `PEXPIRE` on the waiter list) | 1 (1 per hash slot on a Cluster, in parallel) |
//! | `acquire_or_wait` | `EVALSHA acquire_wait` (`SET NX PX` + `INCR`; held: register; acquired: `LREM`) | 1 |
//! | `release_and_wake` | `EVALSHA release_wake` (compare-and-`DEL`, `LPOP` + `PUBLISH`) | 1 |
//! | `subscribe` | `SUBSCRIBE <prefix>:wake:<instance>` on a dedicated connection | 1, then a push per release |
//!
//! Keys: the waiter list [`KeySpace::owner_waiters`](crate::KeySpace::owner_waiters)
//! shares the claim's hash tag, so every script stays in one slot. Its elements are
//! wake channels ([`KeySpace::wake_channel`](crate::KeySpace::wake_channel)), each at
//! most once (a registration moves the channel to the tail), oldest first; the list
//! expires with the registration TTL, renewed by every registration.
//!
//! On a standalone server a popped waiter nobody listens on (a dead instance) is
//! skipped for the next, up to 4; on a Cluster `PUBLISH` counts only the node's own
//! subscribers, so the first popped waiter is final.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, LeaseName, OwnerClaim, Release, ReleaseWake, Releases, Waiter, WakeRelease};
use drain_core::{ErrorKind, LeaseToken, PortError};
use futures::StreamExt;
use redis::Value;

use crate::error::shape_error;
use crate::lease::millis;
use crate::reply;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// Waiters a standalone release tries before giving up: one that nobody listens on
/// (a dead instance) is skipped for the next.
const STANDALONE_TRIES: u32 = 4;

#[async_trait]
impl ReleaseWake for RedisStore {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        Ok(self.subscribe_releases(&self.keys().wake_channel(instance)).await?.boxed())
    }

    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.keys();
        let claims: Vec<(String, String)> =
            owners.iter().map(|o| (keys.owner_claim(o.as_str()), keys.owner_waiters(o.as_str()))).collect();
        let claims = claims.as_slice();
        let channel = keys.wake_channel(&waiter.instance);
        let channel = channel.as_str();
        let groups = self.groups(claims.iter().map(|(claim, _)| claim.as_str()));
        let ttl = millis(waiter.ttl);
        let read = self
            .holdings_by_slot("peek_wait", claims.len(), &groups, |group| async move {
                let keys: Vec<&str> =
                    group.iter().flat_map(|&i| [claims[i].0.as_str(), claims[i].1.as_str()]).collect();
                let args = |cmd: &mut redis::Cmd| {
                    cmd.arg(channel).arg(ttl);
                };
                match self.eval("peek_wait", &SCRIPTS.peek_wait, &keys, args).await? {
                    Value::Array(values) if values.len() == group.len() * 2 => Ok(values),
                    _ => Err(shape_error("peek_wait", self.endpoint(), "a reply of the wrong shape")),
                }
            })
            .await?;
        Ok(read.into_iter().map(reply::owner_claim).collect())
    }

    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        let keys = self.keys();
        let key = keys.lease(&LeaseName::owner(owner.as_str()));
        let waiters = keys.owner_waiters(owner.as_str());
        let channel = keys.wake_channel(&waiter.instance);
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttl)).arg(channel.as_str()).arg(millis(waiter.ttl));
        };
        let v = self.eval("acquire_wait", &SCRIPTS.acquire_wait, &[&key.lease, &key.fence, &waiters], args).await?;
        reply::acquire(&v).ok_or_else(|| shape_error("acquire_wait", self.endpoint(), &format!("{v:?}")))
    }

    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        let keys = self.keys();
        let key = keys.lease(&LeaseName::owner(owner.as_str()));
        let waiters = keys.owner_waiters(owner.as_str());
        let standalone = !self.is_cluster();
        let tries = match (wake, standalone) {
            (false, _) => 0,
            (true, true) => STANDALONE_TRIES,
            (true, false) => 1,
        };
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(owner.as_str()).arg(tries).arg(if standalone { "1" } else { "0" });
        };
        let v = self.eval("release_wake", &SCRIPTS.release_wake, &[&key.lease, &waiters], args).await?;
        let bad = || shape_error("release_wake", self.endpoint(), &format!("{v:?}"));
        let Value::Array(items) = &v else { return Err(bad()) };
        match items.as_slice() {
            [Value::Int(1), Value::Int(woke)] => Ok(WakeRelease { release: Release::Released, woke: *woke == 1 }),
            [Value::Int(0), Value::Int(_)] => Ok(WakeRelease { release: Release::NotOwner, woke: false }),
            _ => Err(bad()),
        }
    }
}

impl RedisStore {
    /// Which rights the release wake-up needs beyond the minimal lease ACL this user
    /// lacks, empty when it has them all: `+rpush`, `+lrem`, `+lpop` (the waiter
    /// list; tried on `probe`, a list key under the key prefix, deleted again),
    /// `+publish` and `+subscribe`, or the channel pattern `&<channel>` when the
    /// commands are allowed but the wake channel is not. `probe` is a list key and
    /// `channel` a wake channel nobody uses (e.g. [`KeySpace::owner_waiters`] and
    /// [`KeySpace::wake_channel`] of a probe name).
    ///
    /// [`KeySpace::owner_waiters`]: crate::KeySpace::owner_waiters
    /// [`KeySpace::wake_channel`]: crate::KeySpace::wake_channel
    ///
    /// # Errors
    /// The mapped error of a probe that failed for another reason than a missing right.
    pub async fn missing_wake_rights(&self, probe: &str, channel: &str) -> Result<Vec<String>, PortError> {
        let cmd = |args: &[&str]| {
            let mut c = redis::cmd(args[0]);
            c.arg(&args[1..]);
            c
        };
        let probes = [
            ("+rpush", cmd(&["RPUSH", probe, "probe"])),
            ("+lrem", cmd(&["LREM", probe, "0", "probe"])),
            ("+lpop", cmd(&["LPOP", probe])),
            ("+publish", cmd(&["PUBLISH", channel, ""])),
        ];
        let mut missing = Vec::new();
        let mut channel_refused = false;
        for (right, probe) in &probes {
            match self.query("rights", probe).await {
                Ok(_) => {}
                Err(e) if e.kind == ErrorKind::Permission && e.message.to_ascii_lowercase().contains("channel") => {
                    channel_refused = true;
                }
                Err(e) if e.kind == ErrorKind::Permission => missing.push((*right).to_owned()),
                Err(mut e) => {
                    e.message = format!("probing {right}: {}", e.message);
                    return Err(e);
                }
            }
        }
        let _ = self.query("rights", &cmd(&["DEL", probe])).await;
        match self.subscribe_releases(channel).await {
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::Permission && e.message.to_ascii_lowercase().contains("channel") => {
                channel_refused = true;
            }
            Err(e) if e.kind == ErrorKind::Permission => missing.push("+subscribe".to_owned()),
            Err(mut e) => {
                e.message = format!("probing +subscribe: {}", e.message);
                return Err(e);
            }
        }
        if channel_refused {
            missing.push(format!("&{channel}"));
        }
        Ok(missing)
    }
}

//! Release wake-up on Redis (issue 7): an instance that finds an owner's claim held
//! registers as a waiter in the same round trip, and the holder's release pops ONE
//! waiter and publishes the owner on that waiter's channel, in the release's round
//! trip. drain-core's scheduler turns the notification into
//! [`Scheduler::on_release`](drain_core::admission::Scheduler::on_release); the
//! subscriber is [`RedisStore::subscribe_releases`].
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | [`RedisStore::peek_and_wait`] (K owners) | `EVALSHA peek_wait` (`GET` + `PTTL`; held: `LREM` + `RPUSH` + `PEXPIRE` on the waiter list) | 1 (1 per hash slot on a Cluster, in parallel) |
//! | [`RedisStore::acquire_or_wait`] | `EVALSHA acquire_wait` (`SET NX PX` + `INCR`; held: register) | 1 |
//! | [`RedisStore::release_and_wake`] | `EVALSHA release_wake` (compare-and-`DEL`, `LPOP` + `PUBLISH`) | 1 |
//!
//! Keys: the waiter list [`KeySpace::owner_waiters`](drain_core::KeySpace::owner_waiters)
//! shares the claim's hash tag, so every script stays in one slot. Its elements are
//! wake channels ([`KeySpace::wake_channel`](drain_core::KeySpace::wake_channel)),
//! each at most once, oldest first; the list expires with the registration TTL.

use std::time::Duration;

use drain_core::ports::{Acquire, Holding, Release};
use drain_core::{ErrorKind, LeaseKey, LeaseToken, PortError};
use redis::Value;

use crate::error::shape_error;
use crate::lease::millis;
use crate::reply;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// Waiters a standalone release tries before giving up: one that nobody listens on
/// (a dead instance) is skipped for the next.
const STANDALONE_TRIES: u32 = 4;

/// This instance as a waiter: where its wake-ups arrive and how long a registration
/// lives (longer than the claim retry window, so a waiter is still registered when
/// its backstop timer would fire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The wake channel, e.g. `KeySpace::wake_channel(instance)`.
    pub channel: String,
    /// The waiter list's TTL, renewed by every registration.
    pub ttl: Duration,
}

/// What [`RedisStore::release_and_wake`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeRelease {
    /// The compare-and-delete's answer.
    pub release: Release,
    /// A waiter was popped and the owner published on its channel.
    pub woke: bool,
}

impl RedisStore {
    /// [`peek_many`](drain_core::ports::LeaseStore::peek_many) of the claim keys of
    /// `claims` (pairs of claim key and waiter list, e.g. `KeySpace::owner_claim` and
    /// `KeySpace::owner_waiters` of one owner), registering `waiter` on the waiter list
    /// of every claim found held, in the same round trip (one per hash slot on a
    /// Cluster). Answers in the order of `claims`.
    ///
    /// # Errors
    /// The mapped error of the first failed round trip, or `Shape` for an unexpected
    /// reply (e.g. a claim key holding another type).
    pub async fn peek_and_wait(
        &self,
        claims: &[(String, String)],
        waiter: &Waiter,
    ) -> Result<Vec<Option<Holding>>, PortError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups(claims.iter().map(|(claim, _)| claim.as_str()));
        let ttl = millis(waiter.ttl);
        self.holdings_by_slot("peek_wait", claims.len(), &groups, |group| async move {
            let keys: Vec<&str> = group.iter().flat_map(|&i| [claims[i].0.as_str(), claims[i].1.as_str()]).collect();
            let args = |cmd: &mut redis::Cmd| {
                cmd.arg(waiter.channel.as_str()).arg(ttl);
            };
            match self.eval("peek_wait", &SCRIPTS.peek_wait, &keys, args).await? {
                Value::Array(values) if values.len() == group.len() * 2 => Ok(values),
                _ => Err(shape_error("peek_wait", self.endpoint(), "a reply of the wrong shape")),
            }
        })
        .await
    }

    /// [`acquire`](drain_core::ports::LeaseStore::acquire) of an owner's claim that,
    /// when the claim is held, registers `waiter` on the owner's waiter list `waiters`
    /// (same hash slot as `key`) in the same round trip; when acquired, it removes
    /// `waiter` from the list.
    ///
    /// # Errors
    /// The mapped error of the round trip, or `Shape` for an unexpected reply.
    pub async fn acquire_or_wait(
        &self,
        key: &LeaseKey,
        waiters: &str,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(millis(ttl)).arg(waiter.channel.as_str()).arg(millis(waiter.ttl));
        };
        let v = self.eval("acquire_wait", &SCRIPTS.acquire_wait, &[&key.lease, &key.fence, waiters], args).await?;
        reply::acquire(&v).ok_or_else(|| shape_error("acquire_wait", self.endpoint(), &format!("{v:?}")))
    }

    /// [`release`](drain_core::ports::LeaseStore::release) of an owner's claim that,
    /// when `wake` and the claim was ours, pops the oldest waiter of `waiters` (same
    /// hash slot as `key`) and publishes `owner` on its channel: one waiter, in the
    /// release's round trip. On a standalone server a popped waiter nobody listens on
    /// is skipped for the next (up to 4); on a Cluster the first popped is notified.
    /// Pass `wake = false` when the holder will continue with the owner at once.
    ///
    /// # Errors
    /// The mapped error of the round trip, or `Shape` for an unexpected reply.
    pub async fn release_and_wake(
        &self,
        key: &LeaseKey,
        waiters: &str,
        token: &LeaseToken,
        owner: &str,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        let standalone = !self.is_cluster();
        let tries = match (wake, standalone) {
            (false, _) => 0,
            (true, true) => STANDALONE_TRIES,
            (true, false) => 1,
        };
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(token.as_str()).arg(owner).arg(tries).arg(if standalone { "1" } else { "0" });
        };
        let v = self.eval("release_wake", &SCRIPTS.release_wake, &[&key.lease, waiters], args).await?;
        let bad = || shape_error("release_wake", self.endpoint(), &format!("{v:?}"));
        let Value::Array(items) = &v else { return Err(bad()) };
        match items.as_slice() {
            [Value::Int(1), Value::Int(woke)] => Ok(WakeRelease { release: Release::Released, woke: *woke == 1 }),
            [Value::Int(0), Value::Int(_)] => Ok(WakeRelease { release: Release::NotOwner, woke: false }),
            _ => Err(bad()),
        }
    }

    /// Which rights the release wake-up needs beyond the minimal lease ACL this user
    /// lacks, empty when it has them all: `+rpush`, `+lrem`, `+lpop` (the waiter
    /// list; tried on `probe`, a list key under the key prefix, deleted again),
    /// `+publish` and `+subscribe`, or the channel pattern `&<channel>` when the
    /// commands are allowed but the wake channel is not. `channel` is a probe wake
    /// channel nobody listens on (e.g. `KeySpace::wake_channel("<instance>.probe")`).
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

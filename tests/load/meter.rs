//! A metering wrapper around `RedisStore`: counts every port call per operation and
//! its errors, and keeps the commands the server must have counted for the calls
//! that answered, from what each script or pipeline does (crates/adapter-redis:
//! `src/scripts/*.lua`, `peek_pipe`). At the end the model is compared with the
//! server's `INFO commandstats` deltas: the hot path must send nothing else.
//!
//! Per call, standalone server (one hash slot group):
//!
//! | call | sent | run inside the script |
//! |---|---|---|
//! | acquire | 1 `EVALSHA` | acquired: `SET` + `INCR` + `PEXPIRETIME` (+ a `SET` when the clock passed the counter: at most once a millisecond, so counted as slack); held: `SET` + `GET` + `PTTL` |
//! | release | 1 `EVALSHA` | `GET` (+ `DEL` when released) |
//! | renew | 1 `EVALSHA` | `GET` (+ `PEXPIRE` when renewed) |
//! | peek_many of K | 1 pipeline: K `GET` + K `PTTL` | — |
//! | claim_batch of K | 1 `EVALSHA` | K `GET` + one `SET` per key claimed |
//! | settle_batch of K | 1 `EVALSHA` | K `GET` + one `SET` (done) or `DEL` (release) per key settled |
//! | settle_then_claim of K + J | 1 `EVALSHA` | K + J `GET`, then as settle_batch of K and claim_batch of J |
//!
//! A call dropped before its answer (the core drops a renewal in flight when the
//! drain ends first) may or may not have run: it widens the model by at most what
//! it could have run, and is reported.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use adapter_redis::RedisStore;
use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimState, ClaimStore, ClaimTtls, Holding, LeaseName, LeaseStore, MessageId, OwnerClaim, OwnerClaims,
    Release, Renew, SettleAction, SettleResult, SettledThenClaimed, Settlement,
};
use drain_core::{LeaseToken, PortError};

use crate::parts::lock;

/// What the calls of one workload did.
#[derive(Default)]
pub(crate) struct Meter {
    inner: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    /// op -> calls.
    calls: BTreeMap<&'static str, u64>,
    /// op -> failed calls.
    errors: BTreeMap<&'static str, u64>,
    /// op -> keys passed (batched operations).
    keys: BTreeMap<&'static str, u64>,
    /// command -> count the server must show.
    expected: BTreeMap<&'static str, u64>,
    /// op -> calls dropped before their answer (a renewal in flight when the drain
    /// ended: the core drops the renew loop). Sent or not, answer unread.
    cancelled: BTreeMap<&'static str, u64>,
    /// command -> the most the cancelled calls may have run.
    slack: BTreeMap<&'static str, u64>,
    /// First few error messages, for the report.
    messages: Vec<String>,
}

/// A call in flight: counted as cancelled if dropped before its answer.
struct InFlight<'a> {
    meter: &'a Meter,
    op: &'static str,
    upper: Vec<(&'static str, u64)>,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut t = lock(&self.meter.inner);
            *t.cancelled.entry(self.op).or_insert(0) += 1;
            for (cmd, n) in &self.upper {
                *t.slack.entry(cmd).or_insert(0) += n;
            }
        }
    }
}

impl Meter {
    fn start(&self, op: &'static str, upper: &[(&'static str, u64)]) -> InFlight<'_> {
        InFlight { meter: self, op, upper: upper.to_vec(), done: false }
    }

    fn record<T>(
        &self,
        op: &'static str,
        keys: usize,
        result: &Result<T, PortError>,
        commands: &[(&'static str, u64)],
    ) {
        let mut t = lock(&self.inner);
        *t.calls.entry(op).or_insert(0) += 1;
        *t.keys.entry(op).or_insert(0) += keys as u64;
        match result {
            Ok(_) => {
                for (cmd, n) in commands {
                    *t.expected.entry(cmd).or_insert(0) += n;
                }
            }
            Err(e) => {
                *t.errors.entry(op).or_insert(0) += 1;
                if t.messages.len() < 5 {
                    t.messages.push(format!("{op}: {e}"));
                }
            }
        }
    }

    pub(crate) fn calls(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner).calls.clone()
    }

    pub(crate) fn keys(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner).keys.clone()
    }

    pub(crate) fn errors(&self) -> u64 {
        lock(&self.inner).errors.values().sum()
    }

    pub(crate) fn error_messages(&self) -> Vec<String> {
        lock(&self.inner).messages.clone()
    }

    pub(crate) fn expected(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner).expected.clone()
    }

    pub(crate) fn errors_by_op(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner).errors.clone()
    }

    pub(crate) fn cancelled(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner).cancelled.clone()
    }

    /// A command a call that answered may or may not have run.
    fn may(&self, cmd: &'static str, n: u64) {
        *lock(&self.inner).slack.entry(cmd).or_insert(0) += n;
    }

    pub(crate) fn slack(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.inner).slack.clone()
    }
}

/// The store of one instance, metered.
#[derive(Clone)]
pub(crate) struct Metered {
    pub(crate) store: RedisStore,
    pub(crate) meter: std::sync::Arc<Meter>,
}

fn count<T>(items: &[T], pred: impl Fn(&T) -> bool) -> u64 {
    items.iter().filter(|x| pred(x)).count() as u64
}

/// The `SET`s (marked done) and `DEL`s (released) a settlement script ran for the
/// settlements that answered `Settled`.
fn settle_writes(settlements: &[Settlement], results: &Result<Vec<SettleResult>, PortError>) -> (u64, u64) {
    let Ok(results) = results else { return (0, 0) };
    let settled = |action| {
        let pairs = settlements.iter().zip(results);
        pairs.filter(|(s, r)| s.action == action && **r == SettleResult::Settled).count() as u64
    };
    (settled(SettleAction::Done), settled(SettleAction::Release))
}

#[async_trait]
impl LeaseStore for Metered {
    async fn acquire(&self, key: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        let upper = [("evalsha", 1), ("set", 2), ("incr", 1), ("pexpiretime", 1), ("get", 1), ("pttl", 1)];
        let mut call = self.meter.start("acquire", &upper);
        let r = self.store.acquire(key, token, ttl).await;
        call.done = true;
        let cmds: &[(&str, u64)] = match &r {
            Ok(Acquire::Acquired { .. }) => {
                // The counter is raised to the clock when it moved past it.
                self.meter.may("set", 1);
                &[("evalsha", 1), ("set", 1), ("incr", 1), ("pexpiretime", 1)]
            }
            _ => &[("evalsha", 1), ("set", 1), ("get", 1), ("pttl", 1)],
        };
        self.meter.record("acquire", 1, &r, cmds);
        r
    }

    async fn release(&self, key: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        let mut call = self.meter.start("release", &[("evalsha", 1), ("get", 1), ("del", 1)]);
        let r = self.store.release(key, token).await;
        call.done = true;
        let del = u64::from(matches!(r, Ok(Release::Released)));
        self.meter.record("release", 1, &r, &[("evalsha", 1), ("get", 1), ("del", del)]);
        r
    }

    async fn renew(&self, key: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        let mut call = self.meter.start("renew", &[("evalsha", 1), ("get", 1), ("pexpire", 1)]);
        let r = self.store.renew(key, token, ttl).await;
        call.done = true;
        let pexpire = u64::from(matches!(r, Ok(Renew::Renewed)));
        self.meter.record("renew", 1, &r, &[("evalsha", 1), ("get", 1), ("pexpire", pexpire)]);
        r
    }

    async fn peek(&self, key: &LeaseName) -> Result<Option<Holding>, PortError> {
        let mut call = self.meter.start("peek", &[("get", 2), ("pttl", 1)]);
        let r = self.store.peek(key).await;
        call.done = true;
        self.meter.record("peek", 1, &r, &[("get", 2), ("pttl", 1)]);
        r
    }
}

#[async_trait]
impl OwnerClaims for Metered {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        let k = owners.len() as u64;
        let mut call = self.meter.start("peek_owners", &[("get", k), ("pttl", k)]);
        let r = self.store.peek_owners(owners).await;
        call.done = true;
        self.meter.record("peek_owners", owners.len(), &r, &[("get", k), ("pttl", k)]);
        r
    }
}

#[async_trait]
impl ClaimStore for Metered {
    async fn claim_batch(
        &self,
        queue: &str,
        keys: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        let k = keys.len() as u64;
        let mut call = self.meter.start("claim_batch", &[("evalsha", 1), ("get", k), ("set", k)]);
        let r = self.store.claim_batch(queue, keys, token, pending_ttl).await;
        call.done = true;
        let claimed = r.as_ref().map_or(0, |s| count(s, |c| matches!(c, ClaimState::Claimed)));
        let sent = u64::from(!keys.is_empty());
        self.meter.record("claim_batch", keys.len(), &r, &[("evalsha", sent), ("get", k), ("set", claimed)]);
        r
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        let k = settlements.len() as u64;
        let mut call = self.meter.start("settle_batch", &[("evalsha", 1), ("get", k), ("set", k), ("del", k)]);
        let r = self.store.settle_batch(queue, settlements, token, done_ttl).await;
        call.done = true;
        let (set, del) = settle_writes(settlements, &r);
        let sent = u64::from(!settlements.is_empty());
        let cmds = [("evalsha", sent), ("get", k), ("set", set), ("del", del)];
        self.meter.record("settle_batch", settlements.len(), &r, &cmds);
        r
    }

    /// The tick's call for every batch after the first. With nothing to settle or
    /// nothing to claim the store makes the one call that is left: metered as that.
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        if settlements.is_empty() || ids.is_empty() {
            return drain_core::ports::settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await;
        }
        let (k, j) = (settlements.len() as u64, ids.len() as u64);
        let upper = [("evalsha", 1), ("get", k + j), ("set", k + j), ("del", k)];
        let mut call = self.meter.start("settle_then_claim", &upper);
        let answer = self.store.settle_then_claim(queue, settlements, ids, token, ttls).await;
        call.done = true;
        let (mut set, del) = settle_writes(settlements, &answer.settled);
        if let Ok(states) = &answer.claimed {
            set += count(states, |c| matches!(c, ClaimState::Claimed));
        }
        let both = answer.settled.as_ref().and(answer.claimed.as_ref()).map(|_| ()).map_err(PortError::clone);
        let cmds = [("evalsha", 1), ("get", k + j), ("set", set), ("del", del)];
        self.meter.record("settle_then_claim", settlements.len() + ids.len(), &both, &cmds);
        answer
    }
}

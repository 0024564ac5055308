//! Metering hooks on `RedisStore`'s calls: count every port call per operation and
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
use std::sync::{Arc, Mutex};

use adapter_redis::RedisStore;
use async_trait::async_trait;
use drain_core::PortError;
use drain_core::layer::{Answer, Call, Forward, Hooks, Run};
use drain_core::ports::{
    Acquire, ClaimState, MessageId, Release, Renew, SettleAction, SettleResult, Settlement, StoreOffers,
};

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

/// The store of one instance, metered: its calls through drain-core's layer, with
/// the meter (shared by the instances) as hooks.
pub(crate) type Metered = Forward<Arc<RedisStore>, Arc<Meter>>;

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

/// The `SET`s a claim script ran: one per message claimed.
fn claim_writes(states: &Result<Vec<ClaimState>, PortError>) -> u64 {
    states.as_ref().map_or(0, |s| count(s, |c| matches!(c, ClaimState::Claimed)))
}

/// What metering calls `call`: its operation and the most it can run. With
/// nothing to settle or nothing to claim the store makes the one call that is
/// left, metered as that.
fn upper(call: Call<'_>) -> (&'static str, Vec<(&'static str, u64)>) {
    let n = |items: usize| items as u64;
    match call {
        Call::Acquire(_) => {
            ("acquire", vec![("evalsha", 1), ("set", 2), ("incr", 1), ("pexpiretime", 1), ("get", 1), ("pttl", 1)])
        }
        Call::Release(_) => ("release", vec![("evalsha", 1), ("get", 1), ("del", 1)]),
        Call::Renew(_) => ("renew", vec![("evalsha", 1), ("get", 1), ("pexpire", 1)]),
        Call::Peek(_) => ("peek", vec![("get", 2), ("pttl", 1)]),
        Call::PeekOwners(o) => ("peek_owners", vec![("get", n(o.len())), ("pttl", n(o.len()))]),
        Call::ClaimBatch(_, ids) | Call::SettleThenClaim(_, [], ids) => {
            ("claim_batch", vec![("evalsha", 1), ("get", n(ids.len())), ("set", n(ids.len()))])
        }
        Call::SettleBatch(_, s) | Call::SettleThenClaim(_, s, []) => {
            let k = n(s.len());
            ("settle_batch", vec![("evalsha", 1), ("get", k), ("set", k), ("del", k)])
        }
        Call::SettleThenClaim(_, s, ids) => {
            let (k, j) = (n(s.len()), n(ids.len()));
            ("settle_then_claim", vec![("evalsha", 1), ("get", k + j), ("set", k + j), ("del", k)])
        }
        other => (other.name(), Vec::new()),
    }
}

#[async_trait]
impl Hooks for Meter {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        let (op, upper) = upper(call);
        let mut flight = self.start(op, &upper);
        let answered = run.await;
        flight.done = true;
        answered
    }

    /// The load drives admission by its peeks alone, the path the model counts: the
    /// store's release wake-up and drain stamps stay hidden.
    fn offers(&self, _: StoreOffers) -> StoreOffers {
        StoreOffers::NONE
    }

    fn answered(&self, call: Call<'_>, answer: Answer<'_>) {
        match (call, answer) {
            (Call::Acquire(_), Answer::Acquire(r)) => {
                let cmds: &[(&str, u64)] = if let Ok(Acquire::Acquired { .. }) = r {
                    // The counter is raised to the clock when it moved past it.
                    self.may("set", 1);
                    &[("evalsha", 1), ("set", 1), ("incr", 1), ("pexpiretime", 1)]
                } else {
                    &[("evalsha", 1), ("set", 1), ("get", 1), ("pttl", 1)]
                };
                self.record("acquire", 1, r, cmds);
            }
            (Call::Release(_), Answer::Release(r)) => {
                let del = u64::from(matches!(r, Ok(Release::Released)));
                self.record("release", 1, r, &[("evalsha", 1), ("get", 1), ("del", del)]);
            }
            (Call::Renew(_), Answer::Renew(r)) => {
                let pexpire = u64::from(matches!(r, Ok(Renew::Renewed)));
                self.record("renew", 1, r, &[("evalsha", 1), ("get", 1), ("pexpire", pexpire)]);
            }
            (Call::Peek(_), Answer::Peek(r)) => self.record("peek", 1, r, &[("get", 2), ("pttl", 1)]),
            (Call::PeekOwners(o), Answer::Owners(r)) => {
                let k = o.len() as u64;
                self.record("peek_owners", o.len(), r, &[("get", k), ("pttl", k)]);
            }
            (Call::ClaimBatch(_, ids), Answer::Claimed(r)) => self.claimed(ids, r),
            (Call::SettleBatch(_, s), Answer::Settled(r)) => self.settled(s, r),
            (Call::SettleThenClaim(_, [], ids), Answer::SettledThenClaimed(a)) => self.claimed(ids, &a.claimed),
            (Call::SettleThenClaim(_, s, []), Answer::SettledThenClaimed(a)) => self.settled(s, &a.settled),
            (Call::SettleThenClaim(_, s, ids), Answer::SettledThenClaimed(a)) => {
                let (k, j) = (s.len() as u64, ids.len() as u64);
                let (set, del) = settle_writes(s, &a.settled);
                let set = set + claim_writes(&a.claimed);
                let both = a.settled.as_ref().and(a.claimed.as_ref()).map(|_| ()).map_err(PortError::clone);
                let cmds = [("evalsha", 1), ("get", k + j), ("set", set), ("del", del)];
                self.record("settle_then_claim", s.len() + ids.len(), &both, &cmds);
            }
            // The load makes no other call; one it made would be counted without commands.
            (other, _) => self.record::<()>(other.name(), 0, &Ok(()), &[]),
        }
    }
}

impl Meter {
    fn claimed(&self, ids: &[MessageId], r: &Result<Vec<ClaimState>, PortError>) {
        let k = ids.len() as u64;
        let cmds = [("evalsha", u64::from(!ids.is_empty())), ("get", k), ("set", claim_writes(r))];
        self.record("claim_batch", ids.len(), r, &cmds);
    }

    fn settled(&self, settlements: &[Settlement], r: &Result<Vec<SettleResult>, PortError>) {
        let k = settlements.len() as u64;
        let (set, del) = settle_writes(settlements, r);
        let cmds = [("evalsha", u64::from(!settlements.is_empty())), ("get", k), ("set", set), ("del", del)];
        self.record("settle_batch", settlements.len(), r, &cmds);
    }
}

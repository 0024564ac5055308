//! The tick when a store misbehaves, and what each switch position means for it:
//! a claim store that fails ends the receiving, a frozen store costs a tick one
//! timeout, every claim settlement is checked, and Off and Shadow behave as without
//! the feature (docs/reliability.md).

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::event::{Event, LeaseOp, MessageOutcome};
use drain_core::guard::LeaseStatus;
use drain_core::memory::{ManualClock, MemoryStore, StoredClaim, block_on};
use drain_core::ports::{
    ClaimTtls, Clock, Message, MessageId, SettleAction, Settlement, SubmitContext, Submitter,
    settle_then_claim_in_two_calls,
};
use drain_core::testkit::{Call, FailSettle, Forward, Hooks, RecordingSubmitter, Run, TestRng, message};
use drain_core::tick::{
    ClaimHealth, InFlight, StaleClaims, TickControl, TickPorts, probe_claims, release_stale_claims, run_tick,
};
use drain_core::{ErrorKind, LeaseToken, PortError, Switch};
use support::{Harness, stats};

/// The id of the probe's claim (a NUL first: no broker hands out such an id).
const PROBE_ID: &str = "\u{0}drain-probe";

fn no_id() -> Message {
    {
        let mut m = message("no-id");
        m.message_id = None;
        m
    }
}

// ---------------------------------------------------------------------------------
// A failing claim store ends the receiving
// ---------------------------------------------------------------------------------

/// Once the claim store fails in a tick, the tick abandons what it holds and
/// receives nothing more, also when the batch was not wholly abandoned (a message
/// without an id was dead-lettered, one was a duplicate within the batch): before,
/// such a tick went on receiving the abandoned messages again, each receive a
/// delivery at the broker.
#[test]
fn a_claim_failure_ends_the_receiving_even_when_part_of_the_batch_was_settled() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.batch = 4;
    h.cfg.max_batches = Some(20);
    h.source.push(no_id());
    h.feed(&["a", "a", "b", "c", "d", "e"]);
    h.store.set_failing(Some(ErrorKind::Connection));
    let r = h.tick();
    assert_eq!(h.source.receive_calls(), 1, "no second receive after the claim store failed: {r:?}");
    assert_eq!(stats(&r), (4, 0, 0, 3, 1));
    assert_eq!(h.target.attempts(), 0, "fail closed");
    assert_eq!(r.claims, ClaimHealth::Failed);
    assert_eq!(r.stats.map(|s| s.claim_errors), Some(2), "a and b: the claim failed; the second a was a duplicate");
    assert_eq!(h.source.ready_len(), 6, "everything with an id is back for the next tick");
}

/// A settlement that fails is a claim store failure too: the tick stops receiving
/// after it. Batch k's settlement is one call with batch k+2's claims (batch k+1 is
/// being submitted meanwhile, its claims taken in the call before), so the batch
/// received with it goes back (its claims could not be taken either): one batch, as
/// when a claim call fails. The batch in flight is still submitted and completed;
/// its claims, unsettled, stay pending until their TTL.
#[test]
fn a_failed_settlement_ends_the_receiving() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.batch = 2;
    h.feed(&["a", "b", "c", "d", "e", "f", "g", "h"]);
    let claims = Forward::new(h.store.clone(), FailSettle);
    let (store, target) = (h.store.clone(), h.target.clone());
    let r = h.tick_on(&*store, &claims, &*target);
    assert_eq!(h.source.receive_calls(), 3, "no receive after the settlement failed: {r:?}");
    assert_eq!(stats(&r), (6, 4, 0, 2, 0), "[a, b] and [c, d] are submitted and completed once, [e, f] goes back");
    assert_eq!(
        r.stats.map(|s| (s.claim_errors, s.claim_settle_errors)),
        Some((2, 4)),
        "[e, f]'s claims, and the settlements of [a, b] and then [c, d], each alone"
    );
    assert_eq!(target.attempts(), 4, "nothing of the third batch is submitted");
    assert_eq!(r.claims, ClaimHealth::Failed);
    assert_eq!(h.source.ready_len(), 4, "e and f are back, g and h wait, for the next tick");
}

/// A healthy tick reports its claims answered; a tick that asked nothing says so.
#[test]
fn the_report_says_how_the_claim_store_fared() {
    let mut h = Harness::new();
    let r = h.tick();
    assert_eq!(r.claims, ClaimHealth::NotAsked, "an empty queue asks no claim");
    h.feed(&["a"]);
    let r = h.tick();
    assert_eq!(r.claims, ClaimHealth::Answered);
    h.cfg.atomic_claim = Switch::Off;
    h.feed(&["b"]);
    assert_eq!(h.tick().claims, ClaimHealth::NotAsked);
}

// ---------------------------------------------------------------------------------
// A frozen store costs a tick one timeout
// ---------------------------------------------------------------------------------

/// How long the frozen store makes each call wait before it times out.
const TIMEOUT: Duration = Duration::from_secs(1);

/// A store that answers nothing: every call waits [`TIMEOUT`] on the (virtual)
/// clock, then fails with `Timeout`, as a frozen Redis does. The memory store
/// beneath is never reached.
struct Frozen {
    clock: Arc<ManualClock>,
    calls: std::sync::Mutex<Vec<&'static str>>,
}

impl Frozen {
    /// As lease and claim store.
    fn store(clock: &Arc<ManualClock>) -> Forward<Arc<MemoryStore>, Frozen> {
        let never_reached = Arc::new(MemoryStore::new(clock.clone()));
        Forward::new(never_reached, Frozen { clock: clock.clone(), calls: Default::default() })
    }

    fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().expect("calls").clone()
    }
}

#[async_trait]
impl Hooks for Frozen {
    async fn around(&self, call: Call<'_>, _: Run<'_>) -> Result<(), PortError> {
        self.calls.lock().expect("calls").push(call.name());
        self.clock.sleep_until(self.clock.now() + TIMEOUT).await;
        Err(PortError::new(ErrorKind::Timeout, "no answer within the response timeout"))
    }

    /// A settlement then claims are two calls, the claims never asked when the
    /// settlements time out.
    fn two_calls(&self) -> bool {
        true
    }
}

/// One frozen store for lease and claims (as the binary composes Redis): the acquire
/// times out, so the claims are known down too: the tick receives nothing (every
/// message would be abandoned), and the only other call is the best-effort release
/// of the acquire that may have landed late. Two timeouts, not one per operation
/// (before: acquire, claim, release — and a batch received and abandoned).
#[test]
fn a_frozen_store_costs_a_tick_one_timeout_and_no_receive() {
    let mut h = Harness::new();
    h.feed(&["a", "b"]);
    let frozen = Frozen::store(&h.clock);
    let start = h.clock.now();
    let target = h.target.clone();
    let r = h.tick_on(&frozen, &frozen, &*target);
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen));
    assert_eq!(frozen.hooks().calls(), ["acquire", "release"]);
    assert_eq!(h.clock.now().saturating_since(start), 2 * TIMEOUT);
    assert_eq!(h.source.receive_calls(), 0, "nothing received that could not be claimed");
    assert_eq!(r.claims, ClaimHealth::Failed);
    assert_eq!(stats(&r), (0, 0, 0, 0, 0));
    assert_eq!(h.source.ready_len(), 2);
}

/// Without the lease the first claim is what times out: that batch is abandoned and
/// nothing more is asked of the store or the source.
#[test]
fn a_frozen_claim_store_costs_a_tick_without_the_lease_one_timeout() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.batch = 2;
    h.feed(&["a", "b", "c"]);
    let frozen = Frozen::store(&h.clock);
    let start = h.clock.now();
    let target = h.target.clone();
    let r = h.tick_on(&frozen, &frozen, &*target);
    assert_eq!(frozen.hooks().calls(), ["claim_batch"]);
    assert_eq!(h.clock.now().saturating_since(start), TIMEOUT);
    assert_eq!(h.source.receive_calls(), 1);
    assert_eq!(stats(&r), (2, 0, 0, 2, 0));
}

/// A lease store that times out but is not the claim store (an embedder's two
/// stores): the lease store is left alone for the rest of the tick but for the
/// best-effort release, and the claims still work.
#[test]
fn a_frozen_lease_store_beside_a_working_claim_store_still_drains() {
    let mut h = Harness::new();
    h.feed(&["a", "b"]);
    let frozen = Frozen::store(&h.clock);
    let (store, target) = (h.store.clone(), h.target.clone());
    let r = h.tick_on(&frozen, &*store, &*target);
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen));
    assert_eq!(stats(&r), (2, 2, 0, 0, 0));
    assert_eq!(r.claims, ClaimHealth::Answered);
    assert_eq!(frozen.hooks().calls(), ["acquire", "release"]);
}

/// A renewal that times out marks nothing down: renewals run beside the drain and
/// never delay it, so they go on (a later one may find the lease lost, which must
/// still cancel the drain), and the claims and the release still go to the store.
#[test]
fn a_renewal_timeout_marks_nothing_down() {
    let mut h = Harness::with_delay(Duration::from_secs(5));
    h.cfg.lease_ttl = Duration::from_secs(30);
    // One submit at a time: the renewals fall between submits of known times.
    (h.cfg.batch, h.cfg.in_flight) = (2, InFlight::Fixed);
    h.feed(&["a", "b", "c", "d", "e"]); // 25 s of submits: renewals at 10 s and 20 s
    let slow = Forward::new(h.store.clone(), SlowRenew { clock: h.clock.clone() });
    let target = h.target.clone();
    let r = h.tick_on(&slow, &*h.store.clone(), &*target);
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Renew, result: "error", .. })), 2, "{r:?}");
    assert_eq!(stats(&r), (5, 5, 0, 0, 0), "the drain went on, batch after batch");
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "released", .. })), 1);
    assert_eq!(r.claims, ClaimHealth::Answered);
}

/// Renewals that all time out; every other call passes through.
struct SlowRenew {
    clock: Arc<ManualClock>,
}

#[async_trait]
impl Hooks for SlowRenew {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        if !matches!(call, Call::Renew(_)) {
            return run.await;
        }
        self.clock.sleep_until(self.clock.now() + TIMEOUT).await;
        Err(PortError::new(ErrorKind::Timeout, "no answer in time"))
    }
}

// ---------------------------------------------------------------------------------
// A claim call that timed out may still run
// ---------------------------------------------------------------------------------

/// Claim call number `late` (counting from 1) runs but answers `kind`, as a frozen
/// Redis runs a timed-out call when it thaws; every other call passes through.
struct LateClaims {
    late: u32,
    kind: ErrorKind,
    /// The failing call never reaches the store (and says so) instead of running late.
    unsent: bool,
    calls: std::sync::atomic::AtomicU32,
}

impl LateClaims {
    fn new(inner: Arc<MemoryStore>, late: u32, kind: ErrorKind) -> Forward<Arc<MemoryStore>, Self> {
        Self::over(inner, late, kind, false)
    }

    fn never_sent(inner: Arc<MemoryStore>, late: u32, kind: ErrorKind) -> Forward<Arc<MemoryStore>, Self> {
        Self::over(inner, late, kind, true)
    }

    fn over(inner: Arc<MemoryStore>, late: u32, kind: ErrorKind, unsent: bool) -> Forward<Arc<MemoryStore>, Self> {
        let calls = std::sync::atomic::AtomicU32::new(0);
        Forward::new(inner, LateClaims { late, kind, unsent, calls })
    }
}

#[async_trait]
impl Hooks for LateClaims {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        if !matches!(call, Call::ClaimBatch(..))
            || self.calls.fetch_add(1, std::sync::atomic::Ordering::AcqRel) + 1 != self.late
        {
            return run.await;
        }
        if self.unsent {
            return Err(PortError::new(self.kind, "refused the connection").never_sent());
        }
        run.await?;
        Err(PortError::new(self.kind, "no answer within the response timeout"))
    }

    /// The claims after settlements are a `claim_batch` of their own, counted.
    fn two_calls(&self) -> bool {
        true
    }
}

/// A claim call that timed out but ran took `pending` claims with the tick's token
/// for messages the tick gave back: the report names them, the release frees them,
/// and the next tick submits them (before, every redelivery found them held
/// elsewhere until the pending TTL). An id the tick submitted earlier, whose `done`
/// mark never landed, is not named: its pending claim stands for that submit, and
/// its redelivered copy is not submitted again.
#[test]
fn claims_a_timed_out_call_took_are_named_released_and_then_taken() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.batch = 2;
    h.feed(&["a", "b", "b", "c"]);
    let late = LateClaims::new(h.store.clone(), 2, ErrorKind::Timeout);
    let (store, target) = (h.store.clone(), h.target.clone());
    let token = h.token();
    let ports = TickPorts::new(&*h.source, &*target, &*h.clock, &h.observer).leases(&*store).claims(&late);
    let r = block_on(&h.clock, run_tick(&h.cfg, &ports, &token, &Default::default()));
    assert_eq!(stats(&r), (4, 2, 0, 2, 0), "[a, b] submitted, [b, c] given back: {r:?}");
    assert_eq!(r.claims, ClaimHealth::Failed);
    assert_eq!(r.stale_claims, [MessageId::from("c")], "b holds the first batch's claim for its submit");
    let pending = |id: &str| matches!(h.claim(id), Some(StoredClaim::Pending { .. }));
    assert!(pending("b") && pending("c"), "both pending with our token: the late call ran");

    let stale = StaleClaims { token, ids: r.stale_claims.clone() };
    block_on(&h.clock, release_stale_claims(&h.cfg, &*h.store, &stale)).expect("released");
    assert_eq!(h.claim("c"), None, "released");
    assert!(pending("b"), "untouched");

    let r = h.tick();
    assert_eq!(stats(&r), (2, 1, 0, 1, 0), "c submitted, b's copy waits for the first claim: {r:?}");
    assert_eq!(target.attempts(), 3, "a, b and c, each once");
    assert!(r.stale_claims.is_empty());
}

/// A release compares the token: a claim another holder took, or `done`, is left
/// alone, and so is an id whose late call never ran.
#[test]
fn the_release_of_stale_claims_touches_only_its_own() {
    let mut h = Harness::new();
    let token = h.token();
    h.put_claim("theirs", StoredClaim::Pending { token: "other:1".into() });
    h.put_claim("done", StoredClaim::Done { token: token.as_str().to_owned() });
    let ids = ["theirs", "done", "never"].map(MessageId::from).to_vec();
    block_on(&h.clock, release_stale_claims(&h.cfg, &*h.store, &StaleClaims { token, ids })).expect("answered");
    assert_eq!(h.claim("theirs"), Some(StoredClaim::Pending { token: "other:1".into() }));
    assert!(matches!(h.claim("done"), Some(StoredClaim::Done { .. })));
    assert_eq!(h.claim("never"), None);
    h.store.set_failing(Some(ErrorKind::Timeout));
    let stale = StaleClaims { token: h.token(), ids: vec![MessageId::from("x")] };
    let e = block_on(&h.clock, release_stale_claims(&h.cfg, &*h.store, &stale)).expect_err("down");
    assert_eq!(e.kind, ErrorKind::Timeout);
}

/// The claims the default `settle_then_claim` did not ask for, because the
/// settlements before them failed, are an error that ran nothing: before, they
/// carried the settle's timeout, and a tick named them as claims a late call might
/// take.
#[test]
fn claims_never_asked_for_did_not_run() {
    let mut h = Harness::new();
    let token = h.token();
    h.store.set_failing(Some(ErrorKind::Timeout));
    let ttls = ClaimTtls { pending: Duration::from_secs(300), done: Duration::from_secs(600) };
    let settle = [Settlement { id: MessageId::from("a"), action: SettleAction::Release }];
    let ids = [MessageId::from("b")];
    let answer =
        block_on(&h.clock, settle_then_claim_in_two_calls(&*h.store, &h.cfg.queue, &settle, &ids, &token, ttls));
    let settled = answer.settled.expect_err("the settle timed out");
    assert!(settled.may_have_run(), "{settled}");
    let claimed = answer.claimed.expect_err("not asked");
    assert_eq!(claimed.kind, ErrorKind::Timeout, "{claimed}");
    assert!(!claimed.may_have_run(), "{claimed}");
    assert_eq!(h.claim("b"), None);
}

/// Only a failure that may still have run names its claims: a refusal (the store
/// is unavailable, a right is missing) ran nothing, nor did a request that never
/// reached the store (a connection refused: before, a `Connection` error named its
/// claims whatever happened, and `drain run --once` probed for 10 s to release
/// claims nobody could have taken), nor a call the tick did not make because the
/// store was known down.
#[test]
fn only_a_call_that_may_have_run_names_stale_claims() {
    for (kind, unsent, named) in [
        (ErrorKind::Timeout, false, true),
        (ErrorKind::Connection, false, true),
        (ErrorKind::Connection, true, false),
        (ErrorKind::Timeout, true, false),
        (ErrorKind::Unavailable, false, false),
        (ErrorKind::Permission, false, false),
    ] {
        let mut h = Harness::new();
        h.cfg.singleflight = Switch::Off;
        h.feed(&["a", "b"]);
        let late = if unsent { LateClaims::never_sent } else { LateClaims::new };
        let late = late(h.store.clone(), 1, kind);
        let (store, target) = (h.store.clone(), h.target.clone());
        let r = h.tick_on(&*store, &late, &*target);
        assert_eq!(r.claims, ClaimHealth::Failed, "{kind}");
        let expected = if named { ["a", "b"].map(MessageId::from).to_vec() } else { Vec::new() };
        assert_eq!(r.stale_claims, expected, "{kind}, unsent {unsent}");
        assert_eq!(h.claim("a").is_some(), !unsent, "{kind}, unsent {unsent}: only a call that ran took claims");
    }
    let mut h = Harness::new();
    h.feed(&["a"]);
    let frozen = Frozen::store(&h.clock);
    let target = h.target.clone();
    let r = h.tick_on(&frozen, &frozen, &*target);
    assert!(r.stale_claims.is_empty(), "the acquire timed out: no claim call was made");
}

// ---------------------------------------------------------------------------------
// The probe
// ---------------------------------------------------------------------------------

/// The probe claims and releases its own key in the queue's slot, receives nothing,
/// and fails with the store.
#[test]
fn the_probe_claims_and_releases_a_key_no_message_has() {
    let h = Harness::new();
    let token = LeaseToken::generate("me", &mut TestRng::new(7));
    block_on(&h.clock, probe_claims(&h.cfg, &*h.store, &token)).expect("a healthy store answers");
    assert_eq!(h.store.calls().get("claim_batch"), Some(&1));
    assert_eq!(h.store.calls().get("settle_batch"), Some(&1));
    assert_eq!(h.claim(PROBE_ID), None, "released");
    assert_eq!(h.source.receive_calls(), 0);
    // Another prober's pending claim is an answer too.
    h.put_claim(PROBE_ID, StoredClaim::Pending { token: "other:1".into() });
    block_on(&h.clock, probe_claims(&h.cfg, &*h.store, &token)).expect("answered");
    h.store.set_failing(Some(ErrorKind::Timeout));
    let e = block_on(&h.clock, probe_claims(&h.cfg, &*h.store, &token)).expect_err("down");
    assert_eq!(e.kind, ErrorKind::Timeout);
}

/// Progress is readable while the tick runs, and ends equal to the report.
#[test]
fn progress_counts_what_the_tick_did() {
    let mut h = Harness::new();
    h.cfg.batch = 2;
    h.feed(&["a", "b", "c"]);
    let token = h.token();
    let progress = TickControl::default();
    let ports = TickPorts::new(&*h.source, &*h.target, &*h.clock, &h.observer).leases(&*h.store).claims(&*h.store);
    let r = block_on(&h.clock, run_tick(&h.cfg, &ports, &token, &progress));
    assert_eq!((progress.received(), progress.submitted()), (3, 3));
    assert_eq!(stats(&r).0, 3);
}

// ---------------------------------------------------------------------------------
// Every claim settlement is checked
// ---------------------------------------------------------------------------------

/// A submit that outlives the pending claim: another holder takes the message's claim
/// over meanwhile, so marking ours done answers `NotOwner`. The message was submitted
/// and may be submitted again by the other holder: a possible duplicate, counted per
/// message (`claim_expired`) and in the report. A release answered `NotOwner` after a
/// failed submit is counted the same way.
#[test]
fn a_settlement_answered_not_owner_is_counted_as_a_possible_duplicate() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.claim_pending_ttl = Duration::from_secs(10);
    h.cfg.max_batches = Some(1);
    h.feed(&["a", "b", "c"]);
    let slow = Takeover {
        store: h.store.clone(),
        inner: RecordingSubmitter::with_delay(h.clock.clone(), Duration::from_secs(11)),
    };
    let store = h.store.clone();
    let r = h.tick_on(&*store, &*store, &slow);
    let s = r.stats.expect("stats");
    assert_eq!((s.submitted, s.abandoned, s.claims_expired), (2, 1, 3), "{s:?}");
    assert_eq!(h.messages(MessageOutcome::ClaimExpired), 3);
    assert_eq!(h.messages(MessageOutcome::ClaimSettleFailed), 0, "answered, not failed");
    let held = h.claim("a");
    assert_eq!(held, Some(StoredClaim::Pending { token: "other:1".into() }), "the other holder's claim is untouched");
}

/// Submits slowly; meanwhile another holder takes over each message's (expired)
/// claim. Message `c` fails to submit.
struct Takeover {
    store: Arc<MemoryStore>,
    inner: RecordingSubmitter,
}

#[async_trait]
impl Submitter for Takeover {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let id = message.message_id.clone().expect("an id");
        let r = self.inner.submit(message, ctx).await;
        let other = StoredClaim::Pending { token: "other:1".into() };
        self.store.put_claim(ctx.queue, &id, other, Duration::from_secs(300));
        if id == MessageId::from("c") { Err(PortError::new(ErrorKind::Other, "refused")) } else { r }
    }
}

// ---------------------------------------------------------------------------------
// Off and Shadow behave as without the feature
// ---------------------------------------------------------------------------------

/// `SERVICEBUS_ATOMIC_CLAIM=off` and `shadow` behave as drain without the claim: a
/// message without an id is submitted (not dead-lettered), and an id twice in one
/// batch is submitted twice (not abandoned). Shadow counts what On would have done,
/// with `mode="shadow"`. On dead-letters and abandons.
#[test]
fn claim_off_and_shadow_neither_dead_letter_nor_abandon_repeated_ids() {
    for mode in [Switch::Off, Switch::Shadow, Switch::On] {
        let mut h = Harness::new();
        h.cfg.singleflight = Switch::Off;
        h.cfg.atomic_claim = mode;
        h.cfg.max_batches = Some(1);
        h.source.push(no_id());
        h.feed(&["a", "a", "b"]);
        let r = h.tick();
        let shadowed = |outcome: MessageOutcome| {
            h.count(|e| matches!(e, Event::Message { outcome: o, mode: Switch::Shadow, .. } if *o == outcome))
        };
        match mode {
            Switch::On => {
                assert_eq!(stats(&r), (4, 2, 1, 0, 1), "{mode:?}: the second a completes as a duplicate");
                assert_eq!(h.source.dead_letters().len(), 1);
            }
            _ => {
                assert_eq!(stats(&r), (4, 4, 0, 0, 0), "{mode:?}: legacy behaviour");
                assert!(h.source.dead_letters().is_empty(), "{mode:?}");
                assert_eq!(h.target.attempts(), 4, "{mode:?}");
                let expected = usize::from(mode == Switch::Shadow);
                assert_eq!(shadowed(MessageOutcome::DeadLettered), expected, "{mode:?}");
                // On completes the second a as a duplicate: its first copy was submitted.
                assert_eq!(shadowed(MessageOutcome::Duplicate), expected, "{mode:?}");
                assert_eq!(shadowed(MessageOutcome::ClaimedElsewhere), 0, "{mode:?}");
            }
        }
    }
}

/// Shadow counts the decision On takes for a repeated id, not a guess made before
/// the first copy's fate is known: a later copy of an id in the same batch, or in
/// the next batch (its claim pending, ours), is a duplicate once the first copy was
/// submitted and claimed elsewhere when that submit failed. Each case runs under On
/// and under Shadow, and Shadow's `mode="shadow"` counts equal On's, while Shadow
/// still submits every copy.
#[test]
fn shadow_counts_what_on_decides_for_repeated_ids() {
    let decided = |h: &Harness, mode: Switch, outcome: MessageOutcome| {
        h.count(|e| matches!(e, Event::Message { outcome: o, mode: m, .. } if *o == outcome && *m == mode))
    };
    // (case, batch size, ids fed, the id whose submit fails)
    let cases: [(&str, usize, &[&str], Option<&str>); 4] = [
        ("same batch, first submitted", 3, &["a", "a", "b"], None),
        ("same batch, first failed", 3, &["a", "a", "b"], Some("a")),
        ("next batch, first submitted", 2, &["a", "b", "a", "c"], None),
        ("next batch, first failed", 2, &["a", "b", "a", "c"], Some("a")),
    ];
    for (case, batch, ids, fail) in cases {
        let mut counts = Vec::new();
        for mode in [Switch::On, Switch::Shadow] {
            let mut h = Harness::new();
            h.cfg.singleflight = Switch::Off;
            h.cfg.atomic_claim = mode;
            // Fixed: a failed submit would halve an adaptive window and the batches
            // would no longer be the case's.
            (h.cfg.batch, h.cfg.in_flight) = (batch, InFlight::Fixed);
            h.cfg.max_batches = Some(ids.len() as u32 / batch as u32);
            if let Some(id) = fail {
                h.target.fail_id(id);
            }
            h.feed(ids);
            h.tick();
            if mode == Switch::Shadow {
                assert_eq!(h.target.attempts(), ids.len() as u64, "{case}: shadow submits every copy");
            }
            counts.push((
                decided(&h, mode, MessageOutcome::Duplicate),
                decided(&h, mode, MessageOutcome::ClaimedElsewhere),
            ));
        }
        assert_eq!(counts[1], counts[0], "{case}: shadow's (duplicates, claimed elsewhere) against on's");
        assert_eq!(counts[0].0 + counts[0].1, 1, "{case}: on decided the copy once: {counts:?}");
    }
}

/// `SERVICEBUS_DRAIN_LEASE_RENEW=shadow` behaves as Off: it never extends the lease,
/// so a long drain stops at the lease's deadline (TTL less a tenth), exactly as with
/// renewal off.
#[test]
fn renew_shadow_never_extends_the_lease() {
    for renew in [Switch::Shadow, Switch::Off] {
        let mut h = Harness::with_delay(Duration::from_secs(10));
        h.cfg.lease_ttl = Duration::from_secs(30);
        h.cfg.renew = renew;
        // One submit at a time, each starting at a known time.
        h.cfg.in_flight = InFlight::Fixed;
        h.feed(&["a", "b", "c", "d", "e", "f"]);
        let r = h.tick();
        assert_eq!(stats(&r).1, 3, "{renew:?}: submits start at 0, 10 and 20 s; the deadline is 27 s");
        assert!(r.lease_lost, "{renew:?}");
        assert_eq!(h.store.calls().get("renew"), None, "{renew:?}: no renewal call");
        assert_eq!(
            h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "not_owner", .. })),
            1,
            "{renew:?}: the TTL ran out, as with renewal off"
        );
    }
}

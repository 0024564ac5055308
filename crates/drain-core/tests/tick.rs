//! The tick use case against the in-memory ports in virtual time.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::event::{Event, LeaseOp, MessageOutcome, TickKind, TickOutcome};
use drain_core::guard::LeaseStatus;
use drain_core::memory::{MemoryStore, StoredClaim, block_on};
use drain_core::ports::{
    Capabilities, Clock, Delivery, DeliveryHandle, LeaseName, LeaseStore, Message, MessageId, MessageSource,
    SubmitContext, Submitter,
};
use drain_core::testkit::{Call, FailSettle, Forward, Hooks, RecordingSubmitter, Run, TestRng, message};
use drain_core::tick::{InFlight, TickControl, TickPorts, TickReport, run_tick};
use drain_core::{ErrorKind, LeaseToken, PortError, Switch};
use support::{Harness, stats};

/// The acquire's answer goes through the closure, which may replace it with an error
/// (or change the store); every other lease call passes through.
struct AfterAcquire<F>(F);

#[async_trait]
impl<F: Fn(Result<(), PortError>) -> Result<(), PortError> + Send + Sync> Hooks for AfterAcquire<F> {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        let answered = run.await;
        if matches!(call, Call::Acquire(_)) { (self.0)(answered) } else { answered }
    }
}

#[test]
fn lease_off_never_calls_the_store() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.atomic_claim = Switch::Off;
    h.store.set_failing(Some(ErrorKind::Connection));
    h.feed(&["a", "b"]);
    let r = h.tick();
    assert_eq!(r.lease, Some(LeaseStatus::Off));
    assert_eq!(stats(&r), (2, 2, 0, 0, 0));
    assert_eq!(h.store.total_calls(), 0, "Off must never touch the store: {:?}", h.store.calls());
    assert_eq!(h.target.submitted_ids(), ["a", "b"]);
}

/// Records which keys each lease operation but the peek used.
#[derive(Default)]
struct KeyRecorder {
    seen: Mutex<Vec<(&'static str, LeaseName)>>,
}

#[async_trait]
impl Hooks for KeyRecorder {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        if !matches!(call, Call::Peek(_))
            && let Some(lease) = call.lease()
        {
            self.seen.lock().unwrap().push((call.name(), lease.clone()));
        }
        run.await
    }
}

#[test]
fn acquire_then_release_the_queue_s_lease() {
    let mut h = Harness::new();
    h.cfg.queue = "orders.eu".into();
    h.feed(&["a"]);
    let rec = Forward::new(h.store.clone(), KeyRecorder::default());
    let (store, target) = (h.store.clone(), h.target.clone());
    let r = h.tick_on(&rec, &*store, &*target);
    assert_eq!(r.lease, Some(LeaseStatus::Held));
    assert_eq!(r.fence, Some(1));
    let seen = rec.hooks().seen.lock().unwrap().clone();
    let expected = LeaseName::queue("orders.eu");
    assert_eq!(seen, vec![("acquire", expected.clone()), ("release", expected)]);
    assert_eq!(h.lease_value(), None, "released");
    let r2 = h.tick();
    assert_eq!(r2.fence, Some(2), "fences increase per acquisition");
}

#[test]
fn contended_tick_skips_without_receive_or_release() {
    let mut h = Harness::new();
    h.feed(&["a"]);
    h.store.put_lease(&h.lease_key(), "other-host:0123456789abcdef0123456789abcdef", Duration::from_secs(100));
    let r = h.tick();
    assert_eq!(r, TickReport::skipped_locked("requests"));
    assert_eq!((r.skipped, r.lease, r.stats), (Some("locked"), None, None));
    assert_eq!(h.source.receive_calls(), 0, "a skipped tick receives nothing");
    assert_eq!(h.store.calls().get("release"), None, "a skipped tick releases nothing");
    assert_eq!(h.lease_value().as_deref(), Some("other-host:0123456789abcdef0123456789abcdef"));
    assert_eq!(h.count(|e| matches!(e, Event::Tick { outcome: TickOutcome::SkippedLocked, .. })), 1);
    assert_eq!(h.source.ready_len(), 1);
}

#[test]
fn lease_store_error_fails_open() {
    let mut h = Harness::new();
    h.cfg.atomic_claim = Switch::Off;
    h.store.set_failing(Some(ErrorKind::Connection));
    h.feed(&["a", "b", "c"]);
    let r = h.tick();
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen));
    assert_eq!(r.fence, None);
    assert_eq!(stats(&r), (3, 3, 0, 0, 0));
    assert_eq!(h.count(|e| matches!(e, Event::Tick { outcome: TickOutcome::FailOpen, .. })), 1);
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Acquire, result: "error", .. })), 1);
    assert_eq!(h.store.calls().get("release"), None, "nothing acquired, nothing released");
}

/// A target that feeds the source a new message for each one it takes, so the queue
/// never runs dry.
struct Refeeding<'a> {
    target: &'a RecordingSubmitter,
    source: &'a drain_core::memory::MemorySource,
    next: std::sync::atomic::AtomicU64,
}

#[async_trait]
impl Submitter for Refeeding<'_> {
    async fn submit(&self, m: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        self.target.submit(m, ctx).await?;
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.source.push(message(&format!("more-{n}")));
        Ok(())
    }
}

/// Without the bound this tick never ends (the test hangs at its first tick): a
/// tick that failed open would drain without single-flight and fences for as long
/// as the feed lasts, however soon the store answered again.
#[test]
fn a_tick_that_failed_open_receives_for_one_lease_ttl_at_most() {
    let mut h = Harness::with_delay(Duration::from_millis(100));
    h.cfg.atomic_claim = Switch::Off;
    h.cfg.lease_ttl = Duration::from_secs(20);
    h.store.set_failing(Some(ErrorKind::Connection));
    h.feed(&["a", "b", "c", "d"]);
    let (store, target, source) = (h.store.clone(), h.target.clone(), h.source.clone());
    let refeeding = Refeeding { target: &target, source: &source, next: Default::default() };
    let began = h.clock.now();
    let r = h.tick_on(&*store, &*store, &refeeding);
    let took = h.clock.now().saturating_since(began);
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen));
    let (received, submitted, ..) = stats(&r);
    assert!(received > 4 && submitted == received, "it drained what it received: {r:?}");
    let ttl = h.cfg.lease_ttl;
    assert!(took >= ttl && took < ttl + Duration::from_secs(2), "the tick took {took:?} of a {ttl:?} lease TTL");

    // Held, the same feed is drained for as long as it lasts: here until max_batches.
    h.store.set_failing(None);
    h.cfg.max_batches = Some(1_000);
    let began = h.clock.now();
    let r = h.tick_on(&*store, &*store, &refeeding);
    assert_eq!(r.lease, Some(LeaseStatus::Held));
    let took = h.clock.now().saturating_since(began);
    assert!(took > ttl + Duration::from_secs(10), "a held tick is not bounded by the TTL: {took:?} {r:?}");
}

/// A timed-out acquire may still land (the server ran it after the client gave up):
/// the tick fails open, then releases with its own token, so the next tick is not
/// skipped for a whole TTL by a lease nobody holds.
#[test]
fn a_timed_out_acquire_that_landed_is_released_after_the_drain() {
    fn late_tick(h: &mut Harness) -> TickReport {
        let leases = Forward::new(
            h.store.clone(),
            AfterAcquire(|_| Err(PortError::new(ErrorKind::Timeout, "no answer in time (the test let it land)"))),
        );
        let (store, target) = (h.store.clone(), h.target.clone());
        h.tick_on(&leases, &*store, &*target)
    }
    let mut h = Harness::new();
    h.feed(&["a", "b"]);
    let r = late_tick(&mut h);
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen));
    assert_eq!(stats(&r), (2, 2, 0, 0, 0), "fail open: drained");
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "released", .. })), 1);
    assert_eq!(h.lease_value(), None, "the late lease is gone");
    h.feed(&["c"]);
    let r = h.tick();
    assert_eq!((r.lease, stats(&r)), (Some(LeaseStatus::Held), (1, 1, 0, 0, 0)), "the next tick is not skipped");

    // A timed-out acquire that did not land: the release finds nothing of ours.
    h.feed(&["d"]);
    let other = LeaseToken::generate("other", &mut TestRng::new(99));
    block_on(&h.clock, h.store.acquire(&h.lease_key(), &other, Duration::from_secs(60))).expect("other holder");
    let before = h.lease_value();
    let r = late_tick(&mut h);
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen));
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "not_owner", .. })), 1);
    assert_eq!(h.lease_value(), before, "another holder's lease is untouched");
}

#[test]
fn report_of_a_held_lease() {
    let mut h = Harness::new();
    h.feed(&["a", "b"]);
    h.put_claim("b", StoredClaim::Done { token: "x:1".into() });
    let r = h.tick();
    assert_eq!((r.skipped, r.lease, r.fence), (None, Some(LeaseStatus::Held), Some(1)));
    assert_eq!(stats(&r), (2, 1, 1, 0, 0));
    assert!(!r.lease_lost && !r.stopped && r.error.is_none(), "{r:?}");
}

#[test]
fn done_claim_suppresses_a_duplicate() {
    let mut h = Harness::new();
    h.feed(&["a", "b"]);
    h.put_claim("a", StoredClaim::Done { token: "old:1".into() });
    let r = h.tick();
    assert_eq!(stats(&r), (2, 1, 1, 0, 0));
    assert_eq!(h.target.submitted_ids(), ["b"]);
    assert_eq!(h.source.completed().len(), 2, "the duplicate is completed, not abandoned");
    assert_eq!(h.messages(MessageOutcome::Duplicate), 1);
    // b is now done: a redelivery of b is a duplicate too.
    h.source.push(message("b"));
    let r = h.tick();
    assert_eq!(stats(&r), (1, 0, 1, 0, 0));
}

#[test]
fn foreign_pending_claim_abandons() {
    let mut h = Harness::new();
    h.feed(&["a", "b"]);
    h.put_claim("a", StoredClaim::Pending { token: "other:1".into() });
    h.cfg.max_batches = Some(1);
    let r = h.tick();
    assert_eq!(stats(&r), (2, 1, 0, 1, 0));
    assert_eq!(h.target.submitted_ids(), ["b"]);
    assert_eq!(h.source.ready_len(), 1, "a is back in the queue for redelivery");
    assert_eq!(h.messages(MessageOutcome::ClaimedElsewhere), 1);
}

/// The in-memory queue as a broker that counts every return as a delivery: no
/// uncounted release (RabbitMQ's quorum queues).
struct CountsEveryReturn(Arc<drain_core::memory::MemorySource>);

#[async_trait]
impl MessageSource for CountsEveryReturn {
    fn capabilities(&self) -> Capabilities {
        Capabilities { release: false, ..self.0.capabilities() }
    }
    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        self.0.receive(max, max_wait).await
    }
    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.0.complete(handle).await
    }
    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.0.abandon(handle).await
    }
    async fn release(&self, _: DeliveryHandle) -> Result<(), PortError> {
        Err(PortError::new(ErrorKind::Unsupported, "every return counts here"))
    }
    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.0.dead_letter(handle, reason, description).await
    }
    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        self.0.renew_lock(handle).await
    }
}

/// The delivery count `id` comes back with from `h`'s queue.
fn next_delivery_count(h: &Harness, id: &str) -> Option<u32> {
    let got = block_on(&h.clock, h.source.receive(10, Duration::ZERO)).expect("receive");
    got.iter().find(|d| d.message.message_id == Some(MessageId::String(id.to_owned()))).map(|d| d.delivery_count)
}

/// A message whose claim another holder has pending did not fail: where the source
/// can give it back uncounted (Service Bus's `released`), the tick releases it, so
/// that meeting its own redelivery in flight never moves it toward the broker's
/// maximum delivery count; a source without that capability gets an abandon.
#[test]
fn a_claim_busy_message_goes_back_uncounted_where_the_source_can() {
    for release in [true, false] {
        let mut h = Harness::new();
        h.feed(&["a", "b"]);
        h.put_claim("a", StoredClaim::Pending { token: "other:1".into() });
        h.cfg.max_batches = Some(1);
        let r = if release {
            h.tick()
        } else {
            let source = CountsEveryReturn(h.source.clone());
            let token = h.token();
            let ports = TickPorts::new(&source, &*h.target, &*h.clock, &h.observer).leases(&*h.store).claims(&*h.store);
            block_on(&h.clock, run_tick(&h.cfg, &ports, &token, &Default::default()))
        };
        assert_eq!(stats(&r), (2, 1, 0, 1, 0), "release={release}: {r:?}");
        assert_eq!(h.messages(MessageOutcome::ClaimedElsewhere), 1);
        let want = if release { 0 } else { 1 };
        assert_eq!(next_delivery_count(&h, "a"), Some(want), "release={release}: a comes back counted {want}");
    }
}

#[test]
fn claim_store_error_never_submits() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.max_batches = Some(1);
    h.store.set_failing(Some(ErrorKind::Connection));
    h.feed(&["a", "b", "c"]);
    let r = h.tick();
    assert_eq!(stats(&r), (3, 0, 0, 3, 0));
    assert_eq!(h.target.attempts(), 0, "fail closed: no submit at all");
    assert_eq!(h.messages(MessageOutcome::ClaimError), 3);
    assert_eq!(h.source.ready_len(), 3, "everything abandoned for redelivery");
    h.store.set_failing(None);
    h.cfg.max_batches = None;
    let r = h.tick();
    assert_eq!(stats(&r), (3, 3, 0, 0, 0), "after the store heals, the redeliveries go through once");
}

/// Abandoned messages come back at once, so a tick whose whole batch was abandoned
/// stops instead of receiving and abandoning the same messages for as long as the
/// cause lasts (a Redis outage would otherwise hold a worker and spin the broker).
#[test]
fn a_batch_that_is_wholly_abandoned_ends_the_tick_instead_of_spinning() {
    for cause in ["claim store down", "foreign pending claims", "target refuses"] {
        let mut h = Harness::new();
        h.cfg.batch = 2;
        // A bound, so that a regression fails this assertion instead of hanging the test.
        h.cfg.max_batches = Some(50);
        h.feed(&["a", "b", "c"]);
        match cause {
            "claim store down" => h.store.set_failing(Some(ErrorKind::Connection)),
            "foreign pending claims" => {
                for id in ["a", "b", "c"] {
                    h.put_claim(id, StoredClaim::Pending { token: "other:1".into() });
                }
            }
            _ => h.target.set_fail_all(true),
        }
        let r = h.tick();
        assert_eq!(stats(&r), (2, 0, 0, 2, 0), "{cause}: one batch, then stop");
        assert_eq!(h.source.receive_calls(), 1, "{cause}: no second receive of the same messages");
        assert_eq!(h.source.ready_len(), 3, "{cause}: everything is back for the next tick");
    }
    // A batch with progress keeps the tick going: [a, b] submits b, and once b has
    // completed the next receive runs beside the submits and takes [c]; c submits, and
    // beside it the next receive finds the queue empty (a goes back to the source
    // only once its claim is released, in the call that would have claimed the next
    // batch), which ends the tick. a waits for the next tick.
    let mut h = Harness::new();
    h.cfg.batch = 2;
    h.target.fail_id("a");
    h.feed(&["a", "b", "c"]);
    let r = h.tick();
    assert_eq!(stats(&r), (3, 2, 0, 1, 0));
    assert_eq!(h.source.receive_calls(), 3);
    assert_eq!(h.target.submitted_ids(), ["b", "c"]);
    assert_eq!(h.source.ready_len(), 1, "a is back for the next tick");
}

/// On a store that keeps the trait's two-call default: one claim call per batch;
/// batch 0's claims are settled just before batch 2's are taken (batch 1 was claimed
/// while batch 0 was submitted), and batches 1 and 2 are settled together once the
/// receive beside batch 2's submits found the queue empty.
#[test]
fn claims_and_settlements_on_a_store_without_the_one_call() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.batch = 10;
    let ids: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
    h.feed(&ids.iter().map(String::as_str).collect::<Vec<_>>());
    let r = h.tick();
    assert_eq!(stats(&r), (25, 25, 0, 0, 0));
    let calls = h.store.calls();
    assert_eq!(calls.get("claim_batch"), Some(&3), "{calls:?}");
    assert_eq!(calls.get("settle_batch"), Some(&2), "{calls:?}");
    assert_eq!(h.store.total_calls(), 5);
}

#[test]
fn submit_failure_releases_the_claim_and_abandons() {
    let mut h = Harness::new();
    h.cfg.max_batches = Some(1);
    h.target.fail_id("b");
    h.feed(&["a", "b"]);
    let r = h.tick();
    assert_eq!(stats(&r), (2, 1, 0, 1, 0));
    assert_eq!(h.messages(MessageOutcome::SubmitFailed), 1);
    assert_eq!(h.claim("b"), None, "the failed submit's claim is deleted so the redelivery can take it");
    let claim_a = h.claim("a");
    assert!(matches!(&claim_a, Some(StoredClaim::Done { token }) if token.starts_with("me:")), "{claim_a:?}");
    h.target.set_fail_all(false);
    let target = RecordingSubmitter::new(h.clock.clone());
    let store = h.store.clone();
    let r = h.tick_with(store, &target);
    assert_eq!(stats(&r), (1, 1, 0, 0, 0));
    assert_eq!(target.submitted_ids(), ["b"]);
}

#[test]
fn message_without_id_is_dead_lettered() {
    let mut h = Harness::new();
    h.source.push({
        let mut m = Message::default();
        m.message_id = None;
        m.body = b"x".to_vec();
        m
    });
    h.feed(&["a"]);
    let r = h.tick();
    assert_eq!(stats(&r), (2, 1, 0, 0, 1));
    let dead = h.source.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1, MessageId::MISSING_REASON);
}

/// A later copy of an id in the same batch waits for the first: a duplicate once the
/// first is submitted (completed in the same tick, never received again), released
/// (uncounted) when the first copy's submit failed.
#[test]
fn same_id_twice_in_a_batch_is_submitted_once() {
    let mut h = Harness::new();
    h.feed(&["a", "a"]);
    let s = h.tick().stats.unwrap();
    assert_eq!(h.target.submitted_ids(), ["a"]);
    assert_eq!((s.received, s.submitted, s.duplicates, s.abandoned), (2, 1, 1, 0));
    assert_eq!(h.source.ready_len(), 0);

    let mut h = Harness::new();
    h.target.fail_id("a");
    h.feed(&["a", "a"]);
    let s = h.tick().stats.unwrap();
    assert_eq!((s.received, s.submitted, s.duplicates, s.abandoned), (2, 0, 0, 2));
    assert_eq!(h.messages(MessageOutcome::ClaimedElsewhere), 1, "the copy went back uncounted");
    assert_eq!(h.messages(MessageOutcome::SubmitFailed), 1);
    assert_eq!(h.source.ready_len(), 2, "both back for the next tick");
}

/// The batch after is claimed while the batch before is submitted, so an id in both
/// finds the earlier copy's claim pending. Once the earlier copy is submitted, the
/// later one is completed as a duplicate in the same tick; when the earlier submit
/// failed, the later copy is released (uncounted by the broker) and retried later.
#[test]
fn same_id_in_two_consecutive_batches_is_submitted_once() {
    let mut h = Harness::new();
    h.cfg.batch = 2;
    h.feed(&["a", "b", "a", "c"]);
    let s = h.tick().stats.unwrap();
    assert_eq!(h.target.submitted_ids(), ["a", "b", "c"]);
    assert_eq!((s.received, s.submitted, s.duplicates, s.abandoned), (4, 3, 1, 0));
    assert_eq!(h.source.ready_len(), 0);

    let mut h = Harness::new();
    // Fixed: a failed submit would halve an adaptive window, and the next batch would
    // hold the copy of `a` alone.
    (h.cfg.batch, h.cfg.in_flight) = (2, InFlight::Fixed);
    h.target.fail_id("a");
    h.feed(&["a", "b", "a", "c"]);
    let s = h.tick().stats.unwrap();
    assert_eq!(h.target.submitted_ids(), ["b", "c"]);
    assert_eq!((s.received, s.submitted, s.duplicates, s.abandoned), (4, 2, 0, 2));
    assert_eq!(h.messages(MessageOutcome::ClaimedElsewhere), 1, "the second a met the first one's claim");
    // The next tick, one message per batch: the two copies in consecutive batches.
    h.cfg.batch = 1;
    let target = RecordingSubmitter::new(h.clock.clone());
    let (store, t) = (h.store.clone(), &target);
    let s = h.tick_with(store, t).stats.unwrap();
    assert_eq!((s.received, s.submitted, s.duplicates), (2, 1, 1), "a is submitted once, its copy a duplicate");
    assert_eq!(target.submitted_ids(), ["a"]);
}

#[test]
fn fence_is_passed_to_the_submitter_and_reported() {
    let mut h = Harness::new();
    h.store.set_fence(&h.lease_key(), 41);
    h.feed(&["a"]);
    let r = h.tick();
    assert_eq!(r.fence, Some(42));
    assert_eq!(h.target.submitted()[0].1, Some(42));
    h.cfg.singleflight = Switch::Off;
    h.feed(&["b"]);
    let r = h.tick();
    assert_eq!(r.fence, None);
    assert_eq!(h.target.submitted()[1].1, None, "no lease, no fence");
}

#[test]
fn message_concurrency_is_bounded() {
    for concurrency in [1, 4] {
        let mut h = Harness::with_delay(Duration::from_millis(100));
        (h.cfg.concurrency, h.cfg.in_flight) = (concurrency, InFlight::Fixed);
        h.cfg.batch = 20;
        let ids: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
        h.feed(&ids.iter().map(String::as_str).collect::<Vec<_>>());
        let r = h.tick();
        assert_eq!(stats(&r).1, 20);
        assert_eq!(h.target.max_in_flight(), concurrency);
    }
}

/// Steals the lease (as a later tick would after our TTL) when it sees message `steal`.
struct Thief {
    store: Arc<MemoryStore>,
    key: LeaseName,
    inner: RecordingSubmitter,
}

#[async_trait]
impl Submitter for Thief {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        if message.message_id == Some(MessageId::from("steal")) {
            self.store.put_lease(&self.key, "thief:ffffffffffffffffffffffffffffffff", Duration::from_secs(300));
        }
        self.inner.submit(message, ctx).await
    }
}

#[test]
fn lost_lease_cancels_the_drain_and_leaves_the_new_lease() {
    let mut h = Harness::new();
    h.cfg.lease_ttl = Duration::from_secs(30);
    h.cfg.batch = 1;
    let thief = Thief {
        store: h.store.clone(),
        key: h.lease_key(),
        inner: RecordingSubmitter::with_delay(h.clock.clone(), Duration::from_secs(4)),
    };
    h.feed(&["a", "steal", "c", "d", "e", "f", "g", "h"]);
    let store = h.store.clone();
    let r = h.tick_with(store, &thief);
    assert!(r.lease_lost, "{r:?}");
    let submitted = thief.inner.submitted_ids();
    assert!(submitted.len() < 8, "the drain stopped early: {submitted:?}");
    assert_eq!(&submitted[..2], ["a", "steal"]);
    assert_eq!(h.count(|e| matches!(e, Event::LeaseLost { .. })), 1);
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "not_owner", .. })), 1);
    assert_eq!(h.lease_value().as_deref(), Some("thief:ffffffffffffffffffffffffffffffff"));
    let s = r.stats.unwrap();
    assert_eq!(s.received, s.submitted + s.abandoned, "every received message is settled");
    assert_eq!(h.source.ready_len() as u64, 8 - s.submitted, "nothing lost");
}

struct Panicker;

#[async_trait]
impl Submitter for Panicker {
    async fn submit(&self, _message: &Message, _ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        panic!("submitter bug");
    }
}

#[test]
fn a_panicking_drain_still_releases_the_lease() {
    let mut h = Harness::new();
    h.feed(&["a"]);
    let store = h.store.clone();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.tick_with(store, &Panicker)));
    let err = caught.expect_err("the panic is re-raised, not swallowed");
    assert_eq!(err.downcast_ref::<&str>(), Some(&"submitter bug"));
    assert_eq!(h.lease_value(), None, "released before the panic continued");
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "released", .. })), 1);
}

#[test]
fn source_error_ends_the_drain_and_releases() {
    let mut h = Harness::new();
    h.source.set_failing(Some(ErrorKind::Connection));
    let r = h.tick();
    assert!(r.error.as_deref().unwrap_or("").contains("receive failed"), "{r:?}");
    assert_eq!(h.lease_value(), None);
}

/// A failed claim settlement is counted and reported, and costs no second submit:
/// the completed messages are gone from the source, their claims stay `pending`
/// until the pending TTL.
#[test]
fn claim_settle_error_is_counted_and_submits_nothing_twice() {
    let mut h = Harness::new();
    h.feed(&["a", "b", "c"]);
    let claims = Forward::new(h.store.clone(), FailSettle);
    let (store, target) = (h.store.clone(), h.target.clone());
    let r = h.tick_on(&*store, &claims, &*target);
    assert_eq!(stats(&r), (3, 3, 0, 0, 0), "submitted and completed once each");
    assert_eq!(r.stats.expect("stats").claim_settle_errors, 3);
    assert_eq!(h.messages(MessageOutcome::ClaimSettleFailed), 3);
    assert_eq!(h.target.attempts(), 3);
    assert_eq!(h.source.ready_len(), 0, "nothing comes back to be submitted again");
    let held = h.claim("a");
    assert!(matches!(held, Some(StoredClaim::Pending { .. })), "the claim stays pending: {held:?}");
}

#[test]
fn release_error_is_counted_and_the_ttl_frees_the_lease() {
    let mut h = Harness::new();
    h.cfg.atomic_claim = Switch::Off;
    h.feed(&["a"]);
    // acquire succeeds; then every call fails (the release).
    let failing = h.store.clone();
    let leases = Forward::new(
        h.store.clone(),
        AfterAcquire(move |r| {
            failing.set_failing(Some(ErrorKind::Connection));
            r
        }),
    );
    let (store, target) = (h.store.clone(), h.target.clone());
    let r = h.tick_on(&leases, &*store, &*target);
    assert_eq!(r.lease, Some(LeaseStatus::Held));
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "error", .. })), 1);
    h.store.set_failing(None);
    assert!(h.lease_value().is_some(), "the lease outlives the failed release");
    h.clock.advance(h.cfg.lease_ttl);
    assert_eq!(h.lease_value(), None, "the TTL backstop frees it");
}

#[test]
fn shadow_lease_counts_the_skip_but_drains() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Shadow;
    h.feed(&["a"]);
    h.store.put_lease(&h.lease_key(), "other:1", Duration::from_secs(100));
    let r = h.tick();
    assert_eq!(r.lease, Some(LeaseStatus::ShadowWouldSkip));
    assert_eq!(stats(&r).1, 1);
    assert_eq!(
        h.count(|e| matches!(e, Event::Tick { outcome: TickOutcome::SkippedLocked, mode: Switch::Shadow, .. })),
        1
    );
    assert_eq!(h.lease_value().as_deref(), Some("other:1"), "shadow never releases a foreign lease");
    let shadow_ops = h.count(|e| matches!(e, Event::LeaseOp { result: "held", mode: Switch::Shadow, .. }));
    assert_eq!(shadow_ops, 1, "a lease operation carries the switch position it was taken under");
    // Free lease in shadow: acquired, drained, released; the fence is not passed on.
    h.clock.advance(Duration::from_secs(101));
    h.feed(&["b"]);
    let r = h.tick();
    assert_eq!(r.lease, Some(LeaseStatus::ShadowAcquired));
    assert_eq!(r.fence, None);
    assert_eq!(h.target.submitted()[1].1, None);
    assert_eq!(h.lease_value(), None);
}

#[test]
fn shadow_claim_counts_duplicates_but_submits() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.atomic_claim = Switch::Shadow;
    h.feed(&["a", "b"]);
    h.put_claim("a", StoredClaim::Done { token: "x:1".into() });
    h.put_claim("b", StoredClaim::Pending { token: "y:1".into() });
    let r = h.tick();
    assert_eq!(stats(&r), (2, 2, 0, 0, 0), "shadow behaves as Off");
    assert_eq!(
        h.count(|e| matches!(e, Event::Message { outcome: MessageOutcome::Duplicate, mode: Switch::Shadow, .. })),
        1
    );
    assert_eq!(
        h.count(|e| matches!(
            e,
            Event::Message { outcome: MessageOutcome::ClaimedElsewhere, mode: Switch::Shadow, .. }
        )),
        1
    );
    h.store.set_failing(Some(ErrorKind::Connection));
    h.feed(&["c"]);
    let r = h.tick();
    assert_eq!(stats(&r), (1, 1, 0, 0, 0), "shadow never fails closed");
}

#[test]
fn off_claim_submits_everything() {
    let mut h = Harness::new();
    h.cfg.atomic_claim = Switch::Off;
    h.feed(&["a"]);
    h.put_claim("a", StoredClaim::Done { token: "x:1".into() });
    let r = h.tick();
    assert_eq!(stats(&r), (1, 1, 0, 0, 0));
    assert_eq!(h.store.calls().get("claim_batch"), None);
}

/// Sets the shutdown flag when it sees message `stop`.
struct Stopper<'a> {
    control: &'a TickControl,
    inner: RecordingSubmitter,
}

#[async_trait]
impl Submitter for Stopper<'_> {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        if message.message_id == Some(MessageId::from("stop")) {
            self.control.stop();
        }
        self.inner.submit(message, ctx).await
    }
}

#[test]
fn a_stop_request_abandons_the_rest_settles_and_releases() {
    let mut h = Harness::new();
    h.cfg.batch = 4;
    let control = TickControl::default();
    let stopper = Stopper { control: &control, inner: RecordingSubmitter::new(h.clock.clone()) };
    h.feed(&["a", "stop", "c", "d", "e", "f"]);
    let token = h.token();
    let ports = TickPorts::new(&*h.source, &stopper, &*h.clock, &h.observer).leases(&*h.store).claims(&*h.store);
    let r = block_on(&h.clock, run_tick(&h.cfg, &ports, &token, &control));
    assert!(r.stopped);
    assert_eq!(stopper.inner.submitted_ids(), ["a", "stop"]);
    assert_eq!(stats(&r), (4, 2, 0, 2, 0), "one batch received; the two not yet submitted are abandoned");
    assert_eq!(h.messages(MessageOutcome::Cancelled), 2);
    assert_eq!(h.source.ready_len(), 4, "c and d back in the queue, e and f never received");
    assert_eq!(h.lease_value(), None, "released");
    assert_eq!(h.claim("c"), None, "the abandoned message's claim is released, so its redelivery is not blocked");
    assert!(r.stopped, "{r:?}");
}

/// A configuration that does not use a store needs no store; one that does and has
/// none fails as an unreachable store would (the lease open, the claims closed), and
/// the report names what is missing.
#[test]
fn ports_a_configuration_does_not_use_are_not_required() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::Off;
    h.cfg.atomic_claim = Switch::Off;
    h.feed(&["a", "b"]);
    let token = h.token();
    let target = h.target.clone();
    let ports = TickPorts::new(&*h.source, &*target, &*h.clock, &h.observer);
    assert!(ports.missing(&h.cfg).is_empty());
    let r = block_on(&h.clock, run_tick(&h.cfg, &ports, &token, &Default::default()));
    assert_eq!((r.lease, stats(&r), r.error.clone()), (Some(LeaseStatus::Off), (2, 2, 0, 0, 0), None));

    h.cfg.singleflight = Switch::On;
    h.cfg.atomic_claim = Switch::On;
    h.cfg.max_batches = Some(1);
    assert_eq!(ports.missing(&h.cfg), ["lease store", "claim store"]);
    assert_eq!(ports.claims(&*h.store).missing(&h.cfg), ["lease store"]);
    h.feed(&["c"]);
    let r = block_on(&h.clock, run_tick(&h.cfg, &ports, &token, &Default::default()));
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen), "no lease store: the lease fails open");
    assert_eq!(stats(&r), (1, 0, 0, 1, 0), "no claim store: claims fail closed, nothing submitted");
    assert_eq!(r.error.as_deref(), Some("no lease store and no claim store configured"));
    assert_eq!(h.store.total_calls(), 0);
}

#[test]
fn lease_operations_carry_the_single_flight_mode() {
    let mut h = Harness::new();
    h.cfg.singleflight = Switch::On;
    h.feed(&["a"]);
    h.tick();
    let on = |op: LeaseOp| h.count(|e| matches!(e, Event::LeaseOp { op: o, mode: Switch::On, .. } if *o == op));
    assert_eq!((on(LeaseOp::Acquire), on(LeaseOp::Release)), (1, 1));
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { mode: Switch::Off | Switch::Shadow, .. })), 0);
}

#[test]
fn a_tick_reports_what_ran_it() {
    let mut h = Harness::new();
    h.feed(&["a"]);
    h.tick();
    assert_eq!(h.count(|e| matches!(e, Event::Tick { kind: TickKind::Beat, .. })), 1, "the default is a beat tick");
    h.cfg.kind = TickKind::Resident;
    h.feed(&["b"]);
    h.tick();
    assert_eq!(h.count(|e| matches!(e, Event::Tick { kind: TickKind::Resident, .. })), 1);
}

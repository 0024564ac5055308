//! The tick overlaps three batches: while batch k is submitted, batch k+1 is
//! received and claimed (once one of batch k's messages has completed) in the call
//! that settles batch k-1's claims, and batch k-1's messages are then completed at
//! the source; so the submits run back to back. A message is completed only after
//! its claim is marked done. Checked in virtual time with a source, a claim store
//! and a target that take 10 ms per call and log when each call starts and ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::memory::{ManualClock, MemorySource, MemoryStore, block_on};
use drain_core::ports::{
    Capabilities, Clock, Delivery, DeliveryHandle, Message, MessageSource, NoopObserver, SubmitContext, Submitter,
};
use drain_core::testkit::{Call, Forward, Hooks, RecordingSubmitter, Run, TestRng, TwoCalls, message};
use drain_core::tick::{InFlight, TickConfig, TickPorts, run_tick};
use drain_core::{LeaseToken, PortError, Time};

const CALL: Duration = Duration::from_millis(10);

/// Calls in order: (name, start ms, end ms).
#[derive(Default)]
struct Log(Mutex<Vec<(&'static str, u64, u64)>>);

impl Log {
    fn push(&self, name: &'static str, start: Time, end: Time) {
        self.0.lock().unwrap().push((name, start.as_millis(), end.as_millis()));
    }

    fn calls(&self, name: &str) -> Vec<(u64, u64)> {
        self.0.lock().unwrap().iter().filter(|(n, ..)| *n == name).map(|(_, s, e)| (*s, *e)).collect()
    }
}

struct Slow<T> {
    inner: T,
    clock: Arc<ManualClock>,
    log: Arc<Log>,
}

impl<T> Slow<T> {
    /// Take `CALL`, then run `f`, logging the call.
    async fn call<R>(&self, name: &'static str, f: impl Future<Output = R>) -> R {
        let start = self.clock.now();
        self.clock.sleep_until(start + CALL).await;
        let r = f.await;
        self.log.push(name, start, self.clock.now());
        r
    }
}

#[async_trait]
impl MessageSource for Slow<MemorySource> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        self.call("receive", self.inner.receive(max, max_wait)).await
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.call("complete", self.inner.complete(handle)).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.abandon(handle).await
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.release(handle).await
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.inner.dead_letter(handle, reason, description).await
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        self.inner.renew_lock(handle).await
    }
}

/// The claim store's calls, each taking `CALL` (`inner`'s hooks in it) and logged as
/// `claim`, `settle` or `settle_then_claim`; with `()` for `inner` the store's own
/// `settle_then_claim` is one round trip, as a store with a script or a transaction for it.
#[async_trait]
impl<H: Hooks> Hooks for Slow<H> {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        let name = match call {
            Call::ClaimBatch(..) => "claim",
            Call::SettleBatch(..) => "settle",
            _ => call.name(),
        };
        self.call(name, self.inner.around(call, run)).await
    }

    fn two_calls(&self) -> bool {
        self.inner.two_calls()
    }
}

#[async_trait]
impl Submitter for Slow<RecordingSubmitter> {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        self.call("submit", self.inner.submit(message, ctx)).await
    }
}

/// A virtual clock, the call log and a store.
struct World {
    clock: Arc<ManualClock>,
    dyn_clock: Arc<dyn Clock>,
    log: Arc<Log>,
    store: Arc<MemoryStore>,
}

impl World {
    /// The world, and a source holding `n` messages.
    fn new(n: usize) -> (World, MemorySource) {
        let clock = Arc::new(ManualClock::new());
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let memory = MemorySource::new(dyn_clock.clone(), Duration::from_secs(60));
        for i in 0..n {
            memory.push(message(&format!("m{i}")));
        }
        let store = Arc::new(MemoryStore::new(dyn_clock.clone()));
        (World { clock, dyn_clock, log: Arc::new(Log::default()), store }, memory)
    }

    /// `inner`, taking `CALL` per call and logging it.
    fn slow<T>(&self, inner: T) -> Slow<T> {
        Slow { inner, clock: self.clock.clone(), log: self.log.clone() }
    }
}

#[test]
fn the_next_batch_is_received_and_claimed_while_one_is_submitted() {
    let (w, memory) = World::new(12);
    let (clock, log, store) = (&*w.clock, &w.log, &w.store);
    let source = w.slow(memory);
    let claims = Forward::new(store.clone(), w.slow(()));
    let target = w.slow(RecordingSubmitter::with_delay(w.dyn_clock.clone(), Duration::ZERO));
    let mut cfg = TickConfig::new("requests");
    cfg.batch = 4;
    cfg.concurrency = 1;
    cfg.in_flight = InFlight::Fixed;
    cfg.max_wait = Duration::from_millis(100);
    let ports = TickPorts::new(&source, &target, clock, &NoopObserver).leases(&**store).claims(&claims);
    let token = LeaseToken::generate("test", &mut TestRng::new(1));
    let report = block_on(clock, run_tick(&cfg, &ports, &token, &Default::default()));
    assert_eq!(report.stats.map(|s| (s.received, s.submitted)), Some((12, 12)), "{report:?}");
    let ids: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    assert_eq!(target.inner.submitted_ids(), ids);

    let all = format!("{:?}", log.0.lock().unwrap());
    let receives = log.calls("receive");
    let (claims, both, settles) = (log.calls("claim"), log.calls("settle_then_claim"), log.calls("settle"));
    let (submits, completes) = (log.calls("submit"), log.calls("complete"));
    assert_eq!(receives.len(), 4, "3 batches and a last, empty receive: {all}");
    assert_eq!(
        (claims.len(), both.len(), settles.len()),
        (2, 1, 1),
        "batch 0's claims alone, batch 1's while batch 0 is submitted (nothing settled yet), batch 2's in the \
         call that settles batch 0, and batches 1 and 2 settled together at the end: {all}"
    );
    assert_eq!((submits.len(), completes.len()), (12, 12));
    for pair in submits.windows(2) {
        assert_eq!(pair[1].0, pair[0].1, "no receive or claim call stands between two submits: {all}");
    }
    for k in 0..3 {
        let (first_submit, last_submit) = (submits[4 * k], submits[4 * k + 3]);
        assert!(
            receives[k + 1].0 >= first_submit.1 && receives[k + 1].0 < last_submit.1,
            "the receive after batch {k} starts once its first message completed, before its last: {all}"
        );
    }
    assert!(claims[1].0 >= receives[1].1 && both[0].0 >= receives[2].1, "claims are taken after the receive: {all}");
    // Batch 0 is settled by `both[0]`, batches 1 and 2 by the last call.
    for (i, (start, _)) in completes.iter().enumerate() {
        let settled = if i < 4 { both[0].1 } else { settles[0].1 };
        assert!(*start >= settled, "message {i} is completed only after its claim is marked done: {all}");
    }
    assert!(
        completes[0].0 < submits[11].1 && completes[3].1 <= submits[11].1,
        "batch 0 completes beside batch 2's submits: {all}"
    );
    // In all: the first receive and claim call (20 ms), then the twelve submits back to
    // back (120 ms); the receive beside batch 2, from its first completed submit at
    // 110 ms, takes 10 ms plus 100 ms of waiting for nothing; then batches 1 and 2 are
    // settled in one call and their eight messages completed in turn. Receiving and
    // claiming after the submits, as a loop without the overlap does, would put 20 ms
    // between the batches.
    assert_eq!(clock.now().as_millis(), 20 + 120 - 30 + 110 + 10 + 80, "{all}");
}

/// A store that keeps the trait's default makes the two calls, the settlement
/// first, and still only once per batch.
#[test]
fn a_store_without_the_one_call_settles_then_claims_in_two() {
    let (w, memory) = World::new(6);
    let (clock, log, store) = (&*w.clock, &w.log, &w.store);
    let claims = Forward::new(store.clone(), w.slow(TwoCalls));
    let target = RecordingSubmitter::with_delay(w.dyn_clock.clone(), Duration::ZERO);
    let mut cfg = TickConfig::new("requests").concurrency(1);
    cfg.batch = 2;
    let ports = TickPorts::new(&memory, &target, clock, &NoopObserver).leases(&**store).claims(&claims);
    let token = LeaseToken::generate("test", &mut TestRng::new(2));
    let report = block_on(clock, run_tick(&cfg, &ports, &token, &Default::default()));
    assert_eq!(report.stats.map(|s| (s.received, s.submitted)), Some((6, 6)), "{report:?}");
    let order: Vec<&str> = log.0.lock().unwrap().iter().map(|(n, ..)| *n).collect();
    // Batch 0's claims; batch 1's; batch 0 settled, then batch 2 claimed; batches 1
    // and 2 settled together.
    assert_eq!(order, ["claim", "claim", "settle", "claim", "settle"]);
}

/// By default each step submits its whole batch at once, in the order received, and
/// the window doubles while the target's throughput rises with it (here a target
/// that takes 10 ms whatever is in flight), up to its maximum; each batch still
/// costs one claim-store round trip.
#[test]
fn by_default_a_batch_is_in_flight_at_once_and_the_window_grows() {
    let (w, memory) = World::new(400);
    let (clock, log, store) = (&*w.clock, &w.log, &w.store);
    let source = w.slow(memory);
    let claims = Forward::new(store.clone(), w.slow(()));
    let target = w.slow(RecordingSubmitter::with_delay(w.dyn_clock.clone(), Duration::ZERO));
    let mut cfg = TickConfig::new("requests");
    cfg.batch = 4;
    cfg.in_flight = InFlight::Adaptive { max: 32 };
    cfg.max_wait = Duration::from_millis(100);
    let ports = TickPorts::new(&source, &target, clock, &NoopObserver).leases(&**store).claims(&claims);
    let token = LeaseToken::generate("test", &mut TestRng::new(3));
    let report = block_on(clock, run_tick(&cfg, &ports, &token, &Default::default()));
    assert_eq!(report.stats.map(|s| (s.received, s.submitted)), Some((400, 400)), "{report:?}");
    let ids: Vec<String> = (0..400).map(|i| format!("m{i}")).collect();
    assert_eq!(target.inner.submitted_ids(), ids, "submitted in the order received");

    // Submits that start together are one step's.
    let mut steps: Vec<usize> = Vec::new();
    let mut last = None;
    for (start, _) in log.calls("submit") {
        if last == Some(start) {
            *steps.last_mut().expect("a step") += 1;
        } else {
            steps.push(1);
        }
        last = Some(start);
    }
    // A sample is two full steps of 10 ms (the target's time, all in flight at once).
    assert_eq!(&steps[..8], [4, 4, 8, 8, 16, 16, 32, 32], "doubling after each sample: {steps:?}");
    assert!(steps[8..steps.len() - 1].iter().all(|&n| n == 32), "held at the maximum: {steps:?}");
    let receives = log.calls("receive").len();
    let calls = ["claim", "settle_then_claim", "settle"].iter().map(|c| log.calls(c).len()).sum::<usize>();
    assert_eq!(receives, steps.len() + 1, "one receive a batch, and the last, empty one");
    assert_eq!(calls, steps.len() + 1, "one claim-store call a batch, and the last settlement");
}

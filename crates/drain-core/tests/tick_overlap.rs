//! The tick overlaps two batches: batch k's claims are settled in the call that
//! takes batch k+1's, and batch k's messages are completed at the source while batch
//! k+1 is submitted; a message is completed only after its claim is marked done, and
//! batch k+1 is received only after batch k's submits ended. Checked in virtual time
//! with a source, a claim store and a target that take 10 ms per call and log when
//! each call starts and ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::memory::{ManualClock, MemorySource, MemoryStore, block_on};
use drain_core::ports::{
    Capabilities, ClaimState, ClaimStore, ClaimTtls, Clock, Delivery, DeliveryHandle, Message, MessageId,
    MessageSource, NoopObserver, SettleResult, SettledThenClaimed, Settlement, SubmitContext, Submitter,
};
use drain_core::testkit::{RecordingSubmitter, TestRng, message};
use drain_core::tick::{TickConfig, TickPorts, run_tick};
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

#[async_trait]
impl ClaimStore for Slow<Arc<MemoryStore>> {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        self.call("claim", self.inner.claim_batch(queue, ids, token, pending_ttl)).await
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        self.call("settle", self.inner.settle_batch(queue, settlements, token, done_ttl)).await
    }

    /// One round trip for both, as a store with a script or a transaction for it.
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        self.call("settle_then_claim", self.inner.settle_then_claim(queue, settlements, ids, token, ttls)).await
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
fn a_batch_completes_while_the_next_is_submitted_and_is_settled_with_its_claims() {
    let (w, memory) = World::new(6);
    let (clock, log, store) = (&*w.clock, &w.log, &w.store);
    let source = w.slow(memory);
    let claims = w.slow(store.clone());
    let target = w.slow(RecordingSubmitter::with_delay(w.dyn_clock.clone(), Duration::ZERO));
    let mut cfg = TickConfig::new("requests");
    cfg.batch = 2;
    cfg.concurrency = 1;
    cfg.max_wait = Duration::from_millis(100);
    let ports = TickPorts::new(&source, &target, clock, &NoopObserver).leases(&**store).claims(&claims);
    let token = LeaseToken::generate("test", &mut TestRng::new(1));
    let report = block_on(clock, run_tick(&cfg, &ports, &token));
    assert_eq!(report.stats.map(|s| (s.received, s.submitted)), Some((6, 6)), "{report:?}");
    assert_eq!(target.inner.submitted_ids(), ["m0", "m1", "m2", "m3", "m4", "m5"]);

    let receives = log.calls("receive");
    let (claims, both, settles) = (log.calls("claim"), log.calls("settle_then_claim"), log.calls("settle"));
    let (submits, completes) = (log.calls("submit"), log.calls("complete"));
    assert_eq!(receives.len(), 4, "3 batches and a last, empty receive");
    assert_eq!(
        (claims.len(), both.len(), settles.len()),
        (1, 2, 1),
        "the first batch's claims alone, then one call per batch that settles the one before, the last settlement alone"
    );
    assert_eq!((submits.len(), completes.len()), (6, 6));
    // Batch k is settled by `both[k]` (k = 0, 1) and by the last lone settlement (k = 2).
    let settled_at = |k: usize| if k < 2 { both[k].1 } else { settles[0].1 };
    for k in 0..2 {
        assert!(
            both[k].0 >= receives[k + 1].1,
            "batch {}'s claims are taken after it is received: {:?}, receive {:?}",
            k + 1,
            both[k],
            receives[k + 1]
        );
        assert!(
            receives[k + 1].0 >= submits[2 * k + 1].1,
            "batch {} is received only after batch {k}'s submits ended: receive {:?}, submit {:?}",
            k + 1,
            receives[k + 1],
            submits[2 * k + 1]
        );
        let (complete, next_submits) = (completes[2 * k], (submits[2 * k + 2].0, submits[2 * k + 3].1));
        assert!(
            complete.0 < next_submits.1 && next_submits.0 < complete.1,
            "batch {k} is completed while batch {} is submitted: complete {complete:?}, submits {next_submits:?}",
            k + 1
        );
    }
    for (i, (start, _)) in completes.iter().enumerate() {
        assert!(*start >= settled_at(i / 2), "message {i} is completed only after its claim is marked done");
    }
    // In all: the first batch's receive, claims and two submits (10 ms each); then
    // per batch a receive, the call that settles the batch before and claims this
    // one, and the two submits beside the batch before's two completes (20 ms); the
    // last receive takes 10 ms plus 100 ms of waiting for nothing, then the last
    // settlement and the last two completes. With the settlement and the claims in
    // two calls, and the completes after them, each batch would take 30 ms more.
    assert_eq!(clock.now().as_millis(), 40 + 2 * (10 + 10 + 20) + 110 + 10 + 20, "{:?}", log.0.lock().unwrap());
}

/// A store that keeps the trait's default makes the two calls, the settlement
/// first, and still only once per batch.
#[test]
fn a_store_without_the_one_call_settles_then_claims_in_two() {
    let (w, memory) = World::new(4);
    let (clock, log, store) = (&*w.clock, &w.log, &w.store);
    let claims = TwoCalls(w.slow(store.clone()));
    let target = RecordingSubmitter::with_delay(w.dyn_clock.clone(), Duration::ZERO);
    let mut cfg = TickConfig::new("requests");
    cfg.batch = 2;
    let ports = TickPorts::new(&memory, &target, clock, &NoopObserver).leases(&**store).claims(&claims);
    let token = LeaseToken::generate("test", &mut TestRng::new(2));
    let report = block_on(clock, run_tick(&cfg, &ports, &token));
    assert_eq!(report.stats.map(|s| (s.received, s.submitted)), Some((4, 4)), "{report:?}");
    let order: Vec<&str> = log.0.lock().unwrap().iter().map(|(n, ..)| *n).collect();
    assert_eq!(order, ["claim", "settle", "claim", "settle"]);
}

/// The claim store of [`Slow`] without its one-call `settle_then_claim`.
struct TwoCalls(Slow<Arc<MemoryStore>>);

#[async_trait]
impl ClaimStore for TwoCalls {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        self.0.claim_batch(queue, ids, token, pending_ttl).await
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        self.0.settle_batch(queue, settlements, token, done_ttl).await
    }
}

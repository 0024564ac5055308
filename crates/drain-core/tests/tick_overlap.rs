//! The tick overlaps two batches: batch k's messages are completed at the source
//! while batch k+1's claims are taken, but batch k's claims are always settled before
//! batch k+1 is received, and a message is completed only after its claim is marked
//! done. Checked in virtual time with a source and a claim store that take 10 ms per
//! call and log when each call starts and ends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::memory::{ManualClock, MemorySource, MemoryStore, block_on};
use drain_core::ports::{
    Capabilities, ClaimState, ClaimStore, Clock, Delivery, DeliveryHandle, MessageId, MessageSource, NoopObserver,
    SettleResult, Settlement,
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
}

#[test]
fn a_batch_completes_while_the_next_is_claimed_and_is_settled_before_it_is_received() {
    let clock = Arc::new(ManualClock::new());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let log = Arc::new(Log::default());
    let memory = MemorySource::new(dyn_clock.clone(), Duration::from_secs(60));
    for i in 0..6 {
        memory.push(message(&format!("m{i}")));
    }
    let store = Arc::new(MemoryStore::new(dyn_clock.clone()));
    let source = Slow { inner: memory, clock: clock.clone(), log: log.clone() };
    let claims = Slow { inner: store.clone(), clock: clock.clone(), log: log.clone() };
    let target = RecordingSubmitter::with_delay(dyn_clock, Duration::ZERO);
    let mut cfg = TickConfig::new("requests");
    cfg.batch = 2;
    cfg.max_wait = Duration::from_millis(100);
    let ports = TickPorts::new(&source, &target, &*clock, &NoopObserver).leases(&*store).claims(&claims);
    let token = LeaseToken::generate("test", &mut TestRng::new(1));
    let report = block_on(&clock, run_tick(&cfg, &ports, &token));
    assert_eq!(report.stats.map(|s| (s.received, s.submitted)), Some((6, 6)), "{report:?}");

    let (receives, claims, settles) = (log.calls("receive"), log.calls("claim"), log.calls("settle"));
    assert_eq!((receives.len(), claims.len(), settles.len()), (4, 3, 3), "3 batches and a last, empty receive");
    let completes = log.calls("complete");
    assert_eq!(completes.len(), 6);
    for k in 0..3 {
        let (_, settle_end) = settles[k];
        let (receive_start, _) = receives[k + 1];
        assert!(
            receive_start >= settle_end,
            "batch {k}'s claims are settled before batch {} is received: settle {:?}, receive {:?}",
            k + 1,
            settles[k],
            receives[k + 1]
        );
        if let Some((claim_start, claim_end)) = claims.get(k + 1) {
            let (complete_start, complete_end) = completes[2 * k];
            assert!(
                complete_start < *claim_end && *claim_start < complete_end,
                "batch {k} is completed while batch {}'s claims are taken: complete {:?}, claim {:?}",
                k + 1,
                completes[2 * k],
                claims[k + 1]
            );
        }
    }
    // Completes follow their batch's settlement: every complete of batch k starts after
    // settle k ended (each batch is 2 messages, completed in order of batches).
    for (i, (start, _)) in completes.iter().enumerate() {
        assert!(*start >= settles[i / 2].1, "message {i} is completed only after its claim is marked done");
    }
    // In all: the first batch's receive, claims and settlement (10 ms each); then per
    // batch a receive (10 ms), its claims beside the previous batch's two completes
    // (20 ms: one at a time at concurrency 1) and its settlement (10 ms); the last
    // receive takes 10 ms plus 100 ms of waiting for nothing, and the last batch's
    // completes 20 ms after it. One after the other each batch would take 10 ms more.
    assert_eq!(clock.now().as_millis(), 3 * 10 + 2 * (10 + 20 + 10) + 110 + 20, "{:?}", log.0.lock().unwrap());
}

//! The tick harness shared by the tick tests: the in-memory ports on a manual clock.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use drain_core::event::{Event, MessageOutcome};
use drain_core::memory::{ManualClock, MemorySource, MemoryStore, StoredClaim, block_on};
use drain_core::ports::{ClaimStore, Clock, LeaseName, LeaseStore, MessageId, Submitter};
use drain_core::testkit::{RecordingObserver, RecordingSubmitter, TestRng, message};
use drain_core::tick::{TickConfig, TickPorts, TickReport, run_tick};
use drain_core::{LeaseToken, Switch};

/// The in-memory ports of one queue, a manual clock, and the tick settings.
pub struct Harness {
    pub clock: Arc<ManualClock>,
    pub store: Arc<MemoryStore>,
    pub source: Arc<MemorySource>,
    pub target: Arc<RecordingSubmitter>,
    pub observer: RecordingObserver,
    pub cfg: TickConfig,
    pub seed: u64,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_delay(Duration::ZERO)
    }

    pub fn with_delay(delay: Duration) -> Self {
        let clock = Arc::new(ManualClock::new());
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let mut cfg = TickConfig::new("requests");
        cfg.singleflight = Switch::On;
        Harness {
            store: Arc::new(MemoryStore::new(dyn_clock.clone())),
            source: Arc::new(MemorySource::new(dyn_clock.clone(), Duration::from_secs(60))),
            target: Arc::new(RecordingSubmitter::with_delay(dyn_clock, delay)),
            clock,
            observer: RecordingObserver::new(),
            cfg,
            seed: 0,
        }
    }

    pub fn feed(&self, ids: &[&str]) {
        for id in ids {
            self.source.push(message(id));
        }
    }

    pub fn token(&mut self) -> LeaseToken {
        self.seed += 1;
        LeaseToken::generate("me", &mut TestRng::new(self.seed))
    }

    pub fn tick(&mut self) -> TickReport {
        let target = self.target.clone();
        self.tick_with(self.store.clone(), &*target)
    }

    pub fn tick_with(&mut self, leases: Arc<dyn LeaseStoreAndClaims>, target: &dyn Submitter) -> TickReport {
        self.tick_on(leases.as_lease(), leases.as_claims(), target)
    }

    /// A tick with its own lease store, claim store and target.
    pub fn tick_on(&mut self, leases: &dyn LeaseStore, claims: &dyn ClaimStore, target: &dyn Submitter) -> TickReport {
        let token = self.token();
        let ports = TickPorts::new(&*self.source, target, &*self.clock, &self.observer).leases(leases).claims(claims);
        block_on(&self.clock, run_tick(&self.cfg, &ports, &token, &Default::default()))
    }

    pub fn lease_key(&self) -> LeaseName {
        LeaseName::queue(self.cfg.queue.as_str())
    }

    /// The full token holding the queue's lease.
    pub fn lease_value(&self) -> Option<String> {
        self.store.lease_token(&self.lease_key())
    }

    pub fn put_claim(&self, id: &str, claim: StoredClaim) {
        self.store.put_claim(&self.cfg.queue, &MessageId::from(id), claim, Duration::from_secs(60));
    }

    pub fn claim(&self, id: &str) -> Option<StoredClaim> {
        self.store.claim(&self.cfg.queue, &MessageId::from(id)).map(|(c, _)| c)
    }

    pub fn count(&self, pred: impl Fn(&Event<'static>) -> bool) -> usize {
        self.observer.count(pred)
    }

    pub fn messages(&self, outcome: MessageOutcome) -> usize {
        self.count(|e| matches!(e, Event::Message { outcome: o, .. } if *o == outcome))
    }
}

/// Lets a test pass one object as both stores.
pub trait LeaseStoreAndClaims: LeaseStore + ClaimStore {
    fn as_lease(&self) -> &dyn LeaseStore;
    fn as_claims(&self) -> &dyn ClaimStore;
}
impl<T: LeaseStore + ClaimStore> LeaseStoreAndClaims for T {
    fn as_lease(&self) -> &dyn LeaseStore {
        self
    }
    fn as_claims(&self) -> &dyn ClaimStore {
        self
    }
}

/// `(received, submitted, duplicates, abandoned, dead_lettered)`.
pub fn stats(r: &TickReport) -> (u64, u64, u64, u64, u64) {
    let s = r.stats.expect("stats");
    (s.received, s.submitted, s.duplicates, s.abandoned, s.dead_lettered)
}

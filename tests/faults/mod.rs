//! The fault suites' harness, shared by `faults_redis.rs` and `faults_postgres.rs`:
//! a real-time clock on Tokio, a recording target with hooks, one scenario's `World`
//! (a private server, one store on it serving both ports, a queue, an observer), and
//! a store wrapper that kills the server while a chosen call is in flight. It is
//! generic over the store and the server ([`FaultServer`]); `redis.rs` and
//! `postgres.rs` connect a world to each, and `scenarios.rs` holds the scenarios
//! both suites run.
//!
//! Each test binary uses the half for its own server: the other half is dead code
//! there.
#![allow(dead_code)]

pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod scenarios;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use drain_core::event::{Event, LeaseOp, MessageOutcome, TickOutcome};
use drain_core::guard::LeaseStatus;
use drain_core::memory::MemorySource;
use drain_core::ports::{ClaimStore, Clock, LeaseName, LeaseStore, Message, SubmitContext, Submitter};
use drain_core::testkit::{Call, Forward, Hooks, RecordingObserver, Run, TestRng, message};
use drain_core::tick::{InFlight, TickConfig, TickPorts, TickReport, run_tick};
use drain_core::{LeaseToken, PortError, Switch};
use drain_e2e::TokioClock;

/// The longest one tick may take before the test fails as hung.
pub(crate) const TICK_BOUND: Duration = Duration::from_secs(20);

/// Store timeouts long enough for a busy machine, for scenarios whose faults are
/// refusals: a dead server refuses at once, but a starved client can outlast a short
/// timeout and turn the refusal into silence, which ends a tick another way.
pub(crate) const PATIENT: Duration = Duration::from_secs(10);

/// What the suites do to a private server, by pid.
pub(crate) trait FaultServer: Send + 'static {
    /// How failure messages name the server.
    const NAME: &'static str;
    /// SIGKILL (the server and whatever it forked).
    fn kill(&mut self);
    /// SIGSTOP: connections stay open, nothing is answered.
    fn pause(&mut self);
    /// SIGCONT.
    fn resume(&mut self);
    /// Kill and start again on the same port (what survives is the server's business).
    fn restart(&mut self);
}

/// A store serving both of the tick's ports, cheap to clone (clones share the
/// connections).
pub(crate) trait FaultStore: LeaseStore + ClaimStore + Clone + 'static {}

impl<T: LeaseStore + ClaimStore + Clone + 'static> FaultStore for T {}

/// A server shared with hooks and helper threads.
pub(crate) type Shared<V> = Arc<Mutex<V>>;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) type Hook = Box<dyn FnOnce() + Send>;

/// The target: records accepted message ids (with the fence), takes `delay` per
/// submit, and runs a hook at the start of a chosen call (kill the server, pause it, …).
pub(crate) struct Target {
    clock: Arc<TokioClock>,
    delay: Duration,
    calls: AtomicUsize,
    hooks: Mutex<BTreeMap<usize, Hook>>,
    accepted: Mutex<Vec<(String, Option<u64>)>>,
}

impl Target {
    /// Run `hook` when submit number `n` (1-based, over the target's life) starts.
    pub(crate) fn on_call(&self, n: usize, hook: impl FnOnce() + Send + 'static) {
        lock(&self.hooks).insert(n, Box::new(hook));
    }

    pub(crate) fn ids(&self) -> Vec<String> {
        lock(&self.accepted).iter().map(|(id, _)| id.clone()).collect()
    }
}

#[async_trait]
impl Submitter for Target {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let hook = lock(&self.hooks).remove(&n);
        if let Some(hook) = hook {
            hook();
        }
        if !self.delay.is_zero() {
            self.clock.sleep_until(self.clock.now() + self.delay).await;
        }
        let id = message.message_id.as_ref().map(ToString::to_string).unwrap_or_default();
        lock(&self.accepted).push((id, ctx.fence.map(drain_core::ports::Fence::number)));
        Ok(())
    }
}

/// One scenario: a private server, one store on it for the whole test, a queue of
/// `ids`, the target and the observer.
pub(crate) struct World<S, V> {
    pub(crate) server: Shared<V>,
    pub(crate) store: S,
    pub(crate) clock: Arc<TokioClock>,
    pub(crate) source: Arc<MemorySource>,
    pub(crate) target: Arc<Target>,
    pub(crate) observer: Arc<RecordingObserver>,
    pub(crate) cfg: TickConfig,
    pub(crate) ids: Vec<String>,
    pub(crate) seed: u64,
    pub(crate) last_token: Option<LeaseToken>,
    pub(crate) threads: Vec<JoinHandle<()>>,
}

impl<S: FaultStore, V: FaultServer> World<S, V> {
    /// A world on `server` and `store` (connected to it), with `messages` queued and
    /// submits that take `delay`.
    pub(crate) fn with(server: V, store: S, messages: usize, delay: Duration) -> World<S, V> {
        let clock = Arc::new(TokioClock::new());
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let source = Arc::new(MemorySource::new(dyn_clock, Duration::from_secs(600)));
        let ids: Vec<String> = (0..messages).map(|i| format!("m{i:03}")).collect();
        for id in &ids {
            source.push(message(id));
        }
        let target = Arc::new(Target {
            clock: clock.clone(),
            delay,
            calls: AtomicUsize::new(0),
            hooks: Mutex::new(BTreeMap::new()),
            accepted: Mutex::new(Vec::new()),
        });
        let mut cfg = TickConfig::new("requests");
        cfg.singleflight = Switch::On;
        cfg.lease_ttl = Duration::from_secs(3);
        cfg.claim_pending_ttl = Duration::from_secs(10);
        cfg.claim_done_ttl = Duration::from_secs(600);
        cfg.batch = 5;
        // One submit at a time: the scenarios put their faults between submits of
        // known times.
        cfg.in_flight = InFlight::Fixed;
        cfg.max_wait = Duration::from_millis(30);
        World {
            server: Arc::new(Mutex::new(server)),
            store,
            clock,
            source,
            target,
            observer: Arc::new(RecordingObserver::new()),
            cfg,
            ids,
            seed: 0,
            last_token: None,
            threads: Vec::new(),
        }
    }

    pub(crate) fn server(&self) -> MutexGuard<'_, V> {
        lock(&self.server)
    }

    pub(crate) fn lease_key(&self) -> LeaseName {
        LeaseName::queue(self.cfg.queue.as_str())
    }

    /// One tick with the store as both ports.
    pub(crate) async fn tick(&mut self) -> TickReport {
        let store = self.store.clone();
        self.tick_with(&store, &store).await
    }

    /// One tick with these lease and claim ports, bounded by [`TICK_BOUND`].
    pub(crate) async fn tick_with(&mut self, leases: &dyn LeaseStore, claims: &dyn ClaimStore) -> TickReport {
        self.seed += 1;
        let token = LeaseToken::generate("faults", &mut TestRng::new(self.seed));
        self.last_token = Some(token.clone());
        let ports =
            TickPorts::new(&*self.source, &*self.target, &*self.clock, &*self.observer).leases(leases).claims(claims);
        tokio::time::timeout(TICK_BOUND, run_tick(&self.cfg, &ports, &token, &Default::default()))
            .await
            .unwrap_or_else(|_| panic!("a tick MUST end: still running after {TICK_BOUND:?}"))
    }

    /// Tick (150 ms apart) until every message was submitted and the queue is empty;
    /// the reports. Fails after `within`.
    pub(crate) async fn drain_until_done(&mut self, within: Duration) -> Vec<TickReport> {
        let deadline = Instant::now() + within;
        let mut reports = Vec::new();
        loop {
            reports.push(self.tick().await);
            if self.target.ids().len() >= self.ids.len()
                && self.source.ready_len() == 0
                && self.source.locked_len() == 0
            {
                return reports;
            }
            assert!(
                Instant::now() < deadline,
                "not drained within {within:?}: submitted {}/{}, ready {}; reports {reports:?}",
                self.target.ids().len(),
                self.ids.len(),
                self.source.ready_len()
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// A tick on the recovered store takes and releases the lease (and finds nothing
    /// left to drain).
    pub(crate) async fn assert_lease_works(&mut self) {
        let released = self.lease_ops(LeaseOp::Release, "released");
        let r = self.tick().await;
        assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
        assert!(r.fence.is_some_and(|f| f >= 1), "{r:?}");
        assert_eq!(stats(&r), (0, 0, 0, 0), "{r:?}");
        assert_eq!(self.lease_ops(LeaseOp::Release, "released"), released + 1);
    }

    /// Every message was submitted exactly once (no loss, no duplicate).
    #[track_caller]
    pub(crate) fn assert_exactly_once(&self) {
        let (mut got, mut expected) = (self.target.ids(), self.ids.clone());
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "every message submitted exactly once");
        assert_eq!(self.source.completed().len(), self.ids.len(), "and completed at the source");
    }

    pub(crate) fn count(&self, pred: impl Fn(&Event<'static>) -> bool) -> usize {
        self.observer.count(pred)
    }

    pub(crate) fn lease_ops(&self, op: LeaseOp, result: &str) -> usize {
        self.count(|e| matches!(e, Event::LeaseOp { op: o, result: r, .. } if *o == op && *r == result))
    }

    pub(crate) fn messages(&self, outcome: MessageOutcome) -> usize {
        self.count(|e| matches!(e, Event::Message { outcome: o, .. } if *o == outcome))
    }

    pub(crate) fn ticks(&self, outcome: TickOutcome) -> usize {
        self.count(|e| matches!(e, Event::Tick { outcome: o, .. } if *o == outcome))
    }

    /// Run `f` on a thread of its own (kept to be joined at the end).
    pub(crate) fn spawn(&mut self, f: impl FnOnce() + Send + 'static) {
        self.threads.push(std::thread::spawn(f));
    }

    pub(crate) fn join(&mut self) {
        for t in self.threads.drain(..) {
            t.join().expect("helper thread");
        }
    }
}

pub(crate) fn stats(r: &TickReport) -> (u64, u64, u64, u64) {
    let s = r.stats.expect("a tick that ran has stats");
    (s.received, s.submitted, s.duplicates, s.abandoned)
}

/// Which operation [`KillDuring`] interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Op {
    Acquire,
    Release,
    Claim,
}

/// Hooks for a [`Forward`] store: the `nth` call of `op` goes out while the server
/// is frozen, and the server is SIGKILLed 100 ms later, so the request is sent and
/// its answer never comes: the server dies *during* the operation. The tick's claims
/// of every batch but the first come with a settlement, in one call: a kill "during
/// a claim" lands in that call as well.
pub(crate) struct KillDuring<V> {
    server: Shared<V>,
    op: Op,
    nth: usize,
    seen: Mutex<BTreeMap<Op, usize>>,
}

impl<V: FaultServer> KillDuring<V> {
    /// `store`, whose `nth` call of `op` the server dies during.
    pub(crate) fn new<S: FaultStore>(store: S, server: Shared<V>, op: Op, nth: usize) -> Forward<Arc<S>, Self> {
        Forward::new(Arc::new(store), KillDuring { server, op, nth, seen: Mutex::new(BTreeMap::new()) })
    }
}

#[async_trait]
impl<V: FaultServer> Hooks for KillDuring<V> {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        let op = match call {
            Call::Acquire(_) => Op::Acquire,
            Call::Release(_) => Op::Release,
            Call::ClaimBatch(..) | Call::SettleThenClaim(..) => Op::Claim,
            _ => return run.await,
        };
        let n = {
            let mut seen = lock(&self.seen);
            let n = seen.entry(op).or_insert(0);
            *n += 1;
            *n
        };
        if op != self.op || n != self.nth {
            return run.await;
        }
        lock(&self.server).pause();
        let server = self.server.clone();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            lock(&server).kill();
        });
        let out = run.await;
        killer.join().expect("killer thread");
        out
    }
}

impl<S: FaultStore, V: FaultServer> World<S, V> {
    /// As [`World::assert_exactly_once`] when redeliveries were pushed as well.
    #[track_caller]
    pub(crate) fn assert_exactly_once_allowing_redeliveries(&self) {
        let mut got = self.target.ids();
        got.sort();
        assert_eq!(got, self.ids, "every message submitted exactly once");
        assert_eq!(self.source.ready_len() + self.source.locked_len(), 0);
    }
}

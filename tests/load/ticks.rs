//! The tick path: `instances` x `queues` beat loops. Each instance has its own
//! `RedisStore` (one multiplexed connection, as one `drain` process has) and beats
//! every queue every `beat` with `run_tick`, the lease and the atomic claim On, so
//! the instances' ticks of one queue overlap and all but one skip with `locked`. A
//! producer feeds every queue at a steady rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use drain_core::testkit::TestRng;
use drain_core::tick::{InFlight, TickConfig, TickPorts, run_tick};
use drain_core::{LeaseToken, Switch};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::meter::Metered;
use crate::parts::{Counting, Mix, lock};
use crate::queue::{Queue, Target, queue_name};
use drain_e2e::TokioClock;

/// The shape of the tick workload.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) queues: usize,
    /// Each instance beats each queue this often.
    pub(crate) beat: Duration,
    /// The producer adds `per_push` messages to every queue this often.
    pub(crate) produce_every: Duration,
    pub(crate) per_push: u64,
    /// The tick settings (queue name set per queue).
    pub(crate) tick: TickConfig,
}

impl Shape {
    /// The default load: 20 messages per second per queue, in bursts of 5 every
    /// 250 ms; leases of 1.5 s renewed every 500 ms; a tick drains up to 8 batches,
    /// each receive waiting up to 300 ms (longer than the bursts' spacing), so a tick
    /// lasts about 2 s, renews, and the other instances' beats find the lease held.
    pub(crate) fn new(queues: usize) -> Self {
        let mut tick = TickConfig::new("");
        tick.singleflight = Switch::On;
        tick.renew = Switch::On;
        tick.atomic_claim = Switch::On;
        tick.lease_ttl = Duration::from_millis(1500);
        tick.claim_pending_ttl = Duration::from_secs(30);
        tick.claim_done_ttl = Duration::from_secs(120);
        tick.batch = 16;
        // Four at a time, fixed: the load measures the stores' cost per tick, on the
        // shape its recorded figures were taken with.
        (tick.concurrency, tick.in_flight) = (4, InFlight::Fixed);
        tick.max_wait = Duration::from_millis(300);
        tick.max_batches = Some(8);
        Shape { queues, beat: Duration::from_secs(1), produce_every: Duration::from_millis(250), per_push: 5, tick }
    }
}

/// Tick reports that are not a clean run or skip.
#[derive(Default)]
pub(crate) struct Reports {
    pub(crate) ticks: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) first_error: std::sync::Mutex<Option<String>>,
}

/// The running tick path.
pub(crate) struct TickPath {
    pub(crate) queues: Vec<Arc<Queue>>,
    pub(crate) target: Arc<Target>,
    pub(crate) reports: Arc<Reports>,
    producing: Arc<AtomicBool>,
    beating: Arc<AtomicBool>,
    tasks: JoinSet<()>,
}

impl TickPath {
    /// Start the producer and every beat loop; `stores[i]` is instance `i`'s store
    /// (reporting its round trips to `observer` too).
    pub(crate) fn start(
        shape: &Shape,
        stores: &[Metered],
        observer: Arc<Counting>,
        clock: &Arc<TokioClock>,
        seed: u64,
    ) -> TickPath {
        let queues: Vec<Arc<Queue>> = (0..shape.queues).map(|_| Arc::new(Queue::default())).collect();
        let target = Arc::new(Target::new(shape.queues, Duration::from_millis(2)));
        let reports = Arc::new(Reports::default());
        let producing = Arc::new(AtomicBool::new(true));
        let beating = Arc::new(AtomicBool::new(true));
        let mut tasks = JoinSet::new();

        let (qs, on, every, n) = (queues.clone(), producing.clone(), shape.produce_every, shape.per_push);
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !on.load(Ordering::Relaxed) {
                    break;
                }
                for q in &qs {
                    q.produce(n);
                }
            }
        });

        let mut mix = Mix::new(seed);
        for (i, store) in stores.iter().enumerate() {
            let instance = format!("load-{i}");
            for (q, queue) in queues.iter().enumerate() {
                let mut cfg = shape.tick.clone();
                cfg.queue = queue_name(q);
                let phase = shape.beat.mul_f64(mix.unit());
                let (store, queue, target, observer, reports, clock, beating, instance) = (
                    store.clone(),
                    queue.clone(),
                    target.clone(),
                    observer.clone(),
                    reports.clone(),
                    clock.clone(),
                    beating.clone(),
                    instance.clone(),
                );
                let (beat, token_seed) = (shape.beat, mix.next());
                tasks.spawn(async move {
                    let mut rng = TestRng::new(token_seed);
                    tokio::time::sleep(phase).await;
                    let mut tick = tokio::time::interval(beat);
                    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    while beating.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let token = LeaseToken::generate(&instance, &mut rng);
                        let ports =
                            TickPorts::new(&*queue, &*target, &*clock, &*observer).leases(&store).claims(&store);
                        let report = run_tick(&cfg, &ports, &token, &Default::default()).await;
                        reports.ticks.fetch_add(1, Ordering::Relaxed);
                        if report.lease_lost {
                            reports.lease_lost.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(e) = report.error {
                            reports.errors.fetch_add(1, Ordering::Relaxed);
                            lock(&reports.first_error).get_or_insert(e);
                        }
                    }
                });
            }
        }
        TickPath { queues, target, reports, producing, beating, tasks }
    }

    /// Stop producing.
    pub(crate) fn stop_producing(&self) {
        self.producing.store(false, Ordering::Relaxed);
    }

    /// Messages waiting or locked in every queue.
    pub(crate) fn backlog(&self) -> usize {
        self.queues.iter().map(|q| q.backlog()).sum()
    }

    /// Stop every beat loop after its current tick, and wait for them (at most a
    /// beat plus a tick each; `bound` fails loudly past it).
    pub(crate) async fn stop(mut self, bound: Duration) -> Result<StoppedTicks, String> {
        self.producing.store(false, Ordering::Relaxed);
        self.beating.store(false, Ordering::Relaxed);
        let join = async {
            while let Some(r) = self.tasks.join_next().await {
                r.map_err(|e| format!("a beat loop panicked: {e}"))?;
            }
            Ok::<(), String>(())
        };
        match tokio::time::timeout(bound, join).await {
            Ok(r) => r?,
            Err(_) => return Err(format!("the beat loops did not stop within {bound:?}")),
        }
        Ok(StoppedTicks { queues: self.queues, target: self.target, reports: self.reports })
    }
}

/// What is left to read once the tick path stopped.
pub(crate) struct StoppedTicks {
    pub(crate) queues: Vec<Arc<Queue>>,
    pub(crate) target: Arc<Target>,
    pub(crate) reports: Arc<Reports>,
}

impl StoppedTicks {
    /// Messages produced into every queue.
    pub(crate) fn produced(&self) -> u64 {
        self.queues.iter().map(|q| q.produced()).sum()
    }

    /// Messages left waiting or locked.
    pub(crate) fn backlog(&self) -> usize {
        self.queues.iter().map(|q| q.backlog()).sum()
    }
}

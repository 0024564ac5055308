//! The owner path: `schedulers` admission instances, each drain-core's `Scheduler`
//! driven by `drive` over its own metered `RedisStore`, serve requests for
//! `owners` owners drawn with Zipf-like popularity from a seeded generator. A turn
//! takes the owner's claim the way `drain owners` does (`LeaseStore::acquire` on
//! `LeaseName::owner`; a held claim is `ClaimBusy`), holds it for a moment,
//! releases it, and says whether more remains. Both instances request the same
//! popular owners, so peeks find held claims and turns lose races.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::LeaseToken;
use drain_core::admission::{DriverPorts, Entry, OwnerId, OwnerWork, Scheduler, SchedulerConfig, TurnOutcome, drive};
use drain_core::ports::{Acquire, LeaseName, LeaseStore, Release, Waiter};
use drain_core::testkit::TestRng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::meter::Metered;
use crate::parts::{Counting, Mix, lock};
use drain_e2e::TokioClock;

/// How long a turn's claim lives if the process dies holding it.
const CLAIM_TTL: Duration = Duration::from_secs(30);

/// The shape of the owner workload.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub(crate) owners: usize,
    /// Zipf exponent of owner popularity (rank r is requested ∝ 1 / r^s).
    pub(crate) zipf: f64,
    /// Requests per second, per admission instance.
    pub(crate) rate: u64,
    /// How long a turn holds the owner's claim.
    pub(crate) hold: Duration,
    /// One turn in `more_one_in` says more remains (a continuation follows).
    pub(crate) more_one_in: u64,
    pub(crate) scheduler: SchedulerConfig,
}

impl Shape {
    pub(crate) fn new(owners: usize) -> Self {
        let scheduler = {
            let mut m = SchedulerConfig::default();
            m.workers = 32;
            m
        };
        Shape { owners, zipf: 1.1, rate: 1000, hold: Duration::from_millis(5), more_one_in: 4, scheduler }
    }
}

/// Turn counters of every instance.
#[derive(Default)]
pub(crate) struct Turns {
    pub(crate) requests: AtomicU64,
    pub(crate) turns: AtomicU64,
    pub(crate) claim_busy: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) not_owner: AtomicU64,
    pub(crate) handed_off: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Work {
    instance: String,
    store: Metered,
    hold: Duration,
    more_one_in: u64,
    turns: Arc<Turns>,
    rng: Mutex<TestRng>,
    mix: Mutex<Mix>,
    requeue: mpsc::UnboundedSender<OwnerId>,
}

#[async_trait]
impl OwnerWork for Work {
    async fn turn(&self, owner: &OwnerId, _entry: Entry, _waiter: Option<&Waiter>) -> TurnOutcome {
        bump(&self.turns.turns);
        let key = LeaseName::owner(owner.as_str());
        let token = LeaseToken::generate(&self.instance, &mut *lock(&self.rng));
        match self.store.acquire(&key, &token, CLAIM_TTL).await {
            Ok(Acquire::Acquired { .. }) => {}
            Ok(Acquire::Busy { .. }) => {
                bump(&self.turns.claim_busy);
                return TurnOutcome::ClaimBusy;
            }
            Err(_) => {
                bump(&self.turns.failed);
                return TurnOutcome::Failed;
            }
        }
        tokio::time::sleep(self.hold).await;
        let more = lock(&self.mix).below(self.more_one_in) == 0;
        match self.store.release(&key, &token).await {
            Ok(Release::Released) => {}
            Ok(Release::NotOwner) => bump(&self.turns.not_owner),
            Err(_) => bump(&self.turns.failed),
        }
        if more { TurnOutcome::Productive { more: true } } else { TurnOutcome::Done }
    }

    fn hand_off(&self, owner: OwnerId) {
        bump(&self.turns.handed_off);
        let _ = self.requeue.send(owner);
    }
}

/// The cumulative Zipf distribution over `n` ranks.
fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=n.max(1))
        .map(|r| {
            acc += 1.0 / (r as f64).powf(s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

/// The running owner path.
pub(crate) struct OwnerPath {
    pub(crate) turns: Arc<Turns>,
    requesting: Arc<AtomicBool>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl OwnerPath {
    /// Start one request generator and one driven scheduler per store.
    pub(crate) fn start(
        shape: &Shape,
        stores: &[Metered],
        observer: &Arc<Counting>,
        clock: &Arc<TokioClock>,
        seed: u64,
    ) -> OwnerPath {
        let turns = Arc::new(Turns::default());
        let requesting = Arc::new(AtomicBool::new(true));
        let (shutdown, _) = watch::channel(false);
        let cdf = Arc::new(zipf_cdf(shape.owners, shape.zipf));
        let names: Arc<Vec<OwnerId>> =
            Arc::new((0..shape.owners).map(|i| OwnerId::from(format!("owner-{i}"))).collect());
        let mut tasks = JoinSet::new();
        for (i, store) in stores.iter().enumerate() {
            let (tx, mut rx) = mpsc::unbounded_channel::<OwnerId>();
            let instance_seed = seed.wrapping_add(i as u64 * 7919);
            // Requests: every 10 ms, a hundredth of the rate, Zipf-drawn.
            let (on, cdf, names, counters, sender) =
                (requesting.clone(), cdf.clone(), names.clone(), turns.clone(), tx.clone());
            let per_tick = (shape.rate / 100).max(1);
            tasks.spawn(async move {
                let mut mix = Mix::new(instance_seed);
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                while on.load(Ordering::Relaxed) {
                    tick.tick().await;
                    for _ in 0..per_tick {
                        let u = mix.unit();
                        let rank = cdf.partition_point(|&c| c < u).min(names.len() - 1);
                        counters.requests.fetch_add(1, Ordering::Relaxed);
                        let _ = sender.send(names[rank].clone());
                    }
                }
            });
            let work = Work {
                instance: format!("owners-{i}"),
                store: store.clone(),
                hold: shape.hold,
                more_one_in: shape.more_one_in,
                turns: turns.clone(),
                rng: Mutex::new(TestRng::new(instance_seed ^ 0xA5A5)),
                mix: Mutex::new(Mix::new(instance_seed ^ 0x5A5A)),
                requeue: tx,
            };
            let (cfg, store, observer, clock, mut stop) =
                (shape.scheduler.clone(), store.clone(), observer.clone(), clock.clone(), shutdown.subscribe());
            tasks.spawn(async move {
                let mut scheduler = Scheduler::new(cfg, TestRng::new(instance_seed));
                let ports = DriverPorts { claims: Some(&store), work: &work, clock: &*clock, observer: &*observer };
                let requests = futures::stream::poll_fn(move |cx| match rx.poll_recv(cx) {
                    Poll::Ready(v) => Poll::Ready(v),
                    Poll::Pending => Poll::Pending,
                });
                let shutdown = async move {
                    let _ = stop.wait_for(|s| *s).await;
                };
                drive(&mut scheduler, ports, requests, shutdown).await;
            });
        }
        OwnerPath { turns, requesting, shutdown, tasks }
    }

    /// Stop requesting, close every scheduler (pending intents are handed off),
    /// and wait for the running turns to finish, within `bound`.
    pub(crate) async fn stop(mut self, bound: Duration) -> Result<Arc<Turns>, String> {
        self.requesting.store(false, Ordering::Relaxed);
        let _ = self.shutdown.send(true);
        let join = async {
            while let Some(r) = self.tasks.join_next().await {
                r.map_err(|e| format!("an owner task panicked: {e}"))?;
            }
            Ok::<(), String>(())
        };
        match tokio::time::timeout(bound, join).await {
            Ok(r) => r?,
            Err(_) => return Err(format!("the owner schedulers did not stop within {bound:?}")),
        }
        Ok(self.turns)
    }
}

//! The fleet run: `drain run` processes, as a fleet runs them, drain a RabbitMQ queue
//! into another with the lease and claims on a managed store behind the loopback proxy
//! of `harness.rs` (Redis: a primary and a replica; or PostgreSQL), each message
//! stamped with its tick's fence. A producer feeds the source all along; a consumer
//! reads the target and checks every message's fence with drain-core's `FenceCheck`, as
//! the example consumer does. The nemesis runs the faults of `harness.rs` on the store,
//! and freezes the process that holds the lease (SIGSTOP past the TTL).
//!
//! What is recorded: every message fed, every arrival at the consumer (its fence and
//! whether the check refused it) and every tick the processes logged (its fence, its
//! counts). `fleet_check.rs` judges it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use adapter_redis::KeySpace;
use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use drain_core::fence::FenceCheck;
use drain_core::memory::MemoryStore;
use drain_core::ports::{Clock, LeaseName, MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use drain_e2e::rabbit::{self, Broker, Queue};
use drain_e2e::{Running, TokioClock, beat_started, drain_bin, fleet_member};
use futures::future::join_all;
use test_servers::Reply;

use super::check::{Fault, FaultRun};
use super::fleet_check::{Arrival, FleetHistory, Tick};
use super::harness::{Servers, Store};

/// `drain run` processes in the fleet.
pub(crate) const PROCESSES: usize = 3;
/// The lease's TTL: the floor of `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`.
pub(crate) const TTL: Duration = Duration::from_secs(10);
/// The application property the processes stamp with the fence.
const PROPERTY: &str = "drain-fence";
/// The producer feeds this many messages at every step (200 a second).
const FEED: usize = 10;
const FEED_EVERY: Duration = Duration::from_millis(50);
/// After each fault, before the next.
const SETTLE: Duration = Duration::from_secs(5);
/// Bound on the drain of what is left once the faults are over.
const DRAINED: Duration = Duration::from_secs(90);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the producer, the consumer and the nemesis share.
struct Shared {
    origin: Instant,
    stop_feed: AtomicBool,
    stop_consumer: AtomicBool,
    fed: AtomicUsize,
    arrivals: Mutex<Vec<Arrival>>,
}

fn id(n: usize) -> String {
    format!("m{n:07}")
}

/// Feed `FEED` messages every `FEED_EVERY` until told to stop.
async fn produce(shared: &Shared, endpoint: Endpoint) {
    let feed = AmqpSubmitter::connect(endpoint, SubmitterOptions::default()).await.expect("the producer");
    let ctx = SubmitContext { queue: "feed", fence: None };
    while !shared.stop_feed.load(Ordering::SeqCst) {
        let from = shared.fed.load(Ordering::SeqCst);
        let messages: Vec<_> = (from..from + FEED).map(|n| message(&id(n))).collect();
        for r in join_all(messages.iter().map(|m| feed.submit(m, &ctx))).await {
            r.expect("the producer's submit");
        }
        shared.fed.store(from + FEED, Ordering::SeqCst);
        tokio::time::sleep(FEED_EVERY).await;
    }
    feed.close().await.expect("close the producer");
}

/// Take everything off the target, checking each message's fence, until told to stop.
async fn consume(shared: &Shared, endpoint: Endpoint, queue: &str) {
    let options = SourceOptions { prefetch: 256, ..SourceOptions::default() };
    let source = AmqpSource::connect(endpoint, options).await.expect("the consumer");
    let marks = MemoryStore::new(Arc::new(TokioClock::new()) as Arc<dyn Clock>);
    let check = FenceCheck::new(&marks, PROPERTY);
    while !shared.stop_consumer.load(Ordering::SeqCst) {
        let batch = source.receive(256, Duration::from_millis(200)).await.expect("the consumer's receive");
        for d in batch {
            let id = d.message.message_id.as_ref().map(ToString::to_string).unwrap_or_default();
            let fence = check.fence_of(&d.message).expect("a fence or none");
            let refused = check.check(queue, &d.message).await.expect("the marks answer").must_refuse();
            let at = shared.origin.elapsed();
            lock(&shared.arrivals).push(Arrival { id, fence, at, refused });
            source.complete(d.handle).await.expect("the consumer's complete");
        }
    }
    source.close().await.expect("close the consumer");
}

/// The instance that holds `queue`'s lease on the store now, if one does.
fn holder(servers: &Servers, queue: &str) -> Option<usize> {
    let holder = if let Some(primary) = servers.primary() {
        let keys = KeySpace::new("drain").lease(&LeaseName::queue(queue));
        let Ok(Reply::Bulk(Some(token))) = primary.command(&["GET", &keys.lease]) else { return None };
        String::from_utf8_lossy(&token).rsplit_once(':')?.0.to_owned()
    } else {
        // Queue names are plain identifiers: nothing to quote.
        let sql = format!("SELECT holder FROM drain.leases WHERE name = '{queue}' AND expires_at > clock_timestamp()");
        servers.postgres()?.sql(&sql).ok()?.into_iter().next()?.into_iter().next()??
    };
    holder.strip_prefix("fleet-")?.parse().ok()
}

/// The ticks a process logged: each report with a fence, and its possible duplicates.
fn ticks(p: &mut Running, instance: usize) -> Vec<Tick> {
    p.count("");
    p.seen
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line["report"].as_str()?).ok())
        .filter_map(|r| {
            let count = |k: &str| r[k].as_u64().unwrap_or(0);
            Some(Tick {
                instance,
                fence: r["fence"].as_u64()?,
                possible_duplicates: count("claims_expired") + count("submit_failures"),
                lease_lost: r["lease_lost"].as_bool().unwrap_or(false),
            })
        })
        .collect()
}

/// Run `faults` in order on a fleet with its lease and claims on `store` (adapter-redis
/// or adapter-postgres); the recorded history.
pub(crate) fn run(store: Store, faults: &[Fault]) -> FleetHistory {
    let broker = Broker::shared("nemesis_fleet");
    let mut servers = Servers::start(store);
    drain_bin(); // built before the clock starts
    let (source, target) = (Queue::declare(&broker, "fleet-source"), Queue::declare(&broker, "fleet-target"));
    let endpoint = |q: &str| Endpoint::parse(&broker.url(q)).expect("a queue's URL").endpoint;
    let mut procs: Vec<Running> = (0..PROCESSES)
        .map(|i| {
            let instance = format!("fleet-{i}");
            let urls = (broker.url(&source.name), broker.url(&target.name));
            let mut cmd = fleet_member(&servers.lease_url(), (&urls.0, &urls.1), &instance);
            cmd.env("DRAIN_TARGET_FENCE_PROPERTY", PROPERTY)
                .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", TTL.as_secs().to_string());
            beat_started(cmd, &instance)
        })
        .collect();
    let shared = Arc::new(Shared {
        origin: Instant::now(),
        stop_feed: AtomicBool::new(false),
        stop_consumer: AtomicBool::new(false),
        fed: AtomicUsize::new(0),
        arrivals: Mutex::new(Vec::new()),
    });
    let producer = {
        let (shared, endpoint) = (shared.clone(), endpoint(&source.name));
        std::thread::spawn(move || rabbit::block_on(produce(&shared, endpoint)))
    };
    let consumer = {
        let (shared, endpoint, name) = (shared.clone(), endpoint(&target.name), target.name.clone());
        std::thread::spawn(move || rabbit::block_on(consume(&shared, endpoint, &name)))
    };
    let now = || shared.origin.elapsed();
    let mut runs = Vec::new();
    std::thread::sleep(SETTLE);
    for &fault in faults {
        let from = now();
        match fault {
            // A beat a second: the lost writes include an acquire's or a claim's.
            Fault::Failover => servers.failover(|| std::thread::sleep(Duration::from_millis(1_500))),
            Fault::EmptyRestart => servers.restart(),
            Fault::FrozenHolder => {
                let bound = Instant::now() + Duration::from_secs(10);
                let mut held = holder(&servers, &source.name);
                while held.is_none() && Instant::now() < bound {
                    std::thread::sleep(Duration::from_millis(20));
                    held = holder(&servers, &source.name);
                }
                if let Some(i) = held {
                    procs[i].freeze();
                    std::thread::sleep(TTL + TTL / 2);
                    procs[i].thaw();
                }
            }
            Fault::Partition => {
                servers.proxy.hold();
                std::thread::sleep(TTL * 2);
                servers.proxy.release();
            }
            Fault::SlowReplies => {
                servers.pause(true);
                std::thread::sleep(Duration::from_millis(400));
                servers.pause(false);
            }
        }
        runs.push(FaultRun { fault, from, to: now() });
        std::thread::sleep(SETTLE);
    }
    shared.stop_feed.store(true, Ordering::SeqCst);
    producer.join().expect("the producer panicked");
    let fed = shared.fed.load(Ordering::SeqCst);
    // Until every message fed arrived, or the bound.
    let deadline = Instant::now() + DRAINED;
    loop {
        let arrived = lock(&shared.arrivals).iter().map(|a| a.id.as_str()).collect::<BTreeSet<_>>().len();
        if arrived >= fed || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1)); // a second copy on its way
    shared.stop_consumer.store(true, Ordering::SeqCst);
    consumer.join().expect("the consumer panicked");
    let took = now();
    let mut history_ticks = Vec::new();
    for (i, p) in procs.iter_mut().enumerate() {
        p.terminate();
        let _ = p.wait_exit(Duration::from_secs(30));
        history_ticks.extend(ticks(p, i));
    }
    let left = broker.counts(&source.name);
    let arrivals = std::mem::take(&mut *lock(&shared.arrivals));
    FleetHistory {
        fed: (0..fed).map(id).collect(),
        arrivals,
        ticks: history_ticks,
        faults: runs,
        left_in_source: left.0 + left.1,
        ttl: TTL,
        took,
    }
}

//! A claim-store outage burns nothing (docs/reliability.md, "Per-message claim").
//!
//! `drain run` with the beat and the resident consumer drains a queue whose messages
//! are dead-lettered after 3 deliveries (a broker's max delivery count), the claim on
//! a private Redis. Redis is frozen (SIGSTOP, by pid) for 60 s mid-drain, then
//! resumed. Every receive of a message that cannot be claimed costs it a delivery, so
//! a consumer that keeps receiving and abandoning during the outage dead-letters the
//! backlog. Required: nothing dead-lettered, every message in the target exactly
//! once, under 2 s of CPU during the outage, and at most one log line per tick or
//! back-off step (summaries with counts, never a line per message).
//!
//! The broker is behind [`OutageBroker`]: RabbitMQ's quorum queues with
//! `x-delivery-limit` (its `released` outcome, drain's abandon there, counts as a
//! delivery), and test-servicebus with `MaxDeliveryCount` 3 (an abandon, and a lock
//! that runs out, count one). On both, once the first tick has failed and while the
//! store is known down, the process holds no message: nothing unacknowledged on
//! RabbitMQ, no lock on Service Bus (a lock held through the outage would run out
//! and count a delivery).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drain_e2e::rabbit::{Broker, Queue};
use drain_e2e::servicebus;
use drain_e2e::{RedisServer, Running, cpu_seconds, drain, drain_bin, free_port, redis, scrape};
use test_servers::Reply;
use test_servicebus::{QueueConfig, SubQueue};

/// Messages fed before the drain starts.
const N: usize = 600;
/// Deliveries after which the broker dead-letters a message.
const MAX_DELIVERIES: u32 = 3;
/// How long Redis stays frozen.
const OUTAGE: Duration = Duration::from_secs(60);
/// `DRAIN_BEAT_INTERVAL_SECONDS`.
const BEAT_SECONDS: u64 = 2;
/// Bound on the drain after Redis is back.
const TAIL_BOUND: Duration = Duration::from_secs(120);
/// CPU seconds the process may use during the outage.
const CPU_BOUND: f64 = 2.0;
/// How often what the process holds is sampled during the outage. A hold that comes
/// and goes between samples costs deliveries, which the dead-letter count catches; a
/// lock held through the outage shows in every sample. (On RabbitMQ each sample is a
/// `rabbitmqctl` run, 0.7 s of CPU.)
const HELD_EVERY: Duration = Duration::from_secs(3);

/// What the scenario needs from a broker.
trait OutageBroker {
    /// `DRAIN_SOURCE_URL`: a queue that dead-letters after [`MAX_DELIVERIES`].
    fn source_url(&self) -> String;
    /// `DRAIN_TARGET_URL`.
    fn target_url(&self) -> String;
    /// Put one message per id on the source.
    fn feed(&self, ids: &[String]);
    /// Messages on the source, ready or delivered and not yet settled.
    fn source_left(&self) -> u64;
    /// Messages of the source delivered and not settled (unacknowledged, locked).
    fn held(&self) -> u64;
    /// Messages the source dead-lettered.
    fn dead_lettered(&self) -> u64;
    /// Take everything off the target: message id -> times seen.
    fn collect_target(&self) -> BTreeMap<String, u32>;
}

/// RabbitMQ: a quorum source with `x-delivery-limit` dead-lettering into a queue of
/// its own, and a classic target.
struct Rabbit<'a> {
    broker: &'a Broker,
    source: Queue<'a>,
    dead: Queue<'a>,
    target: Queue<'a>,
}

impl<'a> Rabbit<'a> {
    fn new(broker: &'a Broker) -> Rabbit<'a> {
        let dead = Queue::declare(broker, "outage-dead");
        let source = Queue::declare_quorum(broker, "outage-source", MAX_DELIVERIES, &dead.name);
        let target = Queue::declare(broker, "outage-target");
        Rabbit { broker, source, dead, target }
    }
}

impl OutageBroker for Rabbit<'_> {
    fn source_url(&self) -> String {
        self.broker.url(&self.source.name)
    }
    fn target_url(&self) -> String {
        self.broker.url(&self.target.name)
    }
    fn feed(&self, ids: &[String]) {
        self.broker.feed(&self.source.name, ids);
    }
    fn source_left(&self) -> u64 {
        let (ready, unacked) = self.broker.counts(&self.source.name);
        ready + unacked
    }
    fn held(&self) -> u64 {
        self.broker.counts(&self.source.name).1
    }
    fn dead_lettered(&self) -> u64 {
        self.broker.counts(&self.dead.name).0
    }
    fn collect_target(&self) -> BTreeMap<String, u32> {
        self.broker.collect(&self.target.name)
    }
}

/// test-servicebus: `requests` dead-letters after [`MAX_DELIVERIES`] (its lock is
/// Service Bus's default, 60 s), `work` is the target.
struct ServiceBus {
    broker: test_servicebus::Broker,
}

impl ServiceBus {
    fn new() -> ServiceBus {
        let source = QueueConfig { max_delivery_count: MAX_DELIVERIES, ..QueueConfig::default() };
        ServiceBus { broker: servicebus::broker(&[("requests", source), ("work", QueueConfig::default())]) }
    }
}

impl OutageBroker for ServiceBus {
    fn source_url(&self) -> String {
        servicebus::url(&self.broker, "requests")
    }
    fn target_url(&self) -> String {
        servicebus::url(&self.broker, "work")
    }
    fn feed(&self, ids: &[String]) {
        servicebus::feed(&self.broker, "requests", ids);
    }
    fn source_left(&self) -> u64 {
        let (active, locked) = servicebus::counts(&self.broker, "requests");
        (active + locked) as u64
    }
    fn held(&self) -> u64 {
        servicebus::counts(&self.broker, "requests").1 as u64
    }
    fn dead_lettered(&self) -> u64 {
        self.broker.stats("requests").map_or(0, |s| s.dead_lettered as u64)
    }
    fn collect_target(&self) -> BTreeMap<String, u32> {
        servicebus::ids(&self.broker, "work", SubQueue::Main)
    }
}

/// Claims in Redis (every key but the lease and its fence, once the lease exists).
fn claims(redis: &RedisServer) -> u64 {
    match redis.command(&["DBSIZE"]).expect("DBSIZE") {
        Reply::Int(n) => u64::try_from(n).unwrap_or(0).saturating_sub(2),
        other => panic!("DBSIZE answered {other:?}"),
    }
}

/// The `message` field of a JSON log line.
fn message(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| line.to_owned())
}

/// What one outage cost.
#[derive(Debug)]
struct Measured {
    cpu_seconds: f64,
    log_lines: Vec<String>,
    dead_lettered: u64,
    target: BTreeMap<String, u32>,
    left: u64,
    /// `drain_ticks_total{outcome="claims_down"}` at the end of the outage: beats
    /// that started no tick because the claim store was down.
    claims_down_ticks: f64,
    /// The most messages the process held (unsettled at the broker) once the first
    /// failed tick was logged and [`PARK_GRACE`] passed, sampled until the store was
    /// back, and how many samples that took.
    held_while_down: u64,
    held_samples: u32,
    /// From the first of those samples to the last.
    held_sampled_for: Duration,
}

/// The line the first failed tick logs (the claim gate closing).
const GATE_CLOSED: &str = "claim store failing: nothing is received";
/// Time from that line to the source holding nothing.
const PARK_GRACE: Duration = Duration::from_secs(3);

/// The sum of every `/metrics` series of `name` whose labels include `label`.
fn sum_of(body: &str, name: &str, label: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Drain `broker`'s source with `drain run --resident`, freeze `redis` for [`OUTAGE`]
/// once the first batch is claimed, resume it, and wait for the source to empty.
fn outage(broker: &dyn OutageBroker, redis: &mut RedisServer) -> Measured {
    let ids: Vec<String> = (0..N).map(|i| format!("m-{i:04}")).collect();
    broker.feed(&ids);
    let metrics = free_port();
    let mut cmd = drain();
    cmd.args(["run", "--resident"])
        .env("DRAIN_LOG", "info")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{metrics}"))
        .env("DRAIN_REDIS_URL", redis.url())
        .env("DRAIN_SOURCE_URL", broker.source_url())
        .env("DRAIN_TARGET_URL", broker.target_url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "10")
        .env("SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS", "10")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", BEAT_SECONDS.to_string())
        .env("SERVICEBUS_DRAIN_BATCH", "32")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "4")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "5");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("beat started", Duration::from_secs(30)), "drain did not start: {}", run.log());
    let deadline = Instant::now() + Duration::from_secs(60);
    while claims(redis) < 32 {
        assert!(Instant::now() < deadline, "no batch claimed within 60 s: {}", run.log());
        std::thread::sleep(Duration::from_millis(20));
    }

    redis.pause();
    let cpu_before = cpu_seconds(run.pid());
    let lines_before = run.count("");
    let thawed = Instant::now() + OUTAGE;
    let (mut closed_at, mut held_while_down, mut held_samples) = (None, 0u64, 0u32);
    let mut sampled: Option<(Instant, Instant)> = None;
    while let Some(left) = thawed.checked_duration_since(Instant::now()) {
        run.wait_for("\u{0}", left.min(Duration::from_millis(500)));
        if closed_at.is_none() && run.count(GATE_CLOSED) > 0 {
            closed_at = Some(Instant::now());
        }
        let due = sampled.is_none_or(|(_, last)| last.elapsed() >= HELD_EVERY);
        if due && closed_at.is_some_and(|t| t.elapsed() >= PARK_GRACE) {
            held_while_down = held_while_down.max(broker.held());
            held_samples += 1;
            let now = Instant::now();
            sampled = Some((sampled.map_or(now, |(first, _)| first), now));
        }
    }
    let cpu_seconds = cpu_seconds(run.pid()) - cpu_before;
    let claims_down_ticks = sum_of(&scrape(metrics), "drain_ticks_total", r#"outcome="claims_down""#);
    run.count("");
    let log_lines = run.seen[lines_before..].to_vec();
    redis.resume();

    let deadline = Instant::now() + TAIL_BOUND;
    let mut left = broker.source_left();
    while left > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        left = broker.source_left();
    }
    run.terminate();
    let status = run.wait_exit(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "drain exited with {status:?}: {}", run.log());
    Measured {
        cpu_seconds,
        log_lines,
        dead_lettered: broker.dead_lettered(),
        target: broker.collect_target(),
        left,
        claims_down_ticks,
        held_while_down,
        held_samples,
        held_sampled_for: sampled.map_or(Duration::ZERO, |(first, last)| last - first),
    }
}

/// Check a measured outage against the promise; `ids` were fed.
fn check(m: &Measured) {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for line in &m.log_lines {
        *kinds.entry(message(line)).or_default() += 1;
    }
    eprintln!(
        "during the {OUTAGE:?} outage: {:.2} CPU seconds, {} claims_down beats, at most {} messages held in {} \
         samples over {:?} after the gate closed, {} log lines {kinds:#?}; after it: {} dead-lettered, {} distinct ids in \
         the target, {} left in the source",
        m.cpu_seconds,
        m.claims_down_ticks,
        m.held_while_down,
        m.held_samples,
        m.held_sampled_for,
        m.log_lines.len(),
        m.dead_lettered,
        m.target.len(),
        m.left
    );
    assert!(
        m.held_sampled_for >= OUTAGE / 2,
        "the gate closed late: what the process held was sampled for {:?} only",
        m.held_sampled_for
    );
    assert_eq!(m.held_while_down, 0, "while the claim store was known down the process held messages");
    assert_eq!(m.dead_lettered, 0, "the outage dead-lettered messages");
    let missing: Vec<String> = (0..N).map(|i| format!("m-{i:04}")).filter(|id| !m.target.contains_key(id)).collect();
    assert!(
        missing.is_empty(),
        "{} messages never reached the target: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let twice: Vec<(&String, &u32)> = m.target.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "submitted more than once: {twice:?}");
    assert_eq!(m.target.len(), N, "only the ids fed arrive");
    assert_eq!(m.left, 0, "the source is empty");
    assert!(m.cpu_seconds < CPU_BOUND, "{:.2} CPU seconds during the outage", m.cpu_seconds);
    // Nothing received, yet the outage shows: the beats count it.
    assert!(m.claims_down_ticks >= 5.0, "{} beats counted claims_down in {OUTAGE:?}", m.claims_down_ticks);
    // Every line is a tick's summary or a back-off step, never a line per message;
    // at most one summary per tick (a beat every BEAT_SECONDS, jittered down to half,
    // and the resident consumer's batches, each waiting at least its receive).
    let (mut summaries, mut steps) = (0u64, 0u64);
    for line in &m.log_lines {
        match message(line).as_str() {
            "tick done" | "resident batch" | "tick ended early" => summaries += 1,
            text if text.contains("back-off step") => steps += 1,
            text => panic!("a log line that is neither a tick summary nor a back-off step: {text}"),
        }
    }
    let ticks = OUTAGE.as_secs() * 2 / BEAT_SECONDS + 1 + OUTAGE.as_secs() * 2;
    assert!(summaries <= ticks, "{summaries} tick summaries during the outage (at most {ticks})");
    assert!(steps <= OUTAGE.as_secs(), "{steps} back-off steps (at most one a second)");
}

#[test]
fn a_frozen_claim_store_dead_letters_nothing_and_burns_no_cpu() {
    let broker = Broker::shared("outage_amqp");
    let mut redis = redis();
    drain_bin(); // built before anything is timed
    let rabbit = Rabbit::new(&broker);
    let measured = outage(&rabbit, &mut redis);
    check(&measured);
}

#[test]
fn a_frozen_claim_store_dead_letters_nothing_on_service_bus_and_holds_no_lock() {
    let mut redis = redis();
    drain_bin(); // built before anything is timed
    let broker = ServiceBus::new();
    let measured = outage(&broker, &mut redis);
    check(&measured);
}

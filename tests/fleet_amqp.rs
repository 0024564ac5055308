//! The `drain` binary over RabbitMQ's AMQP 1.0 with a private Redis: a fleet of
//! processes SIGKILLed and restarted mid-drain, and a private broker restarted
//! while two processes drain.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use adapter_redis::KeySpace;
use adapter_redis::keys::KeyKind;
use drain_core::ports::LeaseName;
use drain_e2e::rabbit::{Broker, Queue};
use drain_e2e::{RedisServer, Running, drain, drain_bin, redis};
use test_servers::Reply;

/// `DRAIN_KEY_PREFIX` (the default).
const PREFIX: &str = "drain";
/// Lease and pending-claim TTL, seconds (both at their floor).
const TTL: u64 = 10;
/// Bound on a whole drain.
const DRAIN_BOUND: Duration = Duration::from_secs(150);
/// Bound on the tail, once the kills or restarts are over.
const TAIL_BOUND: Duration = Duration::from_secs(60);

/// One `drain run` of the fleet: lease and claims on, short TTLs, a beat every second.
fn start(redis: &RedisServer, broker: &Broker, queues: (&str, &str), concurrency: u32, instance: &str) -> Running {
    let (source, target) = queues;
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_LOG", "info")
        .env("DRAIN_REDIS_URL", redis.url())
        .env("DRAIN_SOURCE_URL", broker.url(source))
        .env("DRAIN_TARGET_URL", broker.url(target))
        .env("DRAIN_INSTANCE_ID", instance)
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_ATOMIC_CLAIM", "on")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", TTL.to_string())
        .env("SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS", TTL.to_string())
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", concurrency.to_string())
        .env("SERVICEBUS_DRAIN_BATCH", "32")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "5");
    let mut p = Running::spawn(cmd);
    assert!(p.wait_for("beat started", Duration::from_secs(30)), "{instance} did not start: {}", p.log());
    p
}

/// Processes of one test, each in a slot; a restarted slot gets a new instance id.
struct Fleet {
    procs: Vec<Option<(String, Running)>>,
    starts: u32,
}

impl Fleet {
    fn new(n: usize) -> Fleet {
        Fleet { procs: (0..n).map(|_| None).collect(), starts: 0 }
    }

    fn start(&mut self, slot: usize, run: impl FnOnce(&str) -> Running) {
        self.starts += 1;
        let instance = format!("drain-{slot}-{}", self.starts);
        let p = run(&instance);
        self.procs[slot] = Some((instance, p));
    }

    /// SIGKILL the process of `slot` and reap it; its instance id.
    fn kill(&mut self, slot: usize) -> String {
        let (instance, p) = self.procs[slot].take().expect("a process in the slot");
        drop(p); // `Running` sends SIGKILL and waits
        instance
    }

    /// The slot whose process holds `queue`'s lease now.
    fn holder(&self, redis: &RedisServer, queue: &str) -> Option<usize> {
        let key = KeySpace::new(PREFIX).lease(&LeaseName::queue(queue)).lease;
        let token = string(redis.command(&["GET", &key]).expect("GET lease"))?;
        let (instance, _) = token.rsplit_once(':')?;
        self.procs.iter().position(|p| p.as_ref().is_some_and(|(i, _)| i == instance))
    }

    /// Log lines of the running processes that contain `needle`.
    fn count(&mut self, needle: &str) -> usize {
        self.procs.iter_mut().flatten().map(|(_, p)| p.count(needle)).sum()
    }

    /// What every running process logged.
    fn logs(&mut self) -> String {
        let mut out = String::new();
        for (instance, p) in self.procs.iter_mut().flatten() {
            p.count("");
            out.push_str(&format!("--- {instance}\n{}\n", p.log()));
        }
        out
    }

    /// SIGTERM every process; each exits 0 within the bound.
    fn stop(&mut self) {
        for (instance, mut p) in self.procs.iter_mut().filter_map(Option::take) {
            p.terminate();
            let status = p.wait_exit(Duration::from_secs(20));
            assert!(status.is_some_and(|s| s.success()), "{instance} exited with {status:?}: {}", p.log());
        }
    }
}

fn string(reply: Reply) -> Option<String> {
    match reply {
        Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    }
}

fn array(reply: Reply) -> Vec<Reply> {
    match reply {
        Reply::Array(Some(items)) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// Message ids of `queue` whose claim is `pending:<token>` of `instance`: taken, maybe
/// submitted, never marked done.
fn pending_claims(redis: &RedisServer, queue: &str, instance: &str) -> BTreeSet<String> {
    let space = KeySpace::new(PREFIX);
    let mine = format!("pending:{instance}:");
    let pattern = format!("{PREFIX}:msg:*");
    let mut out = BTreeSet::new();
    let mut cursor = "0".to_owned();
    for _ in 0..100_000 {
        let mut reply = array(redis.command(&["SCAN", &cursor, "MATCH", &pattern, "COUNT", "1000"]).expect("SCAN"));
        let keys: Vec<String> = array(reply.pop().expect("keys")).into_iter().filter_map(string).collect();
        cursor = string(reply.pop().expect("cursor")).expect("cursor");
        if !keys.is_empty() {
            let mut mget = vec!["MGET"];
            mget.extend(keys.iter().map(String::as_str));
            let values = array(redis.command(&mget).expect("MGET"));
            for (key, value) in keys.iter().zip(values.into_iter().map(string)) {
                if value.is_some_and(|v| v.starts_with(&mine))
                    && let Some(KeyKind::MessageClaim { queue: q, message_id }) = space.parse(key)
                    && q == queue.as_bytes()
                {
                    out.insert(message_id.to_string());
                }
            }
        }
        if cursor == "0" {
            return out;
        }
    }
    panic!("SCAN did not finish");
}

/// Message claims in Redis (every key but the lease and its fence).
fn claims(redis: &RedisServer) -> u64 {
    match redis.command(&["DBSIZE"]).expect("DBSIZE") {
        Reply::Int(n) => u64::try_from(n).unwrap_or(0).saturating_sub(2),
        other => panic!("DBSIZE answered {other:?}"),
    }
}

/// Wait (bounded) until `queue`'s lease key is gone.
fn assert_lease_gone(redis: &RedisServer, queue: &str) {
    let key = KeySpace::new(PREFIX).lease(&LeaseName::queue(queue)).lease;
    let deadline = Instant::now() + Duration::from_secs(TTL + 5);
    while redis.command(&["EXISTS", &key]).expect("EXISTS") != Reply::Int(0) {
        assert!(Instant::now() < deadline, "the lease {key} outlived its TTL");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Wait (bounded) until at least `n` messages were claimed.
fn wait_claimed(redis: &RedisServer, n: u64) {
    let deadline = Instant::now() + DRAIN_BOUND;
    while claims(redis) < n {
        assert!(Instant::now() < deadline, "fewer than {n} messages claimed within {DRAIN_BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait (bounded) until `source` holds nothing, ready or unacknowledged; the logs of
/// the fleet when it does not.
fn wait_drained(broker: &Broker, source: &str, fleet: &mut Fleet) {
    let deadline = Instant::now() + TAIL_BOUND;
    loop {
        let (ready, unacked) = broker.counts(source);
        if ready + unacked == 0 {
            return;
        }
        if Instant::now() > deadline {
            panic!("{ready} ready, {unacked} unacked on {source} after {TAIL_BOUND:?}; logs:\n{}", fleet.logs());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m-{i:05}")).collect()
}

/// Every id of `ids` arrived; the ones that arrived more than once are in `allowed`.
fn check_target(seen: &BTreeMap<String, u32>, ids: &[String], allowed: &BTreeSet<String>) -> usize {
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(missing.is_empty(), "{} messages lost: {missing:?}", missing.len());
    assert_eq!(seen.len(), ids.len(), "only the ids that were sent arrive");
    let twice: BTreeMap<&String, &u32> = seen.iter().filter(|(_, n)| **n > 1).collect();
    let unexplained: Vec<_> = twice.iter().filter(|(id, _)| !allowed.contains(**id)).collect();
    assert!(unexplained.is_empty(), "submitted twice, not in flight at a kill: {unexplained:?}");
    twice.len()
}

#[test]
fn a_fleet_sigkilled_mid_drain_duplicates_only_what_was_in_flight_at_a_kill() {
    const N: usize = 5_000;
    const PROCESSES: usize = 4;
    const HOLDER_KILLS: u32 = 3;
    const STEP: u64 = 600;
    let Some(broker) = Broker::shared("fleet_amqp") else { return };
    let Some(redis) = redis() else { return };
    drain_bin(); // built before the clock starts
    let source = Queue::declare(&broker, "fleet-source");
    let target = Queue::declare(&broker, "fleet-target");
    let ids = ids(N);
    broker.feed(&source.name, &ids);
    assert_eq!(broker.counts(&source.name), (N as u64, 0));

    let started = Instant::now();
    let run = |instance: &str| start(&redis, &broker, (&source.name, &target.name), 8, instance);
    let mut fleet = Fleet::new(PROCESSES);
    for slot in 0..PROCESSES {
        fleet.start(slot, run);
    }
    // The lease holder is SIGKILLed each time the fleet claimed another `STEP`
    // messages, `HOLDER_KILLS` times; in between, every 1.5 s, a process that waits
    // for the lease is. Each is restarted at once under a new instance id.
    let (mut kills, mut holder_kills, mut at_holder_kill) = (0u32, 0u32, 0u64);
    let mut last_kill = Instant::now();
    let mut in_flight = BTreeSet::new();
    while holder_kills < HOLDER_KILLS && started.elapsed() < DRAIN_BOUND {
        std::thread::sleep(Duration::from_millis(50));
        let claimed = claims(&redis);
        if claimed >= N as u64 {
            break; // every message was claimed once: what is left is the tail
        }
        let holder = fleet.holder(&redis, &source.name);
        let victim = match holder {
            Some(slot) if claimed >= at_holder_kill + STEP => {
                holder_kills += 1;
                at_holder_kill = claimed;
                slot
            }
            _ if last_kill.elapsed() < Duration::from_millis(1500) => continue,
            Some(slot) => (slot + 1 + kills as usize % (PROCESSES - 1)) % PROCESSES,
            None => kills as usize % PROCESSES,
        };
        let instance = fleet.kill(victim);
        let pending = pending_claims(&redis, &source.name, &instance);
        eprintln!(
            "{:>5.1} s kill {}: {instance}{} at {claimed} claimed, {} claims pending",
            started.elapsed().as_secs_f64(),
            kills + 1,
            if holder == Some(victim) { " (lease holder)" } else { "" },
            pending.len()
        );
        in_flight.extend(pending);
        kills += 1;
        last_kill = Instant::now();
        fleet.start(victim, run);
    }
    wait_drained(&broker, &source.name, &mut fleet);
    let took = started.elapsed();
    fleet.stop();
    assert_lease_gone(&redis, &source.name);

    let seen = broker.collect(&target.name);
    let duplicates = check_target(&seen, &ids, &in_flight);
    eprintln!(
        "{N} messages through {PROCESSES} processes in {:.1} s: {kills} kills ({holder_kills} of the lease holder), \
         {} claims in flight at a kill, {duplicates} messages submitted twice",
        took.as_secs_f64(),
        in_flight.len()
    );
    assert!(holder_kills >= 2, "the kills hit the drain: {holder_kills} of the lease holder");
    assert_eq!(broker.counts(&source.name), (0, 0), "nothing left in the source");
}

#[test]
fn a_broker_restarted_under_load_loses_nothing_and_submits_each_message_once() {
    const N: usize = 2_000;
    const RESTARTS: u64 = 2;
    let Some(redis) = redis() else { return };
    let Some(broker) = Broker::private("broker_restart") else { return };
    let source = Queue::declare(&broker, "restart-source");
    let target = Queue::declare(&broker, "restart-target");
    let ids = ids(N);
    broker.feed(&source.name, &ids);
    assert_eq!(broker.counts(&source.name), (N as u64, 0));

    let started = Instant::now();
    let mut fleet = Fleet::new(2);
    for slot in 0..2 {
        fleet.start(slot, |instance| start(&redis, &broker, (&source.name, &target.name), 1, instance));
    }
    // Restart the broker each time another part of the messages was claimed.
    for r in 1..=RESTARTS {
        wait_claimed(&redis, r * N as u64 / (RESTARTS + 1));
        eprintln!("{:>5.1} s restart {r} at {} claimed", started.elapsed().as_secs_f64(), claims(&redis));
        broker.restart(Duration::from_secs(1));
    }
    wait_drained(&broker, &source.name, &mut fleet);
    let took = started.elapsed();
    let reconnects = fleet.count("link is gone; reconnecting");
    fleet.stop();
    assert_lease_gone(&redis, &source.name);

    let seen = broker.collect(&target.name);
    check_target(&seen, &ids, &BTreeSet::new());
    assert!(reconnects >= 2 * RESTARTS as usize, "each restart cut both processes' links: {reconnects} reconnects");
    eprintln!(
        "{N} messages through 2 processes and {RESTARTS} broker restarts in {:.1} s, {reconnects} links reconnected",
        took.as_secs_f64()
    );
    assert_eq!(broker.counts(&source.name), (0, 0), "nothing left in the source");
}

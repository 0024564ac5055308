//! The `drain` binary over AMQP 1.0 with a private Redis: a fleet of processes
//! SIGKILLed and restarted mid-drain, on RabbitMQ and on Service Bus (test-servicebus,
//! with duplicate detection on the target), and a private RabbitMQ node restarted
//! while two processes drain.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use adapter_redis::KeySpace;
use adapter_redis::keys::KeyKind;
use drain_core::ports::LeaseName;
use drain_e2e::rabbit::{Broker, ids};
use drain_e2e::{RedisServer, Running, beat_started, drain_bin, fleet_member, redis, servicebus};
use test_servers::Reply;
use test_servicebus::{QueueConfig, SubQueue};

/// `DRAIN_KEY_PREFIX` (the default).
const PREFIX: &str = "drain";
/// Lease and pending-claim TTL, seconds (both at their floor).
const TTL: u64 = 10;
/// Bound on a whole drain.
const DRAIN_BOUND: Duration = Duration::from_secs(150);
/// Bound on the tail, once the kills or restarts are over.
const TAIL_BOUND: Duration = Duration::from_secs(60);

/// One `drain run` of the fleet from `urls.0` to `urls.1`: lease and claims on,
/// short TTLs, a beat every second.
fn start(redis: &RedisServer, urls: (&str, &str), concurrency: u32, instance: &str) -> Running {
    let mut cmd = fleet_member(&redis.url(), urls, instance);
    cmd.env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", TTL.to_string())
        .env("SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS", TTL.to_string())
        .env("SERVICEBUS_DRAIN_CONCURRENCY", concurrency.to_string())
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "5");
    beat_started(cmd, instance)
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

/// Wait (bounded) until the source holds nothing, ready or locked (`left` counts
/// both); the logs of the fleet when it does not.
fn wait_drained(left: impl Fn() -> (u64, u64), fleet: &mut Fleet) {
    let deadline = Instant::now() + TAIL_BOUND;
    loop {
        let (ready, locked) = left();
        if ready + locked == 0 {
            return;
        }
        if Instant::now() > deadline {
            panic!("{ready} ready, {locked} unsettled in the source after {TAIL_BOUND:?}; logs:\n{}", fleet.logs());
        }
        // On RabbitMQ each look is a `rabbitmqctl` run (0.7 s of CPU): not too often.
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What [`kill_while_draining`] did.
struct Kills {
    kills: u32,
    holder_kills: u32,
    /// Ids whose claim was pending (taken, maybe submitted, not marked done) in a
    /// process when it was killed: the only ones that may be submitted twice.
    in_flight: BTreeSet<String>,
}

/// Start `PROCESSES` processes with `run`, then SIGKILL the lease holder each time
/// the fleet claimed another `STEP` of the `n` messages of `source`, `HOLDER_KILLS`
/// times; in between, every 1.5 s, a process that waits for the lease. Each is
/// restarted at once under a new instance id.
fn kill_while_draining(
    fleet: &mut Fleet,
    redis: &RedisServer,
    source: &str,
    n: usize,
    run: impl Fn(&str) -> Running + Copy,
) -> Kills {
    const HOLDER_KILLS: u32 = 3;
    const STEP: u64 = 600;
    let started = Instant::now();
    for slot in 0..PROCESSES {
        fleet.start(slot, run);
    }
    let (mut kills, mut holder_kills, mut at_holder_kill) = (0u32, 0u32, 0u64);
    let mut last_kill = Instant::now();
    let mut in_flight = BTreeSet::new();
    while holder_kills < HOLDER_KILLS && started.elapsed() < DRAIN_BOUND {
        std::thread::sleep(Duration::from_millis(50));
        let claimed = claims(redis);
        if claimed >= n as u64 {
            break; // every message was claimed once: what is left is the tail
        }
        let holder = fleet.holder(redis, source);
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
        let pending = pending_claims(redis, source, &instance);
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
    Kills { kills, holder_kills, in_flight }
}

/// Processes of the SIGKILL fleets.
const PROCESSES: usize = 4;

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

/// The sum of the counts the processes reported as "N<words>" in their tick
/// summaries (crates/drain-app/src/beat.rs words them).
fn reported(logs: &str, words: &str) -> u64 {
    logs.match_indices(words)
        .filter_map(|(at, _)| {
            let before = &logs[..at];
            let digits = before.len() - before.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            before[before.len() - digits..].parse::<u64>().ok()
        })
        .sum()
}

#[test]
fn a_fleet_sigkilled_mid_drain_duplicates_only_what_was_in_flight_at_a_kill() {
    const N: usize = 5_000;
    let broker = Broker::shared("fleet_amqp");
    let redis = redis();
    drain_bin(); // built before the clock starts
    let ids = ids(N);
    let (source, target) = broker.source_and_target("fleet", &ids);

    let started = Instant::now();
    let (source_url, target_url) = (broker.url(&source.name), broker.url(&target.name));
    let run = |instance: &str| start(&redis, (&source_url, &target_url), 8, instance);
    let mut fleet = Fleet::new(PROCESSES);
    let kills = kill_while_draining(&mut fleet, &redis, &source.name, N, run);
    wait_drained(|| broker.counts(&source.name), &mut fleet);
    let took = started.elapsed();
    fleet.stop();
    assert_lease_gone(&redis, &source.name);

    let seen = broker.collect(&target.name);
    let duplicates = check_target(&seen, &ids, &kills.in_flight);
    eprintln!(
        "{N} messages through {PROCESSES} processes in {:.1} s: {} kills ({} of the lease holder), \
         {} claims in flight at a kill, {duplicates} messages submitted twice",
        took.as_secs_f64(),
        kills.kills,
        kills.holder_kills,
        kills.in_flight.len()
    );
    assert!(kills.holder_kills >= 2, "the kills hit the drain: {} of the lease holder", kills.holder_kills);
    assert_eq!(broker.counts(&source.name), (0, 0), "nothing left in the source");
}

/// The same fleet on Service Bus, the way its users get exactly once: source and
/// target on test-servicebus, duplicate detection (10 minutes) on the target. A
/// process killed after a submit and before its claim was marked done leaves the
/// message to be redelivered (its lock expires, 5 s here) and submitted again once
/// its pending claim expires; the target drops that copy by its message id.
#[test]
fn a_fleet_sigkilled_mid_drain_on_service_bus_delivers_each_message_exactly_once() {
    const N: usize = 5_000;
    let redis = redis();
    drain_bin();
    let dedup = QueueConfig { duplicate_detection: Some(Duration::from_secs(600)), ..QueueConfig::default() };
    let broker =
        servicebus::broker(&[("fleet-source", servicebus::lock(Duration::from_secs(5))), ("fleet-target", dedup)]);
    let ids = ids(N);
    servicebus::feed(&broker, "fleet-source", &ids);
    let left = || {
        let (ready, locked) = servicebus::counts(&broker, "fleet-source");
        (ready as u64, locked as u64)
    };
    assert_eq!(left(), (N as u64, 0));

    let started = Instant::now();
    let (source_url, target_url) = (servicebus::url(&broker, "fleet-source"), servicebus::url(&broker, "fleet-target"));
    let run = |instance: &str| start(&redis, (&source_url, &target_url), 8, instance);
    let mut fleet = Fleet::new(PROCESSES);
    let kills = kill_while_draining(&mut fleet, &redis, "fleet-source", N, run);
    wait_drained(left, &mut fleet);
    let took = started.elapsed();
    fleet.stop();
    assert_lease_gone(&redis, "fleet-source");

    let seen = servicebus::ids(&broker, "fleet-target", SubQueue::Main);
    let once: BTreeMap<String, u32> = ids.iter().map(|id| (id.clone(), 1)).collect();
    let target = broker.stats("fleet-target").expect("target");
    let dropped = target.counters.duplicates_dropped;
    // Dead letters first: a message missing from the target is most likely there.
    for q in ["fleet-source", "fleet-target"] {
        let dead = broker.messages(q, SubQueue::DeadLetter);
        assert!(dead.is_empty(), "{} dead-lettered in {q}, e.g. {:?}", dead.len(), dead.first());
    }
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).take(5).collect();
    assert!(
        seen == once,
        "every message exactly once in the target: {} ids, {} copies; missing e.g. {missing:?}",
        seen.len(),
        seen.values().sum::<u32>()
    );
    assert_eq!(left(), (0, 0), "nothing left in the source");
    assert!(
        dropped as usize <= kills.in_flight.len(),
        "the target dropped {dropped} copies, but only {} claims were in flight at a kill",
        kills.in_flight.len()
    );
    let source = broker.stats("fleet-source").expect("source");
    eprintln!(
        "{N} messages through {PROCESSES} processes on Service Bus in {:.1} s: {} kills ({} of the lease holder), \
         {} claims in flight at a kill, {dropped} second submits dropped by the target's duplicate detection, \
         {} source locks expired, {} deliveries for {N} messages",
        took.as_secs_f64(),
        kills.kills,
        kills.holder_kills,
        kills.in_flight.len(),
        source.counters.locks_expired,
        source.counters.deliveries
    );
    assert!(kills.holder_kills >= 2, "the kills hit the drain: {} of the lease holder", kills.holder_kills);
}

#[test]
fn a_broker_restarted_under_load_loses_nothing_and_sends_twice_only_what_failed_to_send() {
    const N: usize = 2_000;
    const RESTARTS: u64 = 2;
    let redis = redis();
    let broker = Broker::private("broker_restart");
    let ids = ids(N);
    let (source, target) = broker.source_and_target("restart", &ids);

    let started = Instant::now();
    let mut fleet = Fleet::new(2);
    for slot in 0..2 {
        fleet
            .start(slot, |instance| start(&redis, (&broker.url(&source.name), &broker.url(&target.name)), 1, instance));
    }
    // Restart the broker each time another part of the messages was claimed.
    for r in 1..=RESTARTS {
        wait_claimed(&redis, r * N as u64 / (RESTARTS + 1));
        eprintln!("{:>5.1} s restart {r} at {} claimed", started.elapsed().as_secs_f64(), claims(&redis));
        broker.restart(Duration::from_secs(1));
    }
    wait_drained(|| broker.counts(&source.name), &mut fleet);
    let took = started.elapsed();
    let reconnects = fleet.count("link is gone; reconnecting");
    let logs = fleet.logs();
    let failed_sends = reported(&logs, " submit(s) failed");
    let expired_claims = reported(&logs, " claim(s) expired before they were settled");
    fleet.stop();
    assert_lease_gone(&redis, &source.name);

    // A send whose outcome the stopping broker never answered fails (its claim is
    // released, the message redelivered and sent again) although the target may have
    // taken it; a send that waited out the broker's restart can outlive its pending
    // claim, which a redelivery then takes over. Both are counted and warned about as
    // possible duplicates, and RabbitMQ has no duplicate detection to drop the second
    // copy. So a copy beyond the first is allowed only for one of those; nothing is lost.
    let seen = broker.collect(&target.name);
    let lost: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(lost.is_empty(), "{} messages lost: {lost:?}", lost.len());
    assert_eq!(seen.len(), ids.len(), "only the ids that were sent arrive");
    let extra: u32 = seen.values().map(|n| n - 1).sum();
    assert!(
        u64::from(extra) <= failed_sends + expired_claims,
        "{extra} copies beyond the first, but only {failed_sends} sends failed and {expired_claims} claims expired: \
         {:?}\n{}",
        seen.iter().filter(|(_, n)| **n > 1).take(10).collect::<Vec<_>>(),
        logs.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).take(40).collect::<Vec<_>>().join("\n")
    );
    // With the lease on, only the holder keeps a receiver link, and a process's
    // sender notices a cut only when it sends again: a process that drains nothing
    // after a restart may never log one. Each restart cut the draining process's links.
    assert!(reconnects >= RESTARTS as usize, "each restart cut the draining process's links: {reconnects} reconnects");
    eprintln!(
        "{N} messages through 2 processes and {RESTARTS} broker restarts in {:.1} s, {reconnects} links reconnected, \
         {failed_sends} sends failed, {expired_claims} claims expired, {extra} second copies in the target",
        took.as_secs_f64()
    );
    assert_eq!(broker.counts(&source.name), (0, 0), "nothing left in the source");
}

//! The `drain` binary on Service Bus: source and target on test-servicebus (an
//! in-memory broker that speaks Service Bus, checked with Microsoft's SDK), reached
//! through emulator connection strings, claims and lease on a private Redis.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use drain_e2e::servicebus::{broker, counts, eventually, feed, ids, url};
use drain_e2e::{RedisServer, Running, drain, output, redis};
use test_servicebus::{Broker, QueueConfig, SubQueue};

fn distinct(n: usize, prefix: &str) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

fn once_each(ids: &[String]) -> BTreeMap<String, u32> {
    ids.iter().map(|id| (id.clone(), 1)).collect()
}

/// `drain run <mode>` from queue `requests` to queue `work` of `b`, claims and lease
/// on `redis`; a resident run beats once an hour and has 2 s to shut down. Each
/// test adds its own settings.
fn run(b: &Broker, redis: &RedisServer, mode: &str) -> Command {
    let mut cmd = drain();
    cmd.args(["run", mode])
        .env("DRAIN_REDIS_URL", redis.url())
        .env("DRAIN_SOURCE_URL", url(b, "requests"))
        .env("DRAIN_TARGET_URL", url(b, "work"));
    if mode == "--resident" {
        cmd.env("DRAIN_BEAT_INTERVAL_SECONDS", "3600").env("DRAIN_SHUTDOWN_GRACE_SECONDS", "2");
    }
    cmd
}

/// `cmd` started, once its resident consumer runs.
fn resident(cmd: Command) -> Running {
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("resident consumer started", Duration::from_secs(30)), "{}", run.log());
    run
}

/// Stop the resident run; it exits 0, and `work` holds each of `sent` once.
fn stop_and_check(run: &mut Running, b: &Broker, sent: &[String]) {
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", run.log());
    assert_eq!(ids(b, "work", SubQueue::Main), once_each(sent));
}

#[test]
fn run_once_moves_a_service_bus_queue_to_another_and_suppresses_the_copies() {
    let Some(redis) = redis() else { return };
    let b = broker(&[("requests", QueueConfig::default()), ("work", QueueConfig::default())]);
    let sent = distinct(40, "m");
    feed(&b, "requests", &sent);
    feed(&b, "requests", &sent[..5]); // a producer that retried
    let mut cmd = run(&b, &redis, "--once");
    cmd.env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "8")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500");
    let out = output(cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(report["queue"], "requests", "{report}");
    assert_eq!((&report["lease"], &report["fence"]), (&"held".into(), &1.into()), "{report}");
    let n = |k: &str| report[k].as_u64().unwrap_or(0);
    assert_eq!((n("received"), n("submitted"), n("duplicates"), n("abandoned")), (45, 40, 5, 0), "{report}");
    assert_eq!(ids(&b, "work", SubQueue::Main), once_each(&sent), "every message once in the target");
    assert_eq!(counts(&b, "requests"), (0, 0), "the source is empty");
    assert!(b.messages("requests", SubQueue::DeadLetter).is_empty(), "nothing dead-lettered");
    let target = b.messages("work", SubQueue::Main);
    assert!(target.iter().all(|m| m.body == format!("body of {}", m.message_id.as_deref().unwrap()).as_bytes()));
    let c = b.counters();
    assert_eq!((c.tokens_refused, c.links_refused, c.unsupported_requests), (0, 0, 0), "{c:?}");
}

#[test]
fn the_resident_consumer_drains_service_bus() {
    let Some(redis) = redis() else { return };
    let b = broker(&[("requests", QueueConfig::default()), ("work", QueueConfig::default())]);
    let sent = distinct(60, "r");
    feed(&b, "requests", &sent);
    let mut cmd = run(&b, &redis, "--resident");
    cmd.env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "8")
        .env("SERVICEBUS_DRAIN_BATCH", "16")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500");
    let mut run = resident(cmd);
    let drained = eventually(Duration::from_secs(60), || counts(&b, "work").0 == sent.len());
    run.count("");
    assert!(drained, "the target got {} of {}:\n{}", counts(&b, "work").0, sent.len(), run.log());
    stop_and_check(&mut run, &b, &sent);
    assert_eq!(counts(&b, "requests"), (0, 0));
    let batches = run.reports("resident batch");
    assert!(!batches.is_empty() && batches.iter().all(|r| r["lease"] == "off"), "resident batches take no lease");
}

/// Redis goes away while the resident consumer runs: every batch fails closed and
/// goes back to the queue, where Service Bus counts each return as a delivery. The
/// consumer must back off instead of burning the backlog's delivery counts into
/// the dead-letter queue, and drain everything once Redis is back.
#[test]
fn a_redis_outage_does_not_burn_service_bus_delivery_counts() {
    let Some(mut redis) = redis() else { return };
    let queue = QueueConfig { max_delivery_count: 10, ..QueueConfig::default() };
    let b = broker(&[("requests", queue), ("work", QueueConfig::default())]);
    let mut cmd = run(&b, &redis, "--resident");
    cmd.env("DRAIN_LOG", "info").env("SERVICEBUS_DRAIN_CONCURRENCY", "4").env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "200");
    let mut run = resident(cmd);
    redis.kill();
    let sent = distinct(10, "o");
    feed(&b, "requests", &sent);
    // Four seconds of outage: at once again after each failed batch, the consumer
    // would burn the whole backlog's ten deliveries in a fraction of that.
    std::thread::sleep(Duration::from_secs(4));
    let during = b.messages("requests", SubQueue::Main);
    let dead = b.messages("requests", SubQueue::DeadLetter);
    let most = during.iter().chain(&dead).map(|m| m.delivery_count).max().unwrap_or(0);
    run.count("");
    assert!(dead.is_empty(), "{} messages dead-lettered during a 4 s Redis outage:\n{}", dead.len(), run.log());
    assert!(most <= 4, "a delivery count reached {most} in 4 s: the consumer did not back off");
    redis.restart();
    let drained = eventually(Duration::from_secs(60), || counts(&b, "work").0 == sent.len());
    run.count("");
    assert!(drained, "after the outage the target got {} of {}:\n{}", counts(&b, "work").0, sent.len(), run.log());
    stop_and_check(&mut run, &b, &sent);
}

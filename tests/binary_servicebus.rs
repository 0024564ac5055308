//! The `drain` binary on Service Bus: source and target on test-servicebus (an
//! in-memory broker that speaks Service Bus, checked with Microsoft's SDK), reached
//! through emulator connection strings, claims and lease on a private Redis.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use drain_e2e::servicebus::{broker, counts, dead_letter_all, eventually, feed, feed_sessions, ids, url};
use drain_e2e::{RedisServer, Running, drain, output, redis};
use test_servicebus::{Broker, BrokerConfig, QueueConfig, Rule, SubQueue, SubscriptionConfig, TopicConfig};

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
    let redis = redis();
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
    assert_eq!(report["lease"], "held", "{report}");
    // A fence is never below the store's clock in microseconds: only its presence is fixed.
    assert!(report["fence"].as_u64().is_some_and(|f| f >= 1), "{report}");
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
    let redis = redis();
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
    let mut redis = redis();
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

/// The resident consumer over a session-enabled queue takes the sessions as they
/// come (two at a time), and the target gets every message once, each session's in
/// the order they were sent.
#[test]
fn a_session_queue_is_drained_in_order_within_each_session() {
    let redis = redis();
    let sessions = QueueConfig { requires_session: true, ..QueueConfig::default() };
    let b = broker(&[("requests", sessions), ("work", QueueConfig::default())]);
    let sent = feed_sessions(&b, "requests", &["a", "b", "c"], 5);
    let mut cmd = run(&b, &redis, "--resident");
    cmd.env("DRAIN_SOURCE_SESSIONS", "any")
        .env("DRAIN_SOURCE_MAX_SESSIONS", "2")
        .env("DRAIN_SOURCE_SESSION_IDLE_SECONDS", "1")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "8")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "200");
    let mut run = resident(cmd);
    let drained = eventually(Duration::from_secs(60), || counts(&b, "work").0 == sent.len());
    run.count("");
    assert!(drained, "the target got {} of {}:\n{}", counts(&b, "work").0, sent.len(), run.log());
    stop_and_check(&mut run, &b, &sent);
    let arrived: Vec<String> = b.messages("work", SubQueue::Main).into_iter().filter_map(|m| m.message_id).collect();
    for s in ["a", "b", "c"] {
        let order: Vec<&String> = arrived.iter().filter(|id| id.starts_with(&format!("{s}-"))).collect();
        let want: Vec<String> = (0..5).map(|i| format!("{s}-{i}")).collect();
        assert_eq!(order, want.iter().collect::<Vec<_>>(), "session {s} in order");
    }
    assert_eq!(counts(&b, "requests"), (0, 0), "every session drained, none left locked");
}

/// A subscription is a source and a topic a target: a topic's copy for one
/// subscription goes to another topic, once each.
#[test]
fn a_subscription_is_drained_to_a_topic() {
    let redis = redis();
    let sub = |name: &str| SubscriptionConfig {
        name: name.to_owned(),
        queue: QueueConfig::default(),
        rules: vec![Rule::default_rule()],
    };
    let topic = |name: &str, subs: &[&str]| TopicConfig {
        name: name.to_owned(),
        subscriptions: subs.iter().map(|s| sub(s)).collect(),
        ..TopicConfig::default()
    };
    let config =
        BrokerConfig::default().topic(topic("events", &["audit", "billing"])).topic(topic("archive", &["all"]));
    let b = Broker::start(config).expect("starts");
    let sent = distinct(20, "e");
    feed(&b, "events", &sent);
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", redis.url())
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "300")
        .env("DRAIN_SOURCE_URL", url(&b, "events/Subscriptions/audit"))
        .env("DRAIN_TARGET_URL", url(&b, "archive"));
    let out = output(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!((report["received"].as_u64(), report["submitted"].as_u64()), (Some(20), Some(20)), "{report}");
    assert_eq!(ids(&b, "archive/Subscriptions/all", SubQueue::Main), once_each(&sent));
    assert_eq!(counts(&b, "events/Subscriptions/audit"), (0, 0));
    assert_eq!(counts(&b, "events/Subscriptions/billing"), (20, 0), "the other subscription keeps its copies");
}

/// Re-drive: the dead-letter queue back to its queue, once each. By default the
/// dead-letter properties travel with the message; `drop` takes them out.
#[test]
fn a_dead_letter_queue_is_re_driven_to_its_queue_once() {
    let redis = redis();
    for (switch, kept) in [("keep", true), ("drop", false)] {
        let b = broker(&[("requests", QueueConfig::default())]);
        let sent = distinct(10, "d");
        feed(&b, "requests", &sent);
        dead_letter_all(&b, "requests", "TargetDown");
        assert_eq!(ids(&b, "requests", SubQueue::DeadLetter), once_each(&sent));
        for _ in 0..2 {
            // The second run finds nothing: each message was moved once.
            let mut cmd = drain();
            cmd.args(["run", "--once"])
                .env("DRAIN_REDIS_URL", redis.url())
                .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "300")
                .env("DRAIN_KEY_PREFIX", format!("redrive-{switch}"))
                .env("DRAIN_SOURCE_DEAD_LETTER_PROPERTIES", switch)
                .env("DRAIN_SOURCE_URL", url(&b, "requests/$DeadLetterQueue"))
                .env("DRAIN_TARGET_URL", url(&b, "requests"));
            let out = output(cmd, Duration::from_secs(60));
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(ids(&b, "requests", SubQueue::Main), once_each(&sent), "{switch}");
        assert!(b.messages("requests", SubQueue::DeadLetter).is_empty(), "{switch}: the dead-letter queue is empty");
        for m in b.messages("requests", SubQueue::Main) {
            let reason = m.application_properties.get("DeadLetterReason");
            assert_eq!(reason.is_some(), kept, "{switch}: {:?}", m.application_properties);
            if kept {
                assert!(reason.is_some_and(|r| r.contains("TargetDown")), "{reason:?}");
            }
        }
    }
}

/// After `drain run` stops, what its source had prefetched is back in the queue at
/// once (locks of five minutes: only a release returns them within the test). The
/// target refuses every message (a session queue, and they carry no session), so
/// the consumer keeps receiving and holds a prefetched window when it is stopped.
#[test]
fn after_a_stop_prefetched_messages_are_back_at_once() {
    let redis = redis();
    let slow =
        QueueConfig { lock_duration: Duration::from_secs(300), max_delivery_count: 100, ..QueueConfig::default() };
    let refusing = QueueConfig { requires_session: true, ..QueueConfig::default() };
    let b = broker(&[("requests", slow), ("work", refusing)]);
    let sent = distinct(30, "p");
    feed(&b, "requests", &sent);
    let mut cmd = run(&b, &redis, "--resident");
    cmd.env("SERVICEBUS_DRAIN_BATCH", "5").env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "200");
    let mut run = resident(cmd);
    // A failed batch is abandoned, and the next window arrives on the open credit.
    assert!(eventually(Duration::from_secs(30), || counts(&b, "requests").1 > 0), "{}", run.log());
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", run.log());
    assert_eq!(counts(&b, "requests"), (sent.len(), 0), "every message back, none locked:\n{}", run.log());
    // Microsoft's SDK, where its venv was built (crates/test-servicebus/tests/sdk.rs),
    // takes them all at once.
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/servicebus-sdk/venv/bin/python");
    if !python.is_file() {
        eprintln!("SKIP the SDK part: no {} (cargo test -p test-servicebus --test sdk builds it)", python.display());
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("servicebus/receive_all.py");
    let mut sdk = Command::new(python);
    sdk.arg(script).arg(b.connection_string()).arg("requests").arg(sent.len().to_string());
    let out = output(sdk, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sent.len().to_string(), "the SDK received every message");
    assert_eq!(counts(&b, "requests"), (0, 0));
}

/// `SharedAccessSignature=` connection strings: drain connects with the ready-made
/// tokens and never prints them.
#[test]
fn shared_access_signature_connection_strings_drain() {
    let redis = redis();
    let b = broker(&[("requests", QueueConfig::default()), ("work", QueueConfig::default())]);
    let sent = distinct(5, "s");
    feed(&b, "requests", &sent);
    let expiry = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0) + 3_600);
    let sas = |queue: &str| {
        let token = b.sas_token(queue, expiry);
        (
            format!(
                "Endpoint=sb://{};SharedAccessSignature={token};UseDevelopmentEmulator=true;EntityPath={queue}",
                b.addr()
            ),
            token,
        )
    };
    let ((source, source_token), (target, _)) = (sas("requests"), sas("work"));
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", redis.url())
        .env("DRAIN_LOG", "debug")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "300")
        .env("DRAIN_SOURCE_URL", source)
        .env("DRAIN_TARGET_URL", target);
    let out = output(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(ids(&b, "work", SubQueue::Main), once_each(&sent));
    let sig = source_token.split("sig=").nth(1).and_then(|s| s.split('&').next()).expect("a signature");
    assert!(!stderr.contains(sig), "the signature is never logged");
}

/// One tick under the single-flight lease takes every session (three at once),
/// drains each in order, and gives them all back when it ends.
#[test]
fn run_once_drains_the_sessions_it_takes_under_the_lease() {
    let redis = redis();
    let sessions = QueueConfig { requires_session: true, ..QueueConfig::default() };
    let b = broker(&[("requests", sessions), ("work", QueueConfig::default())]);
    let sent = feed_sessions(&b, "requests", &["x", "y", "z"], 4);
    let mut cmd = run(&b, &redis, "--once");
    cmd.env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_SOURCE_SESSIONS", "any")
        .env("DRAIN_SOURCE_MAX_SESSIONS", "3")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "300");
    let out = output(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!((report["lease"].as_str(), report["submitted"].as_u64()), (Some("held"), Some(12)), "{report}");
    assert_eq!(ids(&b, "work", SubQueue::Main), once_each(&sent));
    let arrived: Vec<String> = b.messages("work", SubQueue::Main).into_iter().filter_map(|m| m.message_id).collect();
    for s in ["x", "y", "z"] {
        let order: Vec<String> = arrived.iter().filter(|id| id.starts_with(&format!("{s}-"))).cloned().collect();
        assert_eq!(order, (0..4).map(|i| format!("{s}-{i}")).collect::<Vec<_>>(), "session {s} in order");
    }
    assert_eq!(counts(&b, "requests"), (0, 0));
}

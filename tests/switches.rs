//! Every switch position through the `drain` binary (docs/flags.md): `off` is the
//! legacy behaviour, `shadow` computes and counts but behaves exactly as `off`, `on`
//! decides. One test per switch, each over its positions, on a private Redis (and
//! RabbitMQ where a message without an id is needed). A `--config` file follows the
//! environment's grammar: TOML `false` is not `off`.

use std::collections::BTreeMap;
use std::time::Duration;

use drain_core::testkit::message;
use drain_e2e::rabbit::{Broker, NO_ID, Queue};
use drain_e2e::{RedisServer, Running, drain, output, redis};
use test_servers::Reply;

/// The longest one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);
const POSITIONS: [&str; 3] = ["off", "shadow", "on"];

fn report(out: &std::process::Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "drain failed: {err}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("one JSON line ({e}): {err}"))
}

fn n(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// Keys matching `pattern` (test setup only: KEYS on a private server).
fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    match server.command(&["KEYS", pattern]).expect("KEYS") {
        Reply::Array(Some(items)) => items
            .into_iter()
            .filter_map(|i| match i {
                Reply::Bulk(Some(k)) => Some(String::from_utf8_lossy(&k).into_owned()),
                _ => None,
            })
            .collect(),
        other => panic!("KEYS answered {other:?}"),
    }
}

fn calls(server: &RedisServer, command: &str) -> u64 {
    server.command_calls().expect("commandstats").get(command).copied().unwrap_or(0)
}

/// `SERVICEBUS_DRAIN_SINGLEFLIGHT` with a foreign holder's lease on the queue: off
/// drains and never touches Redis; shadow drains too (counting the skip On would
/// make) and leaves the foreign lease alone; on skips.
#[test]
fn singleflight_positions() {
    for position in POSITIONS {
        let server = redis();
        let key = "drain:lease:{requests}";
        let foreign = "other-host:00112233445566778899aabbccddeeff";
        assert_eq!(server.command(&["SET", key, foreign, "PX", "600000"]).expect("SET"), Reply::Simple("OK".into()));
        let before = calls(&server, "evalsha");
        let mut cmd = drain();
        cmd.args(["run", "--once"])
            .env("DRAIN_REDIS_URL", server.url())
            .env("SERVICEBUS_ATOMIC_CLAIM", "off")
            .env("SERVICEBUS_DRAIN_CONCURRENCY", "16")
            .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", position);
        let r = report(&output(cmd, LIMIT));
        match position {
            "on" => assert_eq!(r["skipped"], "locked", "{r}"),
            "shadow" => {
                assert_eq!(r["lease"], "shadow_would_skip", "{r}");
                assert!(n(&r, "submitted") > 0, "shadow drains: {r}");
            }
            _ => {
                assert_eq!(r["lease"], "off", "{r}");
                assert!(n(&r, "submitted") > 0, "{r}");
                assert_eq!(calls(&server, "evalsha"), before, "off sends Redis nothing");
            }
        }
        let held = server.command(&["GET", key]).expect("GET");
        assert_eq!(held, Reply::Bulk(Some(foreign.as_bytes().to_vec())), "{position}: the foreign lease is untouched");
    }
}

/// `SERVICEBUS_ATOMIC_CLAIM` on the embedded demo queue, whose every tenth message
/// is sent twice in a row (one batch holds both copies): off and shadow submit both
/// copies and abandon nothing (legacy: no claim, so nothing to abandon a repeated id
/// for; before, off and shadow abandoned the second copy and submitted it on the
/// next receive); shadow also writes claims and would-be duplicates are counted; on
/// completes each second copy as a duplicate once the first copy is submitted.
#[test]
fn atomic_claim_positions_on_repeated_ids() {
    for position in POSITIONS {
        let server = redis();
        let mut cmd = drain();
        cmd.args(["run", "--once"])
            .env("DRAIN_REDIS_URL", server.url())
            .env("SERVICEBUS_DRAIN_CONCURRENCY", "16")
            .env("SERVICEBUS_ATOMIC_CLAIM", position);
        let r = report(&output(cmd, LIMIT));
        let claims = keys(&server, "drain:msg:*");
        match position {
            "on" => {
                // A copy in the same batch waits for the first, then completes as a duplicate.
                assert_eq!((n(&r, "submitted"), n(&r, "duplicates"), n(&r, "abandoned")), (30, 3, 0), "{r}");
                assert_eq!(n(&r, "received"), 33 + n(&r, "abandoned"), "{r}");
                assert_eq!(claims.len(), 30, "one done claim per message");
            }
            _ => {
                assert_eq!(n(&r, "abandoned"), 0, "{position}: a repeated id is not abandoned: {r}");
                assert_eq!((n(&r, "received"), n(&r, "submitted"), n(&r, "duplicates")), (33, 33, 0), "{r}");
                let expected = if position == "shadow" { 30 } else { 0 };
                assert_eq!(claims.len(), expected, "{position}: claims written only when computed");
            }
        }
    }
}

/// `SERVICEBUS_ATOMIC_CLAIM` on RabbitMQ with a message that has no message id: off
/// and shadow submit it like any other (before, every position dead-lettered it);
/// on dead-letters it (the claim is keyed on the id).
#[test]
fn atomic_claim_positions_on_a_message_without_an_id() {
    let broker = Broker::shared("switches");
    for position in POSITIONS {
        let server = redis();
        let source = Queue::declare(&broker, "switches-source");
        let target = Queue::declare(&broker, "switches-target");
        let messages = vec![
            {
                let mut m = message("x");
                m.message_id = None;
                m
            },
            message("a"),
            message("b"),
        ];
        broker.feed_messages(&source.name, &messages);
        let mut cmd = drain();
        cmd.args(["run", "--once"])
            .env("DRAIN_REDIS_URL", server.url())
            .env("DRAIN_SOURCE_URL", broker.url(&source.name))
            .env("DRAIN_TARGET_URL", broker.url(&target.name))
            .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500")
            .env("SERVICEBUS_ATOMIC_CLAIM", position);
        let r = report(&output(cmd, LIMIT));
        let seen = broker.collect(&target.name);
        let expected: BTreeMap<String, u32> = if position == "on" {
            [("a".to_owned(), 1), ("b".to_owned(), 1)].into()
        } else {
            [(NO_ID.to_owned(), 1), ("a".to_owned(), 1), ("b".to_owned(), 1)].into()
        };
        assert_eq!(seen, expected, "{position}: {r}");
        assert_eq!(n(&r, "dead_lettered"), u64::from(position == "on"), "{position}: {r}");
        assert_eq!(broker.counts(&source.name), (0, 0), "{position}: the source is empty");
    }
}

/// `SERVICEBUS_DRAIN_LEASE_RENEW` over a drain longer than the lease's renewal period
/// (the demo's burst and trickle, TTL 10 s), watching the lease's TTL in Redis: on renews it every TTL/3
/// (its TTL goes back up); off and shadow never extend it (before, shadow renewed
/// like on): its TTL only falls, and the release at the end finds it expired.
#[test]
fn lease_renew_positions() {
    // The three positions at once (each ~20 s of drain), each on a Redis of its own.
    let runs: Vec<_> = POSITIONS.iter().map(|&position| std::thread::spawn(move || renews(position))).collect();
    for (position, run) in POSITIONS.iter().zip(runs) {
        let extended = run.join().expect("a position's thread");
        assert_eq!(extended, *position == "on", "{position}: the lease's TTL went back up: {extended}");
    }
}

/// Whether the lease's TTL ever went back up during one long tick with
/// `SERVICEBUS_DRAIN_LEASE_RENEW=position`.
fn renews(position: &str) -> bool {
    let server = redis();
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_ATOMIC_CLAIM", "off")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "10")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "3600")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        .env("SERVICEBUS_DRAIN_LEASE_RENEW", position);
    let mut run = Running::spawn(cmd);
    // The lease's remaining TTL, polled until the tick ends: did it ever go up?
    let (mut last, mut extended) = (i64::MAX, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // Off and shadow let the lease run out before the burst is drained: that tick
    // ends early, at its deadline.
    while !run.wait_for("\"tick done\"", Duration::from_millis(200)) && run.count("tick ended early") == 0 {
        assert!(std::time::Instant::now() < deadline, "{position}: the tick did not end: {}", run.log());
        if let Reply::Int(ms) = server.command(&["PTTL", "drain:lease:{requests}"]).expect("PTTL")
            && ms > 0
        {
            extended |= ms > last.saturating_add(500);
            last = ms;
        }
    }
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", run.log());
    extended
}

/// `PROJECTION_DRAIN_CLAIM_AWARE` for `drain owners`: off never peeks; shadow and on
/// peek before a launch (shadow only counts what on would defer).
#[test]
fn claim_aware_positions() {
    for position in POSITIONS {
        let server = redis();
        let r = owners(&server, &[("PROJECTION_DRAIN_CLAIM_AWARE", position)]);
        assert_eq!(r["claim_aware"], position, "{r}");
        assert_eq!(n(&r, "processed"), 100, "{r}");
        if position == "off" {
            assert_eq!(n(&r, "peeks"), 0, "{r}");
        } else {
            assert!(n(&r, "peeks") > 0, "{position}: {r}");
        }
    }
}

/// `PROJECTION_DRAIN_RELEASE_WAKE` for `drain owners` (claim-aware on): off never
/// subscribes nor registers a waiter; shadow and on subscribe to the instance's wake
/// channel (shadow does the Redis side and counts, acting as off).
#[test]
fn release_wake_positions() {
    for position in POSITIONS {
        let server = redis();
        let r = owners(&server, &[("PROJECTION_DRAIN_RELEASE_WAKE", position)]);
        assert_eq!(r["release_wake"], position, "{r}");
        assert_eq!(n(&r, "processed"), 100, "{r}");
        let subscribed = calls(&server, "subscribe");
        if position == "off" {
            assert_eq!(subscribed, 0, "off never subscribes");
        } else {
            assert!(subscribed >= 1, "{position} subscribes: {r}");
        }
    }
}

/// `PROJECTION_DRAIN_SKIP_SERVED` for `drain owners` (claim-aware on, the default):
/// off writes no drain key, as before the marks; shadow and on take each claim
/// noting its start and release it moving a drained turn's start onto the owner's
/// mark (`<prefix>:drained:{owner}`), the start key gone with the release.
#[test]
fn skip_served_positions() {
    for position in POSITIONS {
        let server = redis();
        let r = owners(&server, &[("PROJECTION_DRAIN_SKIP_SERVED", position)]);
        assert_eq!(r["skip_served"], position, "{r}");
        assert_eq!(n(&r, "processed"), 100, "{r}");
        assert_eq!(keys(&server, "drain:drain-start:*"), Vec::<String>::new(), "{position}: every start released");
        let marks = keys(&server, "drain:drained:*");
        if position == "off" {
            assert_eq!(marks, Vec::<String>::new(), "off writes no drain stamp");
        } else {
            assert!(!marks.is_empty(), "{position}: the turns that drained their owner left marks: {r}");
        }
    }
}

/// `DRAIN_REDIS_CLUSTER` is a switch too: shadow behaves as off (a standalone
/// connection), on speaks the Cluster protocol (which a standalone server refuses).
#[test]
fn redis_cluster_positions() {
    let server = redis();
    for position in POSITIONS {
        let mut cmd = drain();
        cmd.arg("doctor").env("DRAIN_REDIS_URL", server.url()).env("DRAIN_REDIS_CLUSTER", position);
        let out = output(cmd, LIMIT);
        let shown = String::from_utf8_lossy(&out.stdout);
        if position == "on" {
            assert!(!out.status.success(), "a standalone server is not a Cluster: {shown}");
        } else {
            assert!(out.status.success(), "{position}: {shown}");
        }
    }
}

/// Seed 100 items over 5 owners and drain them with one `drain owners`.
fn owners(server: &RedisServer, env: &[(&str, &str)]) -> serde_json::Value {
    let mut seed = drain();
    seed.args(["owners", "--owners", "5", "--seed", "100", "--seed-only"]).env("DRAIN_REDIS_URL", server.url());
    assert!(output(seed, LIMIT).status.success());
    let mut cmd = drain();
    cmd.args(["owners", "--owners", "5", "--batch", "10", "--pass-ms", "100"]).env("DRAIN_REDIS_URL", server.url());
    for (k, v) in env {
        cmd.env(k, v);
    }
    report(&output(cmd, LIMIT))
}

/// A `--config` file follows the environment's grammar: TOML `true` is On, `false`
/// is not `off` (only `off` disables a default-on switch), so a default-on switch
/// stays on with one warning showing the file's value (before, `false` read as
/// `off` and turned the claim off), and a default-off one stays off.
#[test]
fn a_config_file_false_is_not_off() {
    let dir = std::env::temp_dir().join(format!("drain-switches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("drain.toml");
    std::fs::write(
        &file,
        "SERVICEBUS_ATOMIC_CLAIM = false\nPROJECTION_DRAIN_CLAIM_AWARE = \"off\"\nSERVICEBUS_DRAIN_SINGLEFLIGHT = true\n",
    )
    .expect("write");
    let mut cmd = drain();
    cmd.args(["config", "--json", "--config"]).arg(&file);
    let out = output(cmd, LIMIT);
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("config --json");
    let setting = |name: &str| {
        let s = v["settings"].as_array().expect("settings").iter().find(|s| s["name"] == name).cloned();
        s.unwrap_or_else(|| panic!("{name} listed"))
    };
    let claim = setting("SERVICEBUS_ATOMIC_CLAIM");
    assert_eq!((claim["value"].as_str(), claim["origin"].as_str()), (Some("on"), Some("default")), "{claim}");
    assert_eq!(setting("PROJECTION_DRAIN_CLAIM_AWARE")["value"], "off");
    assert_eq!(setting("SERVICEBUS_DRAIN_SINGLEFLIGHT")["value"], "on");
    let warnings: Vec<&serde_json::Value> = v["warnings"].as_array().expect("warnings").iter().collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["variable"], "SERVICEBUS_ATOMIC_CLAIM");
    assert_eq!(warnings[0]["value"], "false", "the file's value: {:?}", warnings[0]);
}

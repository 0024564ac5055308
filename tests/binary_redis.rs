//! The `drain` binary against a private redis-server (issue 5, item 6).

use std::collections::BTreeSet;
use std::time::Duration;

use drain_e2e::{RedisServer, Running, drain, free_port, metric, output, redis, scrape};

/// The longest any one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);
use test_servers::Reply;

fn get(server: &RedisServer, key: &str) -> Option<String> {
    match server.command(&["GET", key]).expect("GET") {
        Reply::Bulk(Some(v)) => Some(String::from_utf8(v).expect("utf-8")),
        Reply::Bulk(None) => None,
        other => panic!("GET answered {other:?}"),
    }
}

/// `total_connections_received`, counting the connection that asks.
fn connections(server: &RedisServer) -> u64 {
    let stats = server.info("stats").expect("INFO stats");
    stats.iter().find(|(k, _)| k == "total_connections_received").and_then(|(_, v)| v.parse().ok()).expect("field")
}

/// Commands whose call count changed between two `INFO commandstats` snapshots,
/// besides the INFO probes themselves.
fn changed(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> BTreeSet<String> {
    after.iter().filter(|(c, n)| *c != "info" && before.get(*c) != Some(*n)).map(|(c, _)| c.clone()).collect()
}

/// `drain run` on `server` with the lease on, a beat every second, a 1 s shutdown
/// grace and `/metrics` on `port`; each test adds its own settings.
fn run_with_lease(server: &RedisServer, port: u16) -> std::process::Command {
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{port}"));
    cmd
}

#[test]
fn off_never_sends_redis_a_single_command() {
    let Some(server) = redis() else { return };
    let before = server.command_calls().expect("commandstats");
    let conns_before = connections(&server);
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_ATOMIC_CLAIM", "off")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "16");
    let out = output(cmd, LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(report["lease"], "off");
    assert!(report["submitted"].as_u64().unwrap() > 0);
    let conns_after = connections(&server);
    let after = server.command_calls().expect("commandstats");
    assert_eq!(changed(&before, &after), BTreeSet::new(), "not even a script load or a HELLO");
    assert_eq!(conns_after - conns_before, 1, "drain never even connected (the 1 is this probe's own connection)");
}

#[test]
fn a_foreign_lease_skips_the_tick_and_stays_untouched() {
    let Some(server) = redis() else { return };
    let key = "drain:lease:{requests}";
    let foreign = "other-host:00112233445566778899aabbccddeeff";
    // The command first (it may have to build the binary), then the foreign lease.
    let mut cmd = drain();
    cmd.args(["run", "--once"]).env("DRAIN_REDIS_URL", server.url()).env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on");
    assert_eq!(server.command(&["SET", key, foreign, "PX", "600000"]).unwrap(), Reply::Simple("OK".into()));
    let out = output(cmd, LIMIT);
    assert!(out.status.success(), "a skipped tick is not an error: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "{\"queue\":\"requests\",\"skipped\":\"locked\"}\n");
    assert_eq!(get(&server, key).as_deref(), Some(foreign), "the foreign lease is untouched");
    let calls = server.command_calls().unwrap();
    assert_eq!(calls.get("del"), None);
    assert_eq!(calls.get("pexpire"), None);
}

#[test]
fn with_the_lease_at_most_one_tick_drains_at_a_time_and_skips_are_counted() {
    let Some(server) = redis() else { return };
    let port = free_port();
    let mut cmd = run_with_lease(&server, port);
    cmd.env("DRAIN_WORKER_CONCURRENCY", "4");
    let mut run = Running::spawn(cmd);
    // The demo burst takes ~15 s at 100 ms a submit: every beat meanwhile overlaps.
    assert!(run.wait_for("tick skipped", Duration::from_secs(20)), "{}", run.log());
    std::thread::sleep(Duration::from_millis(3500));
    let body = scrape(port);
    let skipped = metric(&body, r#"drain_ticks_total{queue="requests",outcome="skipped_locked",mode="on"}"#);
    assert!(skipped.unwrap_or(0.0) >= 3.0, "skips counted: {skipped:?}\n{body}");
    // Record overlap: between an acquire and its release no other acquire happens.
    run.count("");
    let mut holding = 0i32;
    let mut max = 0i32;
    for line in &run.seen {
        if line.contains("lease acquired") {
            holding += 1;
        } else if line.contains("lease released") {
            holding -= 1;
        }
        max = max.max(holding);
    }
    assert_eq!(max, 1, "at most one tick holds the lease at any moment:\n{}", run.log());
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
}

#[test]
fn redis_stopped_mid_run_fails_open_and_counts_it() {
    let Some(mut server) = redis() else { return };
    let port = free_port();
    let mut cmd = run_with_lease(&server, port);
    cmd.env("SERVICEBUS_ATOMIC_CLAIM", "off").env("SERVICEBUS_DRAIN_CONCURRENCY", "32");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("tick done", Duration::from_secs(20)), "{}", run.log());
    server.kill();
    assert!(run.wait_for("fail_open", Duration::from_secs(15)), "ticks keep draining without Redis:\n{}", run.log());
    std::thread::sleep(Duration::from_millis(2500));
    let body = scrape(port);
    let fail_open = metric(&body, r#"drain_ticks_total{queue="requests",outcome="fail_open",mode="on"}"#);
    assert!(fail_open.unwrap_or(0.0) >= 2.0, "the fail-open counter rises: {fail_open:?}\n{body}");
    let ran = run.count(r#"\"lease\":\"fail_open\""#) + run.count(r#""lease":"fail_open""#);
    assert!(ran >= 1, "{}", run.log());
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
}

#[test]
fn sigterm_mid_tick_releases_the_lease_gives_messages_back_and_exits_zero() {
    let Some(server) = redis() else { return };
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("lease acquired", Duration::from_secs(20)), "{}", run.log());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(get(&server, "drain:lease:{requests}").is_some(), "held mid-tick");
    run.terminate();
    let status = run.wait_exit(Duration::from_secs(15));
    assert!(status.is_some_and(|s| s.success()), "exit 0: {status:?}\n{}", run.log());
    assert_eq!(get(&server, "drain:lease:{requests}"), None, "lease key gone");
    let report = run
        .seen
        .iter()
        .find(|l| l.contains(r#"\"stopped\":true"#))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["report"].as_str().and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok()))
        .unwrap_or_else(|| panic!("no stopped report:\n{}", run.log()));
    assert_eq!(report["stopped"], true);
    let n = |k: &str| report[k].as_u64().unwrap();
    assert!(n("abandoned") > 0, "unfinished messages went back to the source: {report}");
    assert_eq!(n("received"), n("submitted") + n("duplicates") + n("abandoned") + n("dead_lettered"), "{report}");
    // No claim is left pending: abandoned messages' claims were released.
    let keys = match server.command(&["KEYS", "drain:msg:*"]).unwrap() {
        Reply::Array(Some(keys)) => keys.len(),
        other => panic!("{other:?}"),
    };
    assert_eq!(n("submitted") + n("duplicates"), keys as u64, "one done claim per submitted message, none pending");
}

#[test]
fn garbage_in_every_variable_starts_with_warnings_and_never_panics() {
    let mut cmd = drain();
    cmd.args(["config", "--json"]);
    let out = output(cmd, LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<String> =
        v["settings"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.len() >= 20, "{names:?}");
    let garbage = ["\u{1}{}garbage", "-1", "", "99999999999999999999999", "on off", "\u{7f}"];
    // One `drain run --once` per garbage value, all at once.
    let runs: Vec<_> = garbage
        .iter()
        .map(|g| {
            let mut cmd = drain();
            cmd.args(["run", "--once"]);
            for name in names.iter().filter(|n| !n.ends_with("_URL")) {
                // A huge max wait clamps to 60 s, which --once then honestly waits on an
                // empty queue; that case is checked through `drain config` below.
                if name != "SERVICEBUS_DRAIN_MAX_WAIT_MS" || g.parse::<f64>().is_err() {
                    cmd.env(name, g);
                }
            }
            std::thread::spawn(move || output(cmd, LIMIT))
        })
        .collect();
    for (i, run) in runs.into_iter().enumerate() {
        let out = run.join().expect("runner thread");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "garbage #{i}: {err}");
        assert!(out.status.success(), "garbage #{i} must still start: {err}");
        assert!(err.contains("config:"), "garbage #{i} is warned about: {err}");
    }
    let mut cmd = drain();
    cmd.args(["config", "--json"]);
    let out = output(cmd, LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<String> =
        v["settings"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.len() >= 20, "{names:?}");
    let garbage = ["\u{1}{}garbage", "-1", "", "99999999999999999999999", "on off", "\u{7f}"];
    for (i, g) in garbage.iter().enumerate() {
        let mut cmd = drain();
        cmd.args(["run", "--once"]).env("SERVICEBUS_DRAIN_CONCURRENCY", "16");
        for name in names.iter().filter(|n| !n.ends_with("_URL")) {
            // A huge max wait clamps to 60 s, which --once then honestly waits on an
            // empty queue; that case is checked through `drain config` below.
            if name != "SERVICEBUS_DRAIN_MAX_WAIT_MS" || g.parse::<f64>().is_err() {
                cmd.env(name, g);
            }
        }
        let out = output(cmd, LIMIT);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "garbage #{i}: {err}");
        assert!(out.status.success(), "garbage #{i} must still start: {err}");
        assert!(err.contains("config:"), "garbage #{i} is warned about: {err}");
    }
    let mut cmd = drain();
    cmd.args(["config", "--json"]);
    for name in names.iter().filter(|n| !n.ends_with("_URL")) {
        cmd.env(name, "99999999999999999999999");
    }
    let out = output(cmd, LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let wait = v["settings"].as_array().unwrap().iter().find(|s| s["name"] == "SERVICEBUS_DRAIN_MAX_WAIT_MS").unwrap();
    assert_eq!(wait["value"], "60000", "clamped to the ceiling");
    assert!(v["warnings"].as_array().unwrap().len() >= 15, "one warning per bad value: {v}");

    // A URL that cannot be used is refused with a clear message, not a panic.
    for url in ["DRAIN_REDIS_URL", "DRAIN_SOURCE_URL", "DRAIN_TARGET_URL"] {
        let mut cmd = drain();
        cmd.args(["run", "--once"]).env(url, "\u{1}{}garbage");
        let out = output(cmd, LIMIT);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains(url) && !err.contains("panicked"), "{url}: {err}");
    }
}

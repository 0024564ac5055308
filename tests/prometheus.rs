//! deploy/prometheus/drain-rules.yml and deploy/grafana/drain.json on a real
//! Prometheus: a private server (tests/support/prometheus.rs) scrapes a `drain run`
//! every second and evaluates the shipped rules every second, while the test
//! injects a fault; the matching alert must go pending or firing, as read through
//! Prometheus' HTTP API.
//!
//! Prometheus starts first, as it runs in production before any drain, and each
//! fault comes only after it has scraped the counter at 0: a series whose first
//! sample is already 1 shows no increase, whoever exported it.
//!
//! The rules are used as shipped. An alert is pending from the first evaluation at
//! which its expression holds, whatever its `for:`, and every counter is exported
//! at 0 from the start, so `increase()` over the shipped windows sees the first
//! event within a few scrapes: no test copy with shorter windows is needed.

use std::time::Duration;

use drain_e2e::prometheus::Prometheus;
use drain_e2e::{Running, drain, free_port, redis};

/// `drain run` with the lease on a private Redis, a beat every second, owner drains
/// over a small demo workload, `/metrics` on `port`.
fn run(redis_url: &str, port: u16) -> Running {
    run_with(redis_url, port, &[])
}

/// [`run`] with `env` on top.
fn run_with(redis_url: &str, port: u16, env: &[(&str, &str)]) -> Running {
    let mut cmd = drain();
    cmd.args(["run", "--owners", "20"])
        .env("DRAIN_REDIS_URL", redis_url)
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "10")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{port}"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    Running::spawn(cmd)
}

/// Nothing is wrong: the fault alerts stay quiet (while the fault tests below show
/// they can fire), and every dashboard panel's query parses and returns data.
#[test]
fn a_healthy_run_raises_no_alert_and_every_dashboard_query_returns_data() {
    let server = redis();
    let port = free_port();
    let prom = Prometheus::start("healthy_run", &[format!("127.0.0.1:{port}")]);
    let mut drain = run(&server.url(), port);
    assert!(drain.wait_for("tick done", Duration::from_secs(30)), "{}", drain.log());
    // Owners turned, and Prometheus has scraped it.
    let up = |p: &Prometheus| p.scalar(r#"sum(drain_owner_turns_total{job="drain"})"#).unwrap_or(0.0) > 0.0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !up(&prom) {
        assert!(std::time::Instant::now() < deadline, "no owner turns scraped:\n{}", drain.log());
        std::thread::sleep(Duration::from_millis(500));
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/drain.json"))
            .expect("deploy/grafana/drain.json"),
    )
    .expect("dashboard JSON");
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels").iter().filter(|p| p["type"] != "row") {
        for target in panel["targets"].as_array().expect("targets") {
            // Grafana's interval variable, as it would expand it for a 1 s scrape.
            let expr = target["expr"].as_str().expect("expr").replace("$__rate_interval", "10s");
            panels.push((panel["title"].to_string(), expr));
        }
    }
    // A rate needs two samples after the first turns: ask until every panel has
    // data (or the bound passes), instead of sleeping a guess.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let answers = loop {
        let answers: Vec<serde_json::Value> = panels.iter().map(|(_, expr)| prom.query(expr)).collect();
        let all_data = answers.iter().all(|a| a["data"]["result"].as_array().is_some_and(|r| !r.is_empty()));
        if all_data || std::time::Instant::now() > deadline {
            break answers;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut queries = 0;
    for ((title, expr), answer) in panels.iter().zip(&answers) {
        assert_eq!(answer["status"], "success", "panel `{title}`: {expr}\n{answer}");
        let result = answer["data"]["result"].as_array().expect("a result vector");
        assert!(!result.is_empty(), "panel `{title}` shows no data: {expr}\n{answer}");
        queries += 1;
    }
    assert!(queries >= 14, "every panel was queried: {queries}");

    for alert in [
        "DrainLeaseLost",
        "DrainTicksFailingOpen",
        "DrainClaimsFailingClosed",
        "DrainRetryTimerHandOffs",
        "DrainQueueNotDrained",
        "DrainLeaseRenewalFailing",
    ] {
        assert_eq!(prom.alert_states(alert), Vec::<String>::new(), "{alert} quiet on a healthy run: {}", prom.alerts());
    }
    assert!(!prom.log().contains("level=error"), "Prometheus reported errors (rules, scrapes):\n{}", prom.log());
}

/// A foreign holder takes the lease while a tick drains: the next renewal finds it
/// gone, the drain stops, and DrainLeaseLost goes active.
#[test]
fn a_stolen_lease_raises_drain_lease_lost() {
    let server = redis();
    let port = free_port();
    let prom = Prometheus::start("stolen_lease", &[format!("127.0.0.1:{port}")]);
    // One worker: the lease holder drains the demo's opening burst one message at a
    // time (~15 s), so the first tick still holds the lease when it is stolen.
    let mut drain = run_with(&server.url(), port, &[("DRAIN_WORKER_CONCURRENCY", "1")]);
    assert!(drain.wait_for("lease acquired", Duration::from_secs(30)), "{}", drain.log());
    let scraped = prom.await_scraped("drain_lease_lost_total", Duration::from_secs(20));
    assert_eq!(scraped, Some(0.0), "scraped at 0 before the fault:\n{}", drain.log());
    assert_eq!(prom.alert_states("DrainLeaseLost"), Vec::<String>::new(), "quiet before the fault");
    server.command(&["SET", "drain:lease:{requests}", "foreign-holder:1", "PX", "60000"]).expect("steal the lease");
    assert!(drain.wait_for("lease lost", Duration::from_secs(20)), "the renewal found it gone:\n{}", drain.log());
    let states = prom.await_alert("DrainLeaseLost", Duration::from_secs(30));
    assert!(states.is_some(), "DrainLeaseLost never went pending or firing: {}\n{}", prom.alerts(), prom.log());
}

/// Redis stops: a process with the lease only drains without it (fail open:
/// DrainTicksFailingOpen), and one with the claim too abandons the batch it holds
/// (fail closed) and then receives nothing while the store is down, its beats
/// counting `claims_down` (DrainClaimsFailingClosed, which holds for the whole
/// outage). Two processes, because the second never gets to fail open: once its
/// claim store failed it starts no tick at all, not even the lease's acquire.
#[test]
fn a_stopped_redis_raises_fail_open_and_fail_closed_alerts() {
    let mut server = redis();
    let (lease_only, claims) = (free_port(), free_port());
    let targets = [format!("127.0.0.1:{lease_only}"), format!("127.0.0.1:{claims}")];
    let prom = Prometheus::start("stopped_redis", &targets);
    let mut drains = [
        run_with(&server.url(), lease_only, &[("SERVICEBUS_ATOMIC_CLAIM", "off"), ("DRAIN_KEY_PREFIX", "lease-only")]),
        run(&server.url(), claims),
    ];
    for drain in &mut drains {
        assert!(drain.wait_for("tick done", Duration::from_secs(30)), "{}", drain.log());
    }
    for zero in [r#"drain_ticks_total{outcome="fail_open"}"#, r#"drain_messages_total{outcome="claim_error"}"#] {
        assert_eq!(prom.await_scraped(zero, Duration::from_secs(20)), Some(0.0), "{zero} scraped at 0 first");
    }
    for alert in ["DrainTicksFailingOpen", "DrainClaimsFailingClosed"] {
        assert_eq!(prom.alert_states(alert), Vec::<String>::new(), "{alert} quiet before the fault");
    }
    server.stop();
    for alert in ["DrainTicksFailingOpen", "DrainClaimsFailingClosed"] {
        // The demo producer trickles a message every few seconds: claims are tried.
        let states = prom.await_alert(alert, Duration::from_secs(45));
        let logs = drains.iter().map(Running::log).collect::<Vec<_>>().join("\n---\n");
        assert!(states.is_some(), "{alert} never went pending or firing: {}\n{logs}", prom.alerts());
    }
}

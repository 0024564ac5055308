//! Install the exporter on a free loopback port, feed scripted decisions through the
//! observer, scrape `/metrics` over HTTP and check names, labels and values.

mod support;

use std::time::Duration;

use adapter_metrics::{KEEP_LIST, MetricsObserver};
use drain_core::Switch;
use drain_core::admission::TurnOutcome;
use drain_core::event::{Event, LeaseOp, MessageOutcome, SkipReason, TickKind, TickOutcome};
use drain_core::ports::Observer;
use support::scrape;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

#[tokio::test]
async fn scrape_shows_exactly_the_keep_list_with_labels_and_values() {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    adapter_metrics::install(addr).expect("install");
    let o = MetricsObserver;
    let d = Duration::from_millis(1500);
    let tick = |outcome, mode, kind| Event::Tick { queue: "requests", outcome, mode, kind, duration: d };
    o.observe(&tick(TickOutcome::Ran, Switch::On, TickKind::Beat));
    o.observe(&tick(TickOutcome::SkippedLocked, Switch::On, TickKind::Beat));
    o.observe(&tick(TickOutcome::SkippedLocked, Switch::On, TickKind::Beat));
    o.observe(&tick(TickOutcome::SkippedLocked, Switch::Shadow, TickKind::Beat));
    o.observe(&tick(TickOutcome::Ran, Switch::Off, TickKind::Resident));
    o.observe(&Event::LeaseOp { op: LeaseOp::Acquire, result: "acquired", mode: Switch::On });
    o.observe(&Event::LeaseOp { op: LeaseOp::Renew, result: "error", mode: Switch::Shadow });
    o.observe(&Event::LeaseLost { lease: "requests", loss: drain_core::guard::Loss::Lost });
    o.observe(&Event::Message { queue: "requests", outcome: MessageOutcome::Duplicate, mode: Switch::On });
    o.observe(&Event::OwnerSkipped { reason: SkipReason::ClaimBusy, mode: Switch::Shadow });
    o.observe(&Event::ClaimBusyBackoff { mode: Switch::On });
    o.observe(&Event::RetryOverflow);
    o.observe(&Event::PeekError);
    o.observe(&Event::OwnerTurn { outcome: TurnOutcome::ClaimBusy });
    o.observe(&Event::OwnerQueueDepth(7));
    o.observe(&Event::RetryTimers(3));
    o.observe(&Event::StoreOp { op: "acquire", duration: Duration::from_micros(300) });
    o.observe(&Event::SwitchMode { switch: "SERVICEBUS_DRAIN_SINGLEFLIGHT", mode: Switch::Shadow });
    // Not on the keep-list: must not be exported.
    metrics::counter!("some_library_requests_total").increment(5);

    let body = scrape(addr).await;
    for line in [
        r#"drain_ticks_total{queue="requests",outcome="ran",mode="on",kind="beat"} 1"#,
        r#"drain_ticks_total{queue="requests",outcome="skipped_locked",mode="on",kind="beat"} 2"#,
        r#"drain_ticks_total{queue="requests",outcome="skipped_locked",mode="shadow",kind="beat"} 1"#,
        r#"drain_ticks_total{queue="requests",outcome="ran",mode="off",kind="resident"} 1"#,
        r#"drain_lease_ops_total{op="acquire",result="acquired",mode="on"} 1"#,
        r#"drain_lease_ops_total{op="renew",result="error",mode="shadow"} 1"#,
        "drain_lease_lost_total 1",
        r#"drain_messages_total{queue="requests",outcome="duplicate",mode="on"} 1"#,
        r#"drain_owner_skipped_total{reason="claim_held",mode="shadow"} 1"#,
        r#"drain_owner_claim_busy_backoff_total{mode="on"} 1"#,
        "drain_owner_retry_overflow_total 1",
        "drain_owner_peek_errors_total 1",
        r#"drain_owner_turns_total{outcome="claim_busy"} 1"#,
        "drain_owner_queue_depth 7",
        "drain_owner_retry_timers 3",
        r#"drain_switch_mode{switch="SERVICEBUS_DRAIN_SINGLEFLIGHT",mode="shadow"} 1"#,
        r#"drain_switch_mode{switch="SERVICEBUS_DRAIN_SINGLEFLIGHT",mode="on"} 0"#,
        r#"drain_tick_duration_seconds_bucket{kind="beat",le="2.5"} 4"#,
        r#"drain_tick_duration_seconds_count{kind="beat"} 4"#,
        r#"drain_tick_duration_seconds_count{kind="resident"} 1"#,
        r#"drain_redis_op_duration_seconds_count{op="acquire"} 1"#,
    ] {
        assert!(body.lines().any(|l| l == line), "missing `{line}` in:\n{body}");
    }
    assert!(!body.contains("some_library_requests_total"), "only the keep-list is exported:\n{body}");
    for l in body.lines().filter(|l| l.starts_with("drain_")) {
        let name = l.split(['{', ' ']).next().unwrap();
        let base = name.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count");
        assert!(KEEP_LIST.contains(&base), "unexpected series {name}");
    }
    assert!(body.contains("# HELP drain_ticks_total"), "described:\n{body}");
    let head = body.split("\r\n\r\n").next().unwrap_or_default().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.lines().any(|l| l == "content-type: text/plain; version=0.0.4; charset=utf-8"),
        "the text format's full content type:\n{head}"
    );
}

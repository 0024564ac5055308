//! Counters are on `/metrics` at 0 for every label set the process can produce,
//! before the first event (so `rate()` and `increase()` alerts see the first one).

mod support;

use std::time::Duration;

use adapter_metrics::{Known, KnownTicks, MetricsObserver, export_known};
use drain_core::Switch;
use drain_core::event::{Event, MessageOutcome};
use drain_core::ports::Observer;
use support::scrape;

fn series(body: &str) -> Vec<&str> {
    body.lines().filter(|l| l.starts_with("drain_")).collect()
}

#[tokio::test]
async fn every_known_label_set_is_exported_at_zero_before_its_first_event() {
    let addr = adapter_metrics::install("127.0.0.1:0".parse().unwrap()).expect("install");
    let before = scrape(addr).await;
    assert!(series(&before).is_empty(), "nothing before export_known:\n{before}");

    let ticks =
        KnownTicks { queue: "requests", singleflight: Switch::On, atomic_claim: Switch::Shadow, resident: true };
    export_known(&Known { ticks: Some(ticks), owners: Some(Switch::On) });
    let body = scrape(addr).await;
    let zero = [
        r#"drain_ticks_total{queue="requests",outcome="ran",mode="on",kind="beat"} 0"#,
        r#"drain_ticks_total{queue="requests",outcome="skipped_locked",mode="on",kind="beat"} 0"#,
        r#"drain_ticks_total{queue="requests",outcome="fail_open",mode="on",kind="beat"} 0"#,
        r#"drain_ticks_total{queue="requests",outcome="claims_down",mode="on",kind="beat"} 0"#,
        r#"drain_ticks_total{queue="requests",outcome="ran",mode="off",kind="resident"} 0"#,
        r#"drain_lease_ops_total{op="acquire",result="acquired",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="acquire",result="held",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="acquire",result="error",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="release",result="released",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="release",result="not_owner",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="release",result="error",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="renew",result="renewed",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="renew",result="lost",mode="on"} 0"#,
        r#"drain_lease_ops_total{op="renew",result="error",mode="on"} 0"#,
        "drain_lease_lost_total 0",
        r#"drain_messages_total{queue="requests",outcome="submitted",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="duplicate",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="claimed_elsewhere",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="claim_error",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="submit_failed",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="dead_lettered",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="settle_failed",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="claim_settle_failed",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="cancelled",mode="shadow"} 0"#,
        r#"drain_messages_total{queue="requests",outcome="claim_expired",mode="shadow"} 0"#,
        r#"drain_owner_skipped_total{reason="claim_held",mode="on"} 0"#,
        r#"drain_owner_skipped_total{reason="served",mode="on"} 0"#,
        r#"drain_owner_claim_busy_backoff_total{mode="on"} 0"#,
        "drain_owner_retry_overflow_total 0",
        "drain_owner_peek_errors_total 0",
        r#"drain_owner_turns_total{outcome="productive_more"} 0"#,
        r#"drain_owner_turns_total{outcome="productive_done"} 0"#,
        r#"drain_owner_turns_total{outcome="done"} 0"#,
        r#"drain_owner_turns_total{outcome="claim_busy"} 0"#,
        r#"drain_owner_turns_total{outcome="failed"} 0"#,
        "drain_owner_queue_depth 0",
        "drain_owner_retry_timers 0",
    ];
    let got = series(&body);
    for line in zero {
        assert!(got.contains(&line), "missing `{line}` in:\n{body}");
    }
    assert_eq!(got.len(), zero.len(), "exactly the known label sets:\n{body}");

    // The first event moves the series from 0 to 1 (what rate() needs); a second
    // export_known leaves counting series alone.
    let o = MetricsObserver;
    o.observe(&Event::Message { queue: "requests", outcome: MessageOutcome::ClaimError, mode: Switch::Shadow });
    export_known(&Known { ticks: Some(ticks), owners: None });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let body = scrape(addr).await;
    let line = r#"drain_messages_total{queue="requests",outcome="claim_error",mode="shadow"} 1"#;
    assert!(series(&body).contains(&line), "missing `{line}` in:\n{body}");
}

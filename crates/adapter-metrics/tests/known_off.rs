//! With single-flight off, no resident consumer and no owner drains, none of their
//! series is exported (a separate process from known.rs: one global recorder each).

mod support;

use adapter_metrics::{Known, KnownTicks, export_known};
use drain_core::Switch;
use support::scrape;

#[tokio::test]
async fn off_switches_export_no_lease_series_and_no_owner_series() {
    let addr = adapter_metrics::install("127.0.0.1:0".parse().unwrap()).expect("install");
    let ticks = KnownTicks { queue: "q", singleflight: Switch::Off, atomic_claim: Switch::On, resident: false };
    export_known(&Known { ticks: Some(ticks), owners: None });
    let body = scrape(addr).await;
    assert!(body.contains(r#"drain_ticks_total{queue="q",outcome="ran",mode="off",kind="beat"} 0"#), "{body}");
    assert!(body.contains(r#"drain_messages_total{queue="q",outcome="claim_error",mode="on"} 0"#), "{body}");
    assert!(!body.contains("drain_lease_ops_total{"), "single-flight off never touches the lease:\n{body}");
    assert!(!body.contains("drain_owner_"), "no owner drains here:\n{body}");
    assert!(!body.contains(r#"kind="resident""#), "no resident consumer here:\n{body}");
}

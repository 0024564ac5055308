//! The tick report as one JSON line: what `drain run --once` prints, and what the
//! beat and the resident consumer log with each tick.
//!
//! drain-core's `TickReport` is plain data; this is its JSON shape, the binary's
//! output format. Fields appear in this order; counts that are usually zero, and
//! flags that are usually false, are left out unless set:
//!
//! `{"queue":"requests","skipped":"locked"}`, or
//! `{"queue":"requests","lease":"held","fence":7,"received":12,"submitted":11,"duplicates":1,"abandoned":0,"dead_lettered":0}`.
//! A tick whose claim store failed adds `"claim_store":"failed"`, and the counts of
//! what went wrong (`claim_errors`, `submit_failures`, `claims_expired`, …).

use drain_core::guard::LeaseStatus;
use drain_core::tick::{ClaimHealth, DrainStats, TickReport};
use serde::Serialize;

/// One JSON line for `report` (no trailing newline).
pub(crate) fn to_json(report: &TickReport) -> String {
    let json = Json {
        queue: &report.queue,
        skipped: report.skipped,
        lease: report.lease.map(lease),
        fence: report.fence,
        stats: report.stats.as_ref().map(Stats::from),
        lease_lost: report.lease_lost,
        stopped: report.stopped,
        error: report.error.as_deref(),
        claim_store: (report.claims == ClaimHealth::Failed).then_some("failed"),
    };
    // Serializing plain strings, numbers and bools into a String cannot fail.
    serde_json::to_string(&json).unwrap_or_default()
}

fn lease(status: LeaseStatus) -> &'static str {
    match status {
        LeaseStatus::Off => "off",
        LeaseStatus::Held => "held",
        LeaseStatus::FailOpen => "fail_open",
        LeaseStatus::ShadowAcquired => "shadow_acquired",
        LeaseStatus::ShadowWouldSkip => "shadow_would_skip",
    }
}

#[derive(Serialize)]
struct Json<'a> {
    queue: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fence: Option<u64>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    stats: Option<Stats>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    lease_lost: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stopped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    /// `"failed"` when the claim store failed (or was known down) in this tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    claim_store: Option<&'static str>,
}

#[derive(Serialize)]
struct Stats {
    received: u64,
    submitted: u64,
    duplicates: u64,
    abandoned: u64,
    dead_lettered: u64,
    #[serde(skip_serializing_if = "is_zero")]
    settle_errors: u64,
    #[serde(skip_serializing_if = "is_zero")]
    claim_settle_errors: u64,
    #[serde(skip_serializing_if = "is_zero")]
    claim_errors: u64,
    #[serde(skip_serializing_if = "is_zero")]
    submit_failures: u64,
    #[serde(skip_serializing_if = "is_zero")]
    claims_expired: u64,
}

impl From<&DrainStats> for Stats {
    fn from(s: &DrainStats) -> Self {
        Stats {
            received: s.received,
            submitted: s.submitted,
            duplicates: s.duplicates,
            abandoned: s.abandoned,
            dead_lettered: s.dead_lettered,
            settle_errors: s.settle_errors,
            claim_settle_errors: s.claim_settle_errors,
            claim_errors: s.claim_errors,
            submit_failures: s.submit_failures,
            claims_expired: s.claims_expired,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(lease: LeaseStatus, fence: Option<u64>, stats: DrainStats) -> TickReport {
        TickReport {
            queue: "requests".to_owned(),
            skipped: None,
            lease: Some(lease),
            fence,
            stats: Some(stats),
            lease_lost: false,
            stopped: false,
            error: None,
            claims: ClaimHealth::Answered,
            stale_claims: Vec::new(),
        }
    }

    #[track_caller]
    fn check(report: TickReport, expected: &str) {
        assert_eq!(to_json(&report), expected);
    }

    /// The exact bytes `drain run --once` printed when this shape was drain-core's
    /// serde (kept byte for byte: scripts parse it).
    #[test]
    fn the_json_shape_is_the_one_run_once_always_printed() {
        let counts = DrainStats { received: 2, submitted: 1, duplicates: 1, ..DrainStats::default() };
        check(TickReport::skipped_locked("requests"), r#"{"queue":"requests","skipped":"locked"}"#);
        check(
            ran(LeaseStatus::Held, Some(1), counts),
            r#"{"queue":"requests","lease":"held","fence":1,"received":2,"submitted":1,"duplicates":1,"abandoned":0,"dead_lettered":0}"#,
        );
        check(
            ran(LeaseStatus::Off, None, DrainStats::default()),
            r#"{"queue":"requests","lease":"off","received":0,"submitted":0,"duplicates":0,"abandoned":0,"dead_lettered":0}"#,
        );
        for (status, name) in [
            (LeaseStatus::FailOpen, "fail_open"),
            (LeaseStatus::ShadowAcquired, "shadow_acquired"),
            (LeaseStatus::ShadowWouldSkip, "shadow_would_skip"),
        ] {
            assert!(to_json(&ran(status, None, counts)).contains(&format!(r#""lease":"{name}""#)), "{name}");
        }
        let errors = DrainStats { settle_errors: 2, claim_settle_errors: 3, ..counts };
        let mut r = ran(LeaseStatus::Held, Some(7), errors);
        r.lease_lost = true;
        r.stopped = true;
        r.error = Some("receive failed: \"x\"".to_owned());
        check(
            r,
            r#"{"queue":"requests","lease":"held","fence":7,"received":2,"submitted":1,"duplicates":1,"abandoned":0,"dead_lettered":0,"settle_errors":2,"claim_settle_errors":3,"lease_lost":true,"stopped":true,"error":"receive failed: \"x\""}"#,
        );
    }

    /// What a degraded tick adds: only when it happened.
    #[test]
    fn a_failed_claim_store_and_its_counts_are_shown() {
        let counts = DrainStats {
            received: 4,
            abandoned: 4,
            claim_errors: 3,
            submit_failures: 1,
            claims_expired: 2,
            ..DrainStats::default()
        };
        let mut r = ran(LeaseStatus::FailOpen, None, counts);
        r.claims = ClaimHealth::Failed;
        check(
            r,
            r#"{"queue":"requests","lease":"fail_open","received":4,"submitted":0,"duplicates":0,"abandoned":4,"dead_lettered":0,"claim_errors":3,"submit_failures":1,"claims_expired":2,"claim_store":"failed"}"#,
        );
    }
}

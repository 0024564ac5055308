//! What a tick did, as plain data, with its JSON form (what `drain run --once`
//! prints, one line) and a summary in words.
//!
//! The JSON fields appear in this order; counts that are usually zero, and flags that
//! are usually false, are left out unless set:
//! `{"queue":"requests","skipped":"locked"}`, or
//! `{"queue":"requests","lease":"held","fence":7,"received":12,"submitted":11,"duplicates":1,"abandoned":0,"dead_lettered":0}`.
//! A tick whose claim store failed adds `"claim_store":"failed"`, and the counts of
//! what went wrong (`claim_errors`, `submit_failures`, `claims_expired`, …).

use std::fmt;

use serde::{Serialize, Serializer};

use crate::guard::LeaseStatus;

use crate::ports::MessageId;

/// How the claim store fared in a tick (ordered: a tick that both got answers and
/// failed has failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum ClaimHealth {
    /// No claim was asked for (claims off, nothing received, no message with an id).
    #[default]
    NotAsked,
    /// Every claim call was answered.
    Answered,
    /// A claim call failed, or the store was known down: the tick stopped receiving,
    /// and what it held was abandoned. A process should not receive again before the
    /// store answers (see [`crate::tick::Outage`]).
    Failed,
}

/// What one drain did with the messages it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DrainStats {
    /// Messages received.
    pub received: u64,
    /// Messages submitted to the target and completed.
    pub submitted: u64,
    /// Messages completed without submitting because a `done` claim showed an
    /// earlier submit.
    pub duplicates: u64,
    /// Messages given back to the source for redelivery (foreign pending claim, claim
    /// store error, submit failure, cancellation).
    pub abandoned: u64,
    /// Messages moved to the dead-letter queue (no message id).
    pub dead_lettered: u64,
    /// Messages abandoned, never submitted, because the claim store failed (fail
    /// closed). Included in `abandoned`.
    pub claim_errors: u64,
    /// Messages whose submit failed (claim released, message abandoned). Included in
    /// `abandoned`.
    pub submit_failures: u64,
    /// Claims that were no longer ours when they were settled (the pending TTL ran
    /// out during the submit, and another holder may have taken the message over):
    /// after a successful submit, each is a possible duplicate in the target.
    pub claims_expired: u64,
    /// Settlements at the source that failed (the message's lock will expire and it is
    /// redelivered; its claim prevents a second submit).
    pub settle_errors: u64,
    /// Claims whose settlement (mark done or release) failed: they stay `pending`
    /// until the pending TTL. A completed message is not redelivered, so nothing is
    /// submitted twice; an abandoned one waits out the TTL before it is taken again.
    pub claim_settle_errors: u64,
}

/// The result of one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TickReport {
    /// The queue.
    pub queue: String,
    /// `"locked"` when the tick was skipped because another holder had the lease.
    pub skipped: Option<&'static str>,
    /// How the tick related to the lease; absent on a skipped tick.
    pub lease: Option<LeaseStatus>,
    /// The fencing number of the lease we held.
    pub fence: Option<u64>,
    /// Counts; absent on a skipped tick.
    pub stats: Option<DrainStats>,
    /// The lease was lost while draining (a renewal found it gone, or none was
    /// confirmed by its deadline) and the drain stopped early.
    pub lease_lost: bool,
    /// A shutdown stopped the drain before the queue was empty.
    pub stopped: bool,
    /// Why the drain stopped early (the source failed), if it did.
    pub error: Option<String>,
    /// How the claim store fared.
    pub claims: ClaimHealth,
    /// Ids whose claim call failed in a way that may still have run (it timed out,
    /// or its connection broke): a frozen store runs such a call when it thaws, taking
    /// `pending` claims with this tick's token for messages the tick gave back, and
    /// every redelivery would then find them held elsewhere until the pending TTL,
    /// each costing a delivery. Release them with the tick's token once the store
    /// answers again and before receiving ([`crate::tick::Outage::keep_stale`],
    /// [`crate::tick::release_stale_claims`]); the release compares the token, so an
    /// id whose call never ran is left alone. Empty unless a claim call failed.
    pub stale_claims: Vec<MessageId>,
}

impl TickReport {
    /// A tick skipped because the lease was held elsewhere.
    #[must_use]
    pub fn skipped_locked(queue: &str) -> Self {
        TickReport {
            queue: queue.to_owned(),
            skipped: Some("locked"),
            lease: None,
            fence: None,
            stats: None,
            lease_lost: false,
            stopped: false,
            error: None,
            claims: ClaimHealth::NotAsked,
            stale_claims: Vec::new(),
        }
    }

    /// Whether the tick was skipped.
    #[must_use]
    pub fn is_skipped(&self) -> bool {
        self.skipped.is_some()
    }
}

impl TickReport {
    /// What went wrong, in words with counts (empty when nothing did).
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.lease == Some(LeaseStatus::FailOpen) {
            out.push("the lease store failed on acquire: drained without the lease (fail-open)".to_owned());
        }
        if let Some(s) = self.stats {
            if s.claim_errors > 0 {
                out.push(format!(
                    "{} message(s) abandoned, not submitted: the claim store failed (fail-closed)",
                    s.claim_errors
                ));
            } else if self.claims == ClaimHealth::Failed {
                out.push("the claim store failed: receiving stopped".to_owned());
            }
            if s.submit_failures > 0 {
                out.push(format!(
                    "{} submit(s) failed: claims released, messages abandoned for redelivery",
                    s.submit_failures
                ));
            }
            if s.claims_expired > 0 {
                out.push(format!(
                    "{} claim(s) expired before they were settled (submits outlived the pending TTL): possible duplicates in the target",
                    s.claims_expired
                ));
            }
            if s.claim_settle_errors > 0 {
                out.push(format!(
                    "{} claim settlement(s) failed: those claims stay pending until the pending TTL",
                    s.claim_settle_errors
                ));
            }
            if s.settle_errors > 0 {
                out.push(format!(
                    "{} settlement(s) at the source failed: those messages are redelivered",
                    s.settle_errors
                ));
            }
            if s.dead_lettered > 0 {
                out.push(format!("{} message(s) without a message id dead-lettered", s.dead_lettered));
            }
        }
        if self.lease_lost {
            out.push("the lease was lost while draining (expired or taken): drain cancelled".to_owned());
        }
        if let Some(e) = &self.error {
            out.push(e.clone());
        }
        out
    }
}

/// A summary in words: what the tick did, then what went wrong.
impl fmt::Display for TickReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queue {}: ", self.queue)?;
        let Some(s) = self.stats else {
            return f.write_str("skipped: another tick holds the lease");
        };
        write!(
            f,
            "{} received, {} submitted, {} duplicate(s), {} abandoned",
            s.received, s.submitted, s.duplicates, s.abandoned
        )?;
        if let (Some(status), fence) = (self.lease, self.fence) {
            write!(f, " (lease {}", status.as_str())?;
            if let Some(n) = fence {
                write!(f, ", fence {n}")?;
            }
            f.write_str(")")?;
        }
        for p in self.problems() {
            write!(f, "; {p}")?;
        }
        Ok(())
    }
}

/// The JSON line of the module docs.
impl Serialize for TickReport {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Json {
            queue: &self.queue,
            skipped: self.skipped,
            lease: self.lease.map(LeaseStatus::as_str),
            fence: self.fence,
            stats: self.stats.as_ref().map(Stats::from),
            lease_lost: self.lease_lost,
            stopped: self.stopped,
            error: self.error.as_deref(),
            claim_store: (self.claims == ClaimHealth::Failed).then_some("failed"),
        }
        .serialize(serializer)
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

    fn to_json(r: &TickReport) -> String {
        serde_json::to_string(r).unwrap()
    }

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

use serde::Serialize;

/// How the tick related to the single-flight lease (`"lease"` in the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseStatus {
    /// Single-flight is off; the lease store was not touched.
    Off,
    /// We held the lease for the drain.
    Held,
    /// The store failed on acquire; we drained without a lease.
    FailOpen,
    /// Shadow mode: we took the lease (and released it), but would have drained anyway.
    ShadowAcquired,
    /// Shadow mode: another holder had the lease; On would have skipped. We drained.
    ShadowWouldSkip,
}

/// What one drain did with the messages it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
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
    /// Settlements at the source that failed (the message's lock will expire and it is
    /// redelivered; its claim prevents a second submit).
    #[serde(skip_serializing_if = "is_zero")]
    pub settle_errors: u64,
    /// Claims whose settlement (mark done or release) failed: they stay `pending`
    /// until the pending TTL. A completed message is not redelivered, so nothing is
    /// submitted twice; an abandoned one waits out the TTL before it is taken again.
    #[serde(skip_serializing_if = "is_zero")]
    pub claim_settle_errors: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The result of one tick, printed as one JSON line by `drain run --once`, e.g.
/// `{"queue":"requests","skipped":"locked"}` or
/// `{"queue":"requests","lease":"held","fence":7,"received":12,"submitted":11,"duplicates":1,"abandoned":0,"dead_lettered":0}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TickReport {
    /// The queue.
    pub queue: String,
    /// `"locked"` when the tick was skipped because another holder had the lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<&'static str>,
    /// How the tick related to the lease; absent on a skipped tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseStatus>,
    /// The fencing number of the lease we held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// Counts; absent on a skipped tick.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub stats: Option<DrainStats>,
    /// The renewal found the lease gone and the drain stopped early.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lease_lost: bool,
    /// A shutdown stopped the drain before the queue was empty.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// Why the drain stopped early (the source failed), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
        }
    }

    /// Whether the tick was skipped.
    #[must_use]
    pub fn is_skipped(&self) -> bool {
        self.skipped.is_some()
    }
}

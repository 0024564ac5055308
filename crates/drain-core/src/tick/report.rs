//! What a tick did, as plain data. Its JSON form (the `drain` binary's
//! `run --once` output) belongs to the binary, not to the domain.

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
pub struct TickReport {
    /// The queue.
    pub queue: String,
    /// `"locked"` when the tick was skipped because another holder had the lease.
    pub skipped: Option<&'static str>,
    /// How the tick related to the lease; absent on a skipped tick.
    pub lease: Option<crate::guard::LeaseStatus>,
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

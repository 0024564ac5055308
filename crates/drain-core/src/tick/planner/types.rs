//! The data the planner exchanges with the drain loop: the decisions it hands out
//! (what to do next, a receive permit, the claim call, the jobs of a step, the
//! messages for the source) and what the loop tells it (a stop). Only the planner
//! makes a [`Receive`], a [`ClaimCall`], a [`Slot`] or a [`ToSource`]: their fields
//! are its own.

use crate::event::MessageOutcome;
use crate::ports::{DeliveryHandle, Message, MessageId, Settlement};
use crate::tick::{ClaimHealth, DrainStats};

/// Why the drain stops before the queue is empty (both are final).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A shutdown (`TickControl::stop`).
    Shutdown,
    /// The lease was lost: a renewal found it gone, or none was confirmed by its deadline.
    LeaseLost,
}

/// What the drain does between two steps.
#[derive(Debug)]
pub(crate) enum Next {
    /// Receive a batch.
    Receive(Receive),
    /// Submit these messages (the batch claimed), at most the window's at once.
    Submit(Vec<Job>),
    /// Make this last claim call, then settle what it answers at the source.
    Finish(ClaimCall),
}

/// Leave to receive one batch, of at most this many messages: the only way to hand
/// the planner a batch.
#[derive(Debug)]
pub(crate) struct Receive(pub(super) usize);

impl Receive {
    /// Messages to ask for.
    pub(crate) fn max(&self) -> usize {
        self.0
    }
}

/// What a received batch needs before its submits: its messages without an id
/// dead-lettered (claim On: the claim is keyed on the id), then one claim call.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) dead_letters: Vec<DeliveryHandle>,
    pub(crate) call: ClaimCall,
}

/// One claim-store call: settle the claims of earlier batches, then take this
/// batch's (`ClaimStore::settle_then_claim`; no call when both are empty).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClaimCall {
    pub(super) settle: Vec<Settlement>,
    pub(super) claim: Vec<MessageId>,
}

impl ClaimCall {
    pub(crate) fn settlements(&self) -> &[Settlement] {
        &self.settle
    }

    pub(crate) fn ids(&self) -> &[MessageId] {
        &self.claim
    }
}

/// One message of a step: ask [`Planner::start`](super::Planner::start) whether to
/// submit it, then tell [`Planner::handle_submitted`](super::Planner::handle_submitted)
/// how it went.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) slot: Slot,
    pub(crate) message: Message,
}

/// Where a job is: its batch and its place among the batch's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(super) batch: u32,
    pub(super) at: usize,
}

/// Whether to submit a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    Submit,
    /// Not submitted: a duplicate, given back, or the drain is stopping.
    Skip,
}

/// A batch whose claims are settled, for the source; the two halves are settled
/// side by side.
#[derive(Debug)]
pub(crate) struct ForSource {
    pub(crate) abandons: Vec<ToSource>,
    pub(crate) completes: Vec<ToSource>,
}

/// One message to settle at the source, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToSource {
    pub(crate) handle: DeliveryHandle,
    pub(super) fate: Fate,
}

/// A settlement at the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceOp {
    Complete,
    Abandon,
    /// Give back without counting a delivery.
    Release,
}

impl ToSource {
    /// The settlement, where `release` says whether the source can give a message
    /// back uncounted.
    pub(crate) fn op(&self, release: bool) -> SourceOp {
        match self.fate {
            Fate::Complete(_) => SourceOp::Complete,
            // Another holder's claim is pending: the message did not fail. Given back
            // uncounted where the source can, a broker's maximum delivery count never
            // dead-letters it only for having met its own redelivery in flight.
            Fate::Abandon(MessageOutcome::ClaimedElsewhere) if release => SourceOp::Release,
            Fate::Abandon(_) => SourceOp::Abandon,
        }
    }
}

/// What the drain did, for the report.
pub(crate) struct DrainOutcome {
    pub(crate) stats: DrainStats,
    pub(crate) error: Option<String>,
    pub(crate) claims: ClaimHealth,
    pub(crate) stale_claims: Vec<MessageId>,
}

/// How a message ended, before it is settled at the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Complete(MessageOutcome),
    Abandon(MessageOutcome),
}

//! The data the scheduler exchanges with its driver: actions, peek results, turn
//! outcomes, answers and errors.

use thiserror::Error;

use crate::owner::OwnerId;
use crate::time::Time;

/// How an owner entered the FIFO, which decides whether it is peeked before launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A fresh request, a retry timer that fired, or a re-run after a dirty or
    /// claim-busy turn: peeked first when claim-aware admission computes.
    Initial,
    /// The owner's last turn was productive and said there is more: launched
    /// without a peek, since it just held the claim.
    Continuation,
}

/// What the driver should do next, from [`Scheduler::poll_action`](super::Scheduler::poll_action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Read, in one round trip, whether each owner's claim is held, and answer with
    /// [`Scheduler::on_peek`](super::Scheduler::on_peek). The owners keep their turn
    /// slots until then.
    Peek(Vec<OwnerId>),
    /// Run one turn of `owner`'s drain work and answer with
    /// [`Scheduler::on_turn`](super::Scheduler::on_turn).
    Launch {
        /// Whose turn it is.
        owner: OwnerId,
        /// How the owner entered the FIFO (after a peek, always [`Entry::Initial`]).
        entry: Entry,
    },
}

/// What a peek found for one owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeekResult {
    /// Nobody holds the owner's claim: launch.
    Free,
    /// Someone holds the claim: defer with a jittered timer (On) or count only (Shadow).
    Busy,
    /// The peek failed: launch anyway, as before claim-aware admission, and count it.
    Error,
}

/// A peek's answer for one owner: what it found of the claim and, when the store
/// keeps drain stamps, when the owner's latest completed drain began.
///
/// A [`PeekResult`] converts into one without a mark, so drivers that know no marks
/// answer [`Scheduler::on_peek`](super::Scheduler::on_peek) as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peeked {
    /// The claim.
    pub claim: PeekResult,
    /// When, on the scheduler's clock, the owner's latest completed drain began, at
    /// the latest (convert the store's answer conservatively: the peek's send time
    /// less the mark's age). A request made before it was served by that drain.
    /// `None`: the peek knows no marks (the store keeps none). A store that keeps
    /// them answers an owner never drained as [`Time::ZERO`], which no request
    /// precedes.
    pub drained: Option<Time>,
}

impl From<PeekResult> for Peeked {
    fn from(claim: PeekResult) -> Self {
        Peeked { claim, drained: None }
    }
}

/// What [`Scheduler::request`](super::Scheduler::request) did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum Requested {
    /// The owner was unknown: it joined the back of the FIFO as an initial entry.
    /// With [`SchedulerConfig::skip_served`](super::SchedulerConfig::skip_served) On,
    /// also an owner waiting on a claim retry timer when the request was made after
    /// every one the wait holds and its last peek answered with drain stamps: the wait
    /// ends and the owner is peeked again, so a drain stamp (or a free claim) answers
    /// at once instead of the timer.
    Queued,
    /// The owner already had a pending intent (queued, ready, peeking, on a retry
    /// timer or handed off): nothing changed. Otherwise a request never pulls a retry
    /// timer forward: that is the point of the backoff.
    Coalesced,
    /// The owner is running: it runs again after the turn.
    MarkedDirty,
}

/// What [`Scheduler::on_release`](super::Scheduler::on_release) did with a release
/// notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum Woken {
    /// The owner was waiting on a claim retry timer: the timer is cancelled and the
    /// owner is at the back of the FIFO as an initial entry (release wake-up On).
    Queued,
    /// Release wake-up is in Shadow: the owner would have been queued; nothing changed.
    WouldQueue,
    /// Release wake-up is Off, or the owner was not waiting on a claim retry timer:
    /// nothing changed.
    Ignored,
}

/// Where one owner is, from [`Scheduler::state_of`](super::Scheduler::state_of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OwnerState {
    /// Waiting in the FIFO.
    Queued {
        /// Whether it will be peeked before launch.
        entry: Entry,
    },
    /// Peeked free (or the peek failed, or Shadow): launches before the FIFO head.
    Ready,
    /// In a batch of an [`Action::Peek`] whose answer is outstanding; holds a slot.
    Peeking,
    /// Waiting for a retry timer.
    Timer {
        /// When it fires.
        due: Time,
    },
    /// Its turn is running.
    Running {
        /// Requested during the turn: it runs again afterwards.
        dirty: bool,
    },
    /// Handed back to the caller (timer cap overflow, or a continuation after
    /// [`Scheduler::close`](super::Scheduler::close)); waiting for
    /// [`Scheduler::poll_handoff`](super::Scheduler::poll_handoff).
    HandedOff,
}

/// The scheduler was closed: it takes no more requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
#[error("the owner admission scheduler is closed")]
pub struct Closed;

/// [`Scheduler::on_turn`](super::Scheduler::on_turn) was called for an owner that
/// has no running turn; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Error)]
#[error("owner `{0}` has no running turn")]
pub struct NotRunning(pub OwnerId);

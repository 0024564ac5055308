//! Every decision the core makes, as data for the observer port.
//!
//! Metrics, logs and tests subscribe through [`crate::ports::Observer`]; decisions
//! never depend on whether anyone listens.

use std::time::Duration;

use crate::switch::Switch;

/// What a tick did (label `outcome` of `drain_ticks_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TickOutcome {
    /// The drain ran (lease off, acquired, or shadow).
    Ran,
    /// Another holder had the lease; nothing was received.
    SkippedLocked,
    /// The lease store failed on acquire and the drain ran anyway.
    FailOpen,
    /// The claim store is known to be down (a tick found it failing, and its
    /// probe has not answered since): the beat started no tick, nothing was received
    /// (see `tick::Outage`).
    ClaimsDown,
}

impl TickOutcome {
    /// Every outcome, for exporting each label set before its first event.
    pub const ALL: [TickOutcome; 4] =
        [TickOutcome::Ran, TickOutcome::SkippedLocked, TickOutcome::FailOpen, TickOutcome::ClaimsDown];

    /// Metric label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TickOutcome::Ran => "ran",
            TickOutcome::SkippedLocked => "skipped_locked",
            TickOutcome::FailOpen => "fail_open",
            TickOutcome::ClaimsDown => "claims_down",
        }
    }
}

/// What ran the tick (label `kind` of `drain_ticks_total`): the beat, or one batch
/// of the resident consumer (a tick of at most one receive, without the lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TickKind {
    /// A beat tick.
    #[default]
    Beat,
    /// One batch of the resident consumer.
    Resident,
}

impl TickKind {
    /// Metric label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TickKind::Beat => "beat",
            TickKind::Resident => "resident",
        }
    }
}

/// A lease operation (label `op` of `drain_lease_ops_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseOp {
    /// Take the lease if it is free, and its next fence.
    Acquire,
    /// Compare-and-delete.
    Release,
    /// Compare-and-extend.
    Renew,
}

impl LeaseOp {
    /// Every operation, for exporting each label set before its first event.
    pub const ALL: [LeaseOp; 3] = [LeaseOp::Acquire, LeaseOp::Release, LeaseOp::Renew];

    /// The results this operation can have (label `result`).
    #[must_use]
    pub fn results(self) -> &'static [&'static str] {
        match self {
            LeaseOp::Acquire => &["acquired", "held", "error"],
            LeaseOp::Release => &["released", "not_owner", "error"],
            LeaseOp::Renew => &["renewed", "lost", "error"],
        }
    }

    /// Metric label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseOp::Acquire => "acquire",
            LeaseOp::Release => "release",
            LeaseOp::Renew => "renew",
        }
    }
}

/// What happened to one received message (label `outcome` of `drain_messages_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageOutcome {
    /// Submitted to the target and completed.
    Submitted,
    /// A `done` claim showed an earlier submit; completed without submitting.
    Duplicate,
    /// Another holder's `pending` claim: abandoned for redelivery.
    ClaimedElsewhere,
    /// The claim store failed: abandoned, never submitted (fail closed).
    ClaimError,
    /// The submit failed: claim released, message abandoned.
    SubmitFailed,
    /// The message cannot ever be processed (no message id): dead-lettered.
    DeadLettered,
    /// Completing, abandoning or dead-lettering at the source failed.
    SettleFailed,
    /// Settling the message's claim (mark done, or release) failed: the `pending`
    /// claim stays until the pending TTL, so a redelivery waits that long.
    ClaimSettleFailed,
    /// The tick stopped (lease lost) before the message was processed: abandoned.
    Cancelled,
    /// Settling the message's claim found it no longer ours: the pending TTL ran out
    /// during the submit and another holder may have taken the message over. After a
    /// successful submit the message is a possible duplicate in the target.
    ClaimExpired,
}

impl MessageOutcome {
    /// Every outcome, for exporting each label set before its first event.
    pub const ALL: [MessageOutcome; 10] = [
        MessageOutcome::Submitted,
        MessageOutcome::Duplicate,
        MessageOutcome::ClaimedElsewhere,
        MessageOutcome::ClaimError,
        MessageOutcome::SubmitFailed,
        MessageOutcome::DeadLettered,
        MessageOutcome::SettleFailed,
        MessageOutcome::ClaimSettleFailed,
        MessageOutcome::Cancelled,
        MessageOutcome::ClaimExpired,
    ];

    /// Metric label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            MessageOutcome::Submitted => "submitted",
            MessageOutcome::Duplicate => "duplicate",
            MessageOutcome::ClaimedElsewhere => "claimed_elsewhere",
            MessageOutcome::ClaimError => "claim_error",
            MessageOutcome::SubmitFailed => "submit_failed",
            MessageOutcome::DeadLettered => "dead_lettered",
            MessageOutcome::SettleFailed => "settle_failed",
            MessageOutcome::ClaimSettleFailed => "claim_settle_failed",
            MessageOutcome::Cancelled => "cancelled",
            MessageOutcome::ClaimExpired => "claim_expired",
        }
    }
}

/// Why admission did not launch an owner (label `reason` of `drain_owner_skipped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The peek found the owner's claim held by someone.
    ClaimBusy,
    /// The peek found a drain of the owner that began after the request was made and
    /// left nothing behind: the request was served already (label `served`).
    Served,
}

impl SkipReason {
    /// Every reason, for exporting each label set before its first event.
    pub const ALL: [SkipReason; 2] = [SkipReason::ClaimBusy, SkipReason::Served];

    /// Metric label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::ClaimBusy => "claim_held",
            SkipReason::Served => "served",
        }
    }
}

/// One observable decision or measurement. `mode` is the switch position the
/// decision was taken under: `Shadow` means "computed and counted, not enforced".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A tick ended.
    Tick {
        /// Queue name.
        queue: &'a str,
        /// What it did.
        outcome: TickOutcome,
        /// Single-flight switch position.
        mode: Switch,
        /// What ran it: the beat or the resident consumer.
        kind: TickKind,
        /// Wall time of the tick as measured on the injected clock.
        duration: Duration,
    },
    /// A lease operation completed (or failed: result `error`).
    LeaseOp {
        /// Which operation.
        op: LeaseOp,
        /// Its result.
        result: &'static str,
        /// Single-flight switch position (`Shadow`: the lease is taken and counted
        /// but a held lease does not skip the tick).
        mode: Switch,
    },
    /// A held lease was lost: a renewal found it gone, or no renewal was confirmed
    /// by its deadline. The work under it was stopped (in shadow, only counted).
    LeaseLost {
        /// The lease's name (a queue's, an owner's, a job's).
        lease: &'a str,
        /// Why.
        loss: crate::outcome::Loss,
    },
    /// A message was processed.
    Message {
        /// Queue name.
        queue: &'a str,
        /// What happened.
        outcome: MessageOutcome,
        /// Atomic-claim switch position.
        mode: Switch,
    },
    /// Admission deferred (or, in shadow, would have deferred) an owner.
    OwnerSkipped {
        /// Why.
        reason: SkipReason,
        /// Claim-aware switch position.
        mode: Switch,
    },
    /// A claim-busy turn was put on a jittered retry timer (or would have been).
    ClaimBusyBackoff {
        /// Claim-aware switch position.
        mode: Switch,
    },
    /// A release notification ended an owner's claim wait (mode On), or would have
    /// (mode Shadow). Emitted by the admission driver; not a kept metric (docs/metrics.md),
    /// an embedder counts it.
    ReleaseWake {
        /// Release wake-up switch position.
        mode: Switch,
    },
    /// A retry timer beyond the cap was handed back to the caller.
    RetryOverflow,
    /// An admission peek failed; the owner was admitted.
    PeekError,
    /// An owner turn ended.
    OwnerTurn {
        /// How.
        outcome: crate::outcome::TurnOutcome,
    },
    /// Owners waiting in the FIFO (gauge).
    OwnerQueueDepth(usize),
    /// Pending retry timers (gauge).
    RetryTimers(usize),
    /// One store round trip's duration (an adapter reports it; adapter-metrics turns
    /// it into the store round-trip histogram of docs/metrics.md).
    StoreOp {
        /// Operation name, e.g. `acquire`, `claim_batch`.
        op: &'static str,
        /// How long it took.
        duration: Duration,
    },
    /// A switch's effective position (gauge set once at start).
    SwitchMode {
        /// Variable name.
        switch: &'static str,
        /// Position.
        mode: Switch,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::TurnOutcome;

    /// Each `ALL` lists every variant once, in declaration order: the matches below
    /// are exhaustive, so a new variant does not compile until it is given a place
    /// (and the arm count beside it grows), and then fails until it is in `ALL` (so
    /// its series is exported at 0 from the start).
    #[test]
    fn every_all_lists_every_variant() {
        fn tick(o: TickOutcome) -> usize {
            match o {
                TickOutcome::Ran => 0,
                TickOutcome::SkippedLocked => 1,
                TickOutcome::FailOpen => 2,
                TickOutcome::ClaimsDown => 3,
            }
        }
        fn message(o: MessageOutcome) -> usize {
            match o {
                MessageOutcome::Submitted => 0,
                MessageOutcome::Duplicate => 1,
                MessageOutcome::ClaimedElsewhere => 2,
                MessageOutcome::ClaimError => 3,
                MessageOutcome::SubmitFailed => 4,
                MessageOutcome::DeadLettered => 5,
                MessageOutcome::SettleFailed => 6,
                MessageOutcome::ClaimSettleFailed => 7,
                MessageOutcome::Cancelled => 8,
                MessageOutcome::ClaimExpired => 9,
            }
        }
        fn turn(o: TurnOutcome) -> usize {
            match o {
                TurnOutcome::Productive { more: true } => 0,
                TurnOutcome::Productive { more: false } => 1,
                TurnOutcome::Done => 2,
                TurnOutcome::ClaimBusy => 3,
                TurnOutcome::Failed => 4,
            }
        }
        fn op(o: LeaseOp) -> usize {
            match o {
                LeaseOp::Acquire => 0,
                LeaseOp::Release => 1,
                LeaseOp::Renew => 2,
            }
        }
        fn reason(o: SkipReason) -> usize {
            match o {
                SkipReason::ClaimBusy => 0,
                SkipReason::Served => 1,
            }
        }
        // (positions in ALL, the number of arms of the match above)
        let check = |p: Vec<usize>, arms: usize| {
            assert_eq!(p, (0..arms).collect::<Vec<_>>(), "ALL lists each of the {arms} variants once, in order");
        };
        check(TickOutcome::ALL.map(tick).to_vec(), 4);
        check(MessageOutcome::ALL.map(message).to_vec(), 10);
        check(TurnOutcome::ALL.map(turn).to_vec(), 5);
        check(LeaseOp::ALL.map(op).to_vec(), 3);
        check(SkipReason::ALL.map(reason).to_vec(), 2);
        for o in LeaseOp::ALL {
            assert!(o.results().contains(&"error"), "{o:?}: every operation can fail");
        }
    }
}

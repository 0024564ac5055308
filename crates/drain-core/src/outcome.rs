//! What happened to a lease or an owner turn: the outcomes that events carry, kept
//! below the ports and the modules that produce them so dependencies run one way
//! (`ports` -> `event` -> here; `guard` and `admission` re-export them).

use std::fmt;

/// Why a held lease stopped being ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Loss {
    /// A renewal found the lease gone: it expired, or another holder has it.
    Lost,
    /// No renewal was confirmed within the time to live less the safety margin,
    /// counted from when the last confirmed renewal (or the acquire) was sent: the
    /// lease may have expired in the store, and another holder may have it.
    Expired,
}

impl Loss {
    /// A short stable name (`lost`, `expired`), for logs and reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Loss::Lost => "lost",
            Loss::Expired => "expired",
        }
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loss::Lost => "a renewal found the lease gone",
            Loss::Expired => "no renewal was confirmed within the lease's time to live",
        })
    }
}

impl std::error::Error for Loss {}

/// How one owner turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TurnOutcome {
    /// The turn did work.
    Productive {
        /// Work remains: the owner continues at once, at the back of the FIFO.
        more: bool,
    },
    /// There was nothing to do.
    Done,
    /// The turn lost the race for the owner's claim.
    ClaimBusy,
    /// The turn failed.
    Failed,
}

impl TurnOutcome {
    /// Every outcome, for exporting each label set before its first event.
    pub const ALL: [TurnOutcome; 5] = [
        TurnOutcome::Productive { more: true },
        TurnOutcome::Productive { more: false },
        TurnOutcome::Done,
        TurnOutcome::ClaimBusy,
        TurnOutcome::Failed,
    ];

    /// The metric label (`outcome` of `drain_owner_turns_total`): `productive_more`,
    /// `productive_done`, `done`, `claim_busy`, `failed`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TurnOutcome::Productive { more: true } => "productive_more",
            TurnOutcome::Productive { more: false } => "productive_done",
            TurnOutcome::Done => "done",
            TurnOutcome::ClaimBusy => "claim_busy",
            TurnOutcome::Failed => "failed",
        }
    }
}

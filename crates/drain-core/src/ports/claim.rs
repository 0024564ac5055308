use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::token::LeaseToken;

/// What [`ClaimStore::claim_batch`] found for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    /// The claim is now ours (`pending:<token>`, pending TTL): submit.
    Claimed,
    /// An earlier submit finished (`done:…`): complete without submitting.
    Done,
    /// Another holder's `pending` claim: abandon, the broker redelivers later.
    PendingElsewhere {
        /// The other holder's instance id.
        holder: String,
    },
}

/// How to settle one of our claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleAction {
    /// The submit succeeded: store `done:<token>` with the dedup TTL.
    MarkDone,
    /// The submit failed: delete the claim so a redelivery can take it.
    Release,
}

/// One settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The message's claim key.
    pub key: String,
    /// What to do.
    pub action: SettleAction,
}

/// Result of one settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleResult {
    /// Done.
    Settled,
    /// The claim no longer holds our token (it expired and someone else took it);
    /// nothing was changed.
    NotOwner,
}

/// The per-message atomic claim of SPEC §6. Values are `pending:<token>` and
/// `done:<token>`.
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// For each key: if absent, set `pending:<token>` with `pending_ttl` and report
    /// `Claimed`; if it holds `done:…`, report `Done`; if it holds another token's
    /// `pending:…`, report `PendingElsewhere`. Atomic per key. One round trip per hash
    /// slot; the keys of one queue share one slot. Results MUST be in key order; an
    /// empty slice MUST return an empty vector without contacting the store. A key
    /// repeated in one call MUST be `Claimed` at most once.
    ///
    /// # Errors
    /// MUST return `Err` when the store cannot answer; the caller then submits
    /// nothing (fails closed).
    async fn claim_batch(
        &self,
        keys: &[String],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError>;

    /// Settle our claims: `MarkDone` replaces `pending:<token>` with `done:<token>`
    /// and `done_ttl`; `Release` deletes it. Both act only while the key still holds
    /// `pending:<token>`, otherwise report `NotOwner` and change nothing. One round
    /// trip per hash slot; results in order; empty input makes no call.
    ///
    /// # Errors
    /// MUST return `Err` when the store cannot answer.
    async fn settle_batch(
        &self,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError>;
}

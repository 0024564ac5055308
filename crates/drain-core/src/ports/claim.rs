use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::ports::MessageId;
use crate::token::LeaseToken;

/// What [`ClaimStore::claim_batch`] found for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    /// The claim is now ours, pending until the submit is settled: submit.
    Claimed,
    /// An earlier submit of this message finished: complete without submitting.
    Done,
    /// Another holder's submit is pending: abandon, the source redelivers later.
    PendingElsewhere {
        /// The other holder's instance id.
        holder: String,
    },
}

/// How to settle one of our pending claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleAction {
    /// The submit succeeded: the claim becomes done for the dedup window.
    Done,
    /// The submit failed: the claim is dropped so a redelivery can take it.
    Release,
}

/// One settlement: which message, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The message's id.
    pub id: MessageId,
    /// What to do.
    pub action: SettleAction,
}

/// Result of one settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleResult {
    /// Done.
    Settled,
    /// The claim is not our pending one any more (its pending time ran out, and
    /// maybe someone else took it); nothing was changed.
    NotOwner,
}

/// What [`ClaimStore::settle_then_claim`] answered: the settlements' results and the
/// claims' states, each as [`ClaimStore::settle_batch`] and [`ClaimStore::claim_batch`]
/// would have answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledThenClaimed {
    /// One result per settlement, in order.
    pub settled: Result<Vec<SettleResult>, PortError>,
    /// One state per id, in order.
    pub claimed: Result<Vec<ClaimState>, PortError>,
}

impl SettledThenClaimed {
    /// Both halves failed with `e`: a store that could not be asked, or one call that
    /// failed as a whole.
    #[must_use]
    pub fn failed(e: PortError) -> Self {
        SettledThenClaimed { settled: Err(e.clone()), claimed: Err(e) }
    }
}

/// [`ClaimStore::settle_then_claim`] as two calls: the settlements, then (when they
/// were answered) the claims. What the trait's default does, for wrappers that
/// forward both calls and want the same.
pub async fn settle_then_claim_in_two_calls<S: ClaimStore + ?Sized>(
    store: &S,
    queue: &str,
    settlements: &[Settlement],
    ids: &[MessageId],
    token: &LeaseToken,
    ttls: ClaimTtls,
) -> SettledThenClaimed {
    let settled = if settlements.is_empty() {
        Ok(Vec::new())
    } else {
        store.settle_batch(queue, settlements, token, ttls.done).await
    };
    let claimed = match &settled {
        Err(e) => Err(PortError {
            message: format!("not asked, the settlements before them failed: {}", e.message),
            unsent: true,
            ..e.clone()
        }),
        Ok(_) if ids.is_empty() => Ok(Vec::new()),
        Ok(_) => store.claim_batch(queue, ids, token, ttls.pending).await,
    };
    SettledThenClaimed { settled, claimed }
}

/// The two times a claim lives: pending while its submit is under way, done for the
/// dedup window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTtls {
    /// How long a new pending claim holds ([`ClaimStore::claim_batch`]'s `pending_ttl`).
    pub pending: Duration,
    /// How long a claim marked done holds ([`ClaimStore::settle_batch`]'s `done_ttl`).
    pub done: Duration,
}

/// The per-message atomic claim: a message is submitted once even when ticks,
/// resident consumers and redeliveries overlap.
///
/// A claim is named by the queue and the message's id; ids of different types are
/// different claims (the string `"42"` and the number 42 are two messages). A claim
/// is free, pending (a holder's submit is under way, for the pending time), or done
/// (the message was submitted, for the dedup window).
///
/// `testkit::contract::claim_store` checks every rule below; each rule's name
/// follows its sentence.
///
/// # Errors
///
/// Every method answers `Err` when the store cannot answer; the tick then submits
/// nothing (it fails closed). Kinds as for [`LeaseStore`](crate::ports::LeaseStore).
#[async_trait]
pub trait ClaimStore: Send + Sync {
    /// For each id of `queue`: take the claim for `token` with `pending_ttl` if it is
    /// free and answer `Claimed`; answer `Done` when it is done, `PendingElsewhere`
    /// when another holder's claim is pending.
    ///
    /// Claims MUST be atomic per message: of any number of concurrent claims of one
    /// free message, exactly one answers `Claimed` (rule `claim.exclusive`). The
    /// answer MUST have one state per id, in the order of `ids`, and an empty `ids`
    /// an empty vector (rule `claim.order`). An id that
    /// appears twice in one call MUST be `Claimed` at most once (rule `claim.repeat`).
    /// Another token's pending claim MUST answer `PendingElsewhere` naming its holder
    /// (rule `claim.pending`), and a done claim MUST answer `Done` (rule `claim.done`).
    /// A pending claim MUST expire after `pending_ttl`, so a redelivery can take the
    /// claim of a holder that crashed, and not before, fractions of a second
    /// included (rule `claim.pending.expires`). Ids of
    /// different types, and the same id in different queues, MUST be different
    /// claims (rule `claim.distinct`).
    ///
    /// # Errors
    ///
    /// MUST answer `Err`, never a state, when the store cannot answer
    /// (rule `claim.error`).
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError>;

    /// Settle our pending claims of `queue`: `SettleAction::Done` makes a claim done for
    /// `done_ttl`, `Release` frees it.
    ///
    /// A settlement MUST act only on `token`'s own pending claim, and otherwise
    /// answer `NotOwner` and change nothing (rule `claim.settle.owner`). Our own
    /// pending claim whose pending time ran out MUST answer `NotOwner` and change
    /// nothing too, whether or not someone took it since: its submit may be
    /// repeated by a redelivery, which the tick counts and warns about, and a claim
    /// marked done after it expired would hide that (rule `claim.settle.expired`).
    /// `SettleAction::Done` MUST make the claim answer `Done`
    /// until `done_ttl` has passed, and then be free again (rule `claim.done.expires`);
    /// `Release` MUST free it (rule `claim.settle.release`). The answer MUST have
    /// one result per settlement, in order; an empty input MUST answer an empty
    /// vector (rule `claim.settle.order`).
    ///
    /// # Errors
    ///
    /// MUST answer `Err` when the store cannot answer (rule `claim.settle.error`).
    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError>;

    /// Settle `settlements` as [`Self::settle_batch`] does, then take the claims of
    /// `ids` as [`Self::claim_batch`] does, the claims seeing what the settlements
    /// did: the tick settles one batch's claims and takes the next batch's in this
    /// one call. The answers MUST be those of the two calls made in that order
    /// (rule `claim.settle_then_claim`), and each MUST be `Err` when the store cannot
    /// answer (rules `claim.settle.error`, `claim.error`).
    ///
    /// The default makes the two calls ([`settle_then_claim_in_two_calls`]), and
    /// does not ask for the claims when the settlements failed. A store that can do
    /// both in one round trip (one script, one transaction) should override it.
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await
    }
}

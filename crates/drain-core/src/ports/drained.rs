use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{Acquire, OwnerClaim, Waiter, WakeRelease};
use crate::token::LeaseToken;

/// What a marked peek found for one owner: its claim and its drain stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StampedClaim {
    /// The owner's claim, as [`OwnerClaims::peek_owners`](crate::ports::OwnerClaims::peek_owners)
    /// answers it.
    pub claim: OwnerClaim,
    /// How long before the store answered, on the store's clock, the owner's latest
    /// completed drain began: everything written for the owner before then was
    /// drained. `None`: no drain of the owner is known.
    pub drained: Option<Duration>,
}

/// Drain stamps, an optional capability of a store that holds owner claims (as
/// [`LeaseName::owner`](crate::ports::LeaseName::owner) leases): a turn that drained
/// its owner (its work left nothing behind) has the store remember, on the store's
/// own clock, when that turn took the claim; a peek answers the mark beside the
/// claim. Admission then drops a request made before the mark: the drain that began
/// after it served it, and a turn of its own would find nothing.
///
/// The mark is the time the claim was *taken*, published only when the same holder
/// releases it *drained*: a turn that fails, is stopped or dies marks nothing, so a
/// request is only dropped for a drain that really ended.
///
/// `testkit::contract::drain_stamps` checks every rule below; each rule's name follows
/// its sentence.
///
/// # Errors
///
/// Every method answers `Err` when the store cannot answer (rule `marks.error`).
#[async_trait]
pub trait DrainStamps: Send + Sync {
    /// [`OwnerClaims::peek_owners`](crate::ports::OwnerClaims::peek_owners) with each
    /// owner's drain stamp, in one round trip; with `waiter` (when the store offers
    /// the release wake-up) it also registers it as
    /// [`ReleaseWake::peek_and_wait`](crate::ports::ReleaseWake::peek_and_wait) does.
    ///
    /// MUST answer the claims as `peek_owners` does, one per owner in order
    /// (rule `marks.peek.claims`). An owner never drained MUST answer `None`
    /// (rule `marks.peek.none`).
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError>;

    /// [`LeaseStore::acquire`](crate::ports::LeaseStore::acquire) of `owner`'s claim
    /// (with `waiter`, [`ReleaseWake::acquire_or_wait`](crate::ports::ReleaseWake::acquire_or_wait)),
    /// remembering, when it answers `Acquired`, the store's time as this holder's
    /// start. It MUST answer as acquire does (rule `marks.acquire`) and MUST NOT
    /// change the owner's drain stamp: a start is not a drain (rule
    /// `marks.acquire.unmarked`).
    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError>;

    /// [`LeaseStore::release`](crate::ports::LeaseStore::release) of `owner`'s claim
    /// (with `wake`, waking one waiter as
    /// [`ReleaseWake::release_and_wake`](crate::ports::ReleaseWake::release_and_wake)
    /// does, when the store offers it; `woke` is false otherwise).
    ///
    /// MUST release as release does (rule `marks.release`). When the claim was
    /// `token`'s, taken by [`acquire_stamped`](Self::acquire_stamped), and `drained`
    /// is set, the owner's drain stamp MUST become that acquire's time, so a later
    /// peek answers the time since it (rule `marks.release.stamps`). A release that
    /// answers `NotOwner`, or one without `drained`, MUST leave the mark as it was
    /// (rule `marks.release.quiet`).
    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError>;
}

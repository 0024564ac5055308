use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{Acquire, OwnerClaim, Waiter, WakeRelease};
use crate::token::LeaseToken;

/// What a stamped peek found for one owner: its claim and its drain stamp.
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
/// own clock, when that turn took the claim; a peek answers the stamp beside the
/// claim. Admission then drops a request made before the stamp: the drain that began
/// after it served it, and a turn of its own would find nothing.
///
/// The stamp is the time the claim was *taken* by
/// [`acquire_stamped`](DrainStamps::acquire_stamped), published only when the same
/// holder releases it *drained*: a turn that fails, is stopped or dies stamps
/// nothing, so a request is only dropped for a drain that really ended. A claim
/// taken by a plain [`LeaseStore::acquire`](crate::ports::LeaseStore::acquire) has
/// no known start, and its drained release stamps nothing either.
///
/// A stamp may lapse (a store that keeps it as a key with a time to live lets it
/// go): a lapsed stamp answers `None`, which costs one turn that finds nothing. It
/// must not lapse sooner than an hour after its drain began.
///
/// A store that implements them MUST offer them: its
/// [`OwnerClaims::drain_stamps`](crate::ports::OwnerClaims::drain_stamps) answers
/// `Some` (rule `stamps.offered`), or admission, and every wrapper of the store, never
/// reach them.
///
/// `testkit::contract::drain_stamps` checks every rule below; each rule's name follows
/// its sentence.
///
/// # Errors
///
/// Every method answers `Err` when the store cannot answer (rule `stamps.error`).
#[async_trait]
pub trait DrainStamps: Send + Sync {
    /// [`OwnerClaims::peek_owners`](crate::ports::OwnerClaims::peek_owners) with each
    /// owner's drain stamp, in one round trip; with `waiter` (when the store offers
    /// the release wake-up) it also registers it as
    /// [`ReleaseWake::peek_and_wait`](crate::ports::ReleaseWake::peek_and_wait) does.
    ///
    /// MUST answer the claims as `peek_owners` does, one per owner in order
    /// (rule `stamps.peek.claims`). An owner never drained MUST answer `None`
    /// (rule `stamps.peek.none`). The claims and the stamps MUST be read in one step:
    /// each owner's answer is its claim and its stamp at one instant, never a claim
    /// read before a concurrent release and a stamp read after it
    /// (rule `stamps.peek.atomic`). A stamp MUST be answered for at least an hour
    /// after its drain began (rule `stamps.keeps`).
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError>;

    /// [`LeaseStore::acquire`](crate::ports::LeaseStore::acquire) of `owner`'s claim
    /// (with `waiter`, [`ReleaseWake::acquire_or_wait`](crate::ports::ReleaseWake::acquire_or_wait)),
    /// remembering, when it answers `Acquired`, the store's time as this holder's
    /// start.
    ///
    /// It MUST answer as acquire does: `Busy` with the holder while the claim is
    /// held, `Acquired` with a fence larger than every one handed out before for the
    /// claim when it is free, by this call or a plain acquire (rule `stamps.acquire`).
    /// Of concurrent calls for a free claim, from any instance, exactly one MUST
    /// answer `Acquired` (rule `stamps.acquire.exclusive`). It MUST NOT change
    /// the owner's drain stamp: a start is not a drain
    /// (rule `stamps.acquire.unstamped`).
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
    /// MUST release as release does (rule `stamps.release`), and MUST keep the
    /// claim's fence as release does: the next acquire hands out a larger one
    /// (rule `stamps.release.fence`). When the claim was
    /// `token`'s, taken by [`acquire_stamped`](Self::acquire_stamped), and `drained`
    /// is set, the owner's drain stamp MUST become that acquire's time, so a later
    /// peek answers the time since it (rule `stamps.release.drained`). A release
    /// without `drained` MUST leave the stamp as it was (rule `stamps.release.quiet`).
    /// A release that answers `NotOwner` (another token's claim, or our own that
    /// expired) MUST leave the stamp as it was (rule `stamps.release.not_owner`). A
    /// drained release of a claim taken by a plain acquire MUST leave the stamp as it
    /// was: no start of its holder is known, and an earlier holder's start is not
    /// this turn's (rule `stamps.release.unstarted`).
    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError>;
}

use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::owner::OwnerId;

/// What a peek found for one owner's claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerClaim {
    /// Nobody holds it: a turn would take it.
    Free,
    /// Someone holds it: a turn would lose the race.
    Busy {
        /// The holder's instance id.
        holder: String,
        /// Time left on the holder's claim.
        remaining: Duration,
    },
}

/// The optional ports a store of owner claims offers beside its peeks, as data: what
/// its [`OwnerClaims::release_wake`] and [`OwnerClaims::drain_stamps`] answer. A
/// wrapper that cannot ask its store yet (one that connects on first use) is told
/// them instead, and one that hides a port says so here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOffers {
    /// The release wake-up ([`ReleaseWake`](crate::ports::ReleaseWake)).
    pub release_wake: bool,
    /// The drain stamps ([`DrainStamps`](crate::ports::DrainStamps)).
    pub drain_stamps: bool,
}

impl StoreOffers {
    /// Neither optional port: owner claims alone.
    pub const NONE: StoreOffers = StoreOffers { release_wake: false, drain_stamps: false };
    /// Both optional ports.
    pub const ALL: StoreOffers = StoreOffers { release_wake: true, drain_stamps: true };

    /// What both `self` and `other` offer.
    #[must_use]
    pub const fn and(self, other: StoreOffers) -> StoreOffers {
        StoreOffers {
            release_wake: self.release_wake && other.release_wake,
            drain_stamps: self.drain_stamps && other.drain_stamps,
        }
    }
}

/// Read-only peeks at owners' claims: how claim-aware admission learns, before it
/// launches a turn, that another instance already holds the owner.
///
/// The claims are wherever the embedder's owner work takes them: by default the
/// owner leases of a [`LeaseStore`](crate::ports::LeaseStore)
/// ([`LeaseName::owner`](crate::ports::LeaseName::owner)), which drain-core's
/// `MemoryStore` and the adapters peek in one round trip; an embedder with claims of
/// its own implements this trait over them.
///
/// `testkit::contract::owner_claims` checks every rule below (over a store that is
/// also the owners' `LeaseStore`); each rule's name follows its sentence.
///
/// # Errors
///
/// MUST answer `Err`, never `Free`, when the store cannot answer
/// (rule `owners.error`); admission then admits the owners and counts the error.
#[async_trait]
pub trait OwnerClaims: Send + Sync {
    /// Look at the claim of every owner in `owners` without changing any.
    ///
    /// The answer MUST have one entry per owner, in the order of `owners`, and an
    /// empty `owners` MUST answer an empty vector (rule `owners.order`). An owner
    /// whose claim is held MUST be `Busy` with the holder's instance and a remaining
    /// time above zero and at most the claim's time to live, while any time is left
    /// on it, however little: a store that counts the time left in whole seconds
    /// must not read a claim's last second as free (rule `owners.held`); a free,
    /// released or expired claim MUST be `Free` (rule `owners.free`).
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError>;

    /// The release wake-up, when this store offers it (the same store's
    /// [`ReleaseWake`](crate::ports::ReleaseWake), answered as `Some(self)`):
    /// admission's driver and `OwnerTurns` then register waiters by themselves.
    /// `None` by default. A wrapper answers it from its [`StoreOffers`], as
    /// `drain_core::layer::Forward` does.
    fn release_wake(&self) -> Option<&dyn crate::ports::ReleaseWake> {
        None
    }

    /// The drain stamps, when this store offers them (the same store's
    /// [`DrainStamps`](crate::ports::DrainStamps), answered as `Some(self)`):
    /// admission's driver then peeks with the marks and drops the requests a drain
    /// already served. `None` by default.
    fn drain_stamps(&self) -> Option<&dyn crate::ports::DrainStamps> {
        None
    }

    /// What the two accessors above answer, as data. The default reads them; a
    /// store overrides neither this nor them to offer nothing.
    fn offers(&self) -> StoreOffers {
        StoreOffers { release_wake: self.release_wake().is_some(), drain_stamps: self.drain_stamps().is_some() }
    }
}

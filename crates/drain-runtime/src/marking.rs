//! A [`LazyStore`] that offers its store's drain stamps to owner drains, and, when
//! asked, its release wake-up too.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, DrainStamps, Holding, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release, ReleaseWake, Renew,
    StampedClaim, Waiter, WakeRelease,
};
use drain_core::{LeaseToken, PortError};

use crate::{LazyStore, Waking};

/// The owner claims of a [`LazyStore`] with the store's drain stamps: its
/// [`OwnerClaims::drain_stamps`] answers itself, so `OwnerTurns` publishes the stamp of
/// a turn that drained its owner and the admission driver peeks with the marks (while
/// `SchedulerConfig::skip_served` is not Off). [`Marking::waking`] offers the
/// release wake-up as well, through a [`Waking`] over the same store. A plain `LazyStore`
/// offers neither. While the store is down every call fails as the lazy store's do.
pub struct Marking<S> {
    /// The store, which answers for the wake-up too.
    waking: Waking<S>,
    wake: bool,
}

impl<S> Marking<S> {
    /// `store`'s owner claims with its drain stamps, without the release wake-up.
    pub fn new(store: Arc<LazyStore<S>>) -> Self {
        Marking { waking: Waking(store), wake: false }
    }

    /// The same, offering the store's release wake-up too: use it where the store's
    /// user surely has the wake-up's rights.
    #[must_use]
    pub fn waking(mut self) -> Self {
        self.wake = true;
        self
    }
}

#[async_trait]
impl<S: LeaseStore + Clone + 'static> LeaseStore for Marking<S> {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.waking.acquire(lease, token, ttl).await
    }
    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.waking.release(lease, token).await
    }
    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.waking.renew(lease, token, ttl).await
    }
    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.waking.peek(lease).await
    }
}

#[async_trait]
impl<S: OwnerClaims + ReleaseWake + DrainStamps + Clone + 'static> OwnerClaims for Marking<S> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.waking.peek_owners(owners).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        if self.wake { Some(&self.waking) } else { None }
    }

    fn drain_stamps(&self) -> Option<&dyn DrainStamps> {
        Some(self)
    }
}

#[async_trait]
impl<S: DrainStamps + Clone + 'static> DrainStamps for Marking<S> {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.waking.0.store().await?.peek_stamped(owners, waiter).await
    }
    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        self.waking.0.store().await?.acquire_stamped(owner, token, ttl, waiter).await
    }
    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.waking.0.store().await?.release_drained(owner, token, drained, wake).await
    }
}

//! A [`LazyStore`] that offers its store's release wake-up to owner drains.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, Holding, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release, ReleaseWake, Releases, Renew, Waiter,
    WakeRelease,
};
use drain_core::{LeaseToken, PortError};

use crate::LazyStore;

/// The owner claims of a [`LazyStore`] with the store's release wake-up: its
/// [`OwnerClaims::release_wake`] answers itself, so `OwnerTurns` and the admission
/// driver register waiters and wake them. A plain `LazyStore` offers no wake-up: use
/// this one where the store's user surely has the wake-up's rights (on PostgreSQL,
/// `grant_sql` grants them with the rest). While the store is down every call fails
/// as the lazy store's do; the subscription's failure leaves the drains without
/// wake-ups, as a lost wake-up would.
pub struct Waking<S>(pub Arc<LazyStore<S>>);

#[async_trait]
impl<S: LeaseStore + Clone + 'static> LeaseStore for Waking<S> {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.0.acquire(lease, token, ttl).await
    }
    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.0.release(lease, token).await
    }
    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.0.renew(lease, token, ttl).await
    }
    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.0.peek(lease).await
    }
}

#[async_trait]
impl<S: OwnerClaims + ReleaseWake + Clone + 'static> OwnerClaims for Waking<S> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.0.peek_owners(owners).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        Some(self)
    }
}

#[async_trait]
impl<S: ReleaseWake + Clone + 'static> ReleaseWake for Waking<S> {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        self.0.store().await?.subscribe(instance).await
    }
    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.0.store().await?.peek_and_wait(owners, waiter).await
    }
    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        self.0.store().await?.acquire_or_wait(owner, token, ttl, waiter).await
    }
    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.0.store().await?.release_and_wake(owner, token, wake).await
    }
}

//! [`Forward`] for the owner-claim ports and fence marks. The release wake-up and the
//! drain stamps are reached through the wrapped store's accessors, so a wrapper of
//! any owner-claims store forwards them exactly when that store offers them.

use std::time::Duration;

use async_trait::async_trait;

use super::{Call, Forward, Hooks};
use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{
    Acquire, DrainStamps, Fence, FenceMarks, FenceVerdict, OwnerClaim, OwnerClaims, ReleaseWake, Releases,
    StampedClaim, StoreOffers, Waiter, WakeRelease,
};
use crate::token::LeaseToken;

impl<S: OwnerClaims + ?Sized, H: Hooks> Forward<S, H> {
    /// The wrapped store's release wake-up, when offered through the hooks.
    fn wake(&self) -> Result<&dyn ReleaseWake, PortError> {
        let hidden = !self.offers().release_wake;
        self.inner.release_wake().filter(|_| !hidden).ok_or_else(|| PortError::not_offered("release wake-up"))
    }

    /// The wrapped store's drain stamps, when offered through the hooks.
    fn stamps(&self) -> Result<&dyn DrainStamps, PortError> {
        let hidden = !self.offers().drain_stamps;
        self.inner.drain_stamps().filter(|_| !hidden).ok_or_else(|| PortError::not_offered("drain stamps"))
    }
}

#[async_trait]
impl<S: OwnerClaims + ?Sized, H: Hooks> OwnerClaims for Forward<S, H> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.call(Call::PeekOwners(owners), self.inner.peek_owners(owners)).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        if self.offers().release_wake { Some(self) } else { None }
    }

    fn drain_stamps(&self) -> Option<&dyn DrainStamps> {
        if self.offers().drain_stamps { Some(self) } else { None }
    }

    fn offers(&self) -> StoreOffers {
        self.hooks.offers(self.inner.offers())
    }
}

#[async_trait]
impl<S: OwnerClaims + ?Sized, H: Hooks> ReleaseWake for Forward<S, H> {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        self.call(Call::Subscribe(instance), self.wake()?.subscribe(instance)).await
    }

    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        self.call(Call::PeekAndWait(owners), self.wake()?.peek_and_wait(owners, waiter)).await
    }

    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        self.call(Call::AcquireOrWait(owner), self.wake()?.acquire_or_wait(owner, token, ttl, waiter)).await
    }

    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.call(Call::ReleaseAndWake(owner), self.wake()?.release_and_wake(owner, token, wake)).await
    }
}

#[async_trait]
impl<S: OwnerClaims + ?Sized, H: Hooks> DrainStamps for Forward<S, H> {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        self.call(Call::PeekStamped(owners), self.stamps()?.peek_stamped(owners, waiter)).await
    }

    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        self.call(Call::AcquireStamped(owner), self.stamps()?.acquire_stamped(owner, token, ttl, waiter)).await
    }

    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        let released = self.stamps()?.release_drained(owner, token, drained, wake);
        self.call(Call::ReleaseDrained(owner), released).await
    }
}

#[async_trait]
impl<S: FenceMarks + ?Sized, H: Hooks> FenceMarks for Forward<S, H> {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        self.call(Call::Admit(resource), self.inner.admit(resource, fence)).await
    }

    async fn admit_fence(&self, resource: &str, fence: &Fence) -> Result<FenceVerdict, PortError> {
        self.call(Call::Admit(resource), self.inner.admit_fence(resource, fence)).await
    }
}

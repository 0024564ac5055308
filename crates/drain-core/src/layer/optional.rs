//! [`Forward`] for the owner-claim ports and fence marks. The release wake-up and the
//! drain stamps are reached through the wrapped store's accessors, so a wrapper of
//! any owner-claims store forwards them exactly when that store offers them (a store
//! not at hand: when it was said to, and its calls fail as not offered when the
//! store, once reached, does not).

use std::time::Duration;

use async_trait::async_trait;

use super::{Call, Forward, Hooks, Wrapped};
use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{
    Acquire, DrainStamps, Fence, FenceMarks, FenceVerdict, OwnerClaim, OwnerClaims, ReleaseWake, Releases,
    StampedClaim, StoreOffers, Waiter, WakeRelease,
};
use crate::token::LeaseToken;

impl<W: Wrapped<Store: OwnerClaims>, H: Hooks> Forward<W, H> {
    /// `Ok` when the release wake-up is offered through the hooks.
    fn wake(&self) -> Result<(), PortError> {
        if self.offers().release_wake { Ok(()) } else { Err(PortError::not_offered("release wake-up")) }
    }

    /// `Ok` when the drain stamps are offered through the hooks.
    fn stamps(&self) -> Result<(), PortError> {
        if self.offers().drain_stamps { Ok(()) } else { Err(PortError::not_offered("drain stamps")) }
    }
}

/// `store`'s release wake-up, or the error of a port it does not offer.
fn wake_of<S: OwnerClaims + ?Sized>(store: &S) -> Result<&dyn ReleaseWake, PortError> {
    store.release_wake().ok_or_else(|| PortError::not_offered("release wake-up"))
}

/// `store`'s drain stamps, or the error of a port it does not offer.
fn stamps_of<S: OwnerClaims + ?Sized>(store: &S) -> Result<&dyn DrainStamps, PortError> {
    store.drain_stamps().ok_or_else(|| PortError::not_offered("drain stamps"))
}

#[async_trait]
impl<W: Wrapped<Store: OwnerClaims>, H: Hooks> OwnerClaims for Forward<W, H> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.call(Call::PeekOwners(owners), async { self.inner.reach().await?.peek_owners(owners).await }).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        if self.offers().release_wake { Some(self) } else { None }
    }

    fn drain_stamps(&self) -> Option<&dyn DrainStamps> {
        if self.offers().drain_stamps { Some(self) } else { None }
    }

    fn offers(&self) -> StoreOffers {
        let inner = self.inner.at_hand().map_or_else(|| self.inner.offers(), |store| store.offers());
        self.hooks.offers(inner)
    }
}

#[async_trait]
impl<W: Wrapped<Store: OwnerClaims>, H: Hooks> ReleaseWake for Forward<W, H> {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        self.wake()?;
        self.call(Call::Subscribe(instance), async { wake_of(&*self.inner.reach().await?)?.subscribe(instance).await })
            .await
    }

    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        self.wake()?;
        self.call(Call::PeekAndWait(owners), async {
            wake_of(&*self.inner.reach().await?)?.peek_and_wait(owners, waiter).await
        })
        .await
    }

    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        self.wake()?;
        self.call(Call::AcquireOrWait(owner), async {
            wake_of(&*self.inner.reach().await?)?.acquire_or_wait(owner, token, ttl, waiter).await
        })
        .await
    }

    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.wake()?;
        self.call(Call::ReleaseAndWake(owner), async {
            wake_of(&*self.inner.reach().await?)?.release_and_wake(owner, token, wake).await
        })
        .await
    }
}

#[async_trait]
impl<W: Wrapped<Store: OwnerClaims>, H: Hooks> DrainStamps for Forward<W, H> {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        self.stamps()?;
        self.call(Call::PeekStamped(owners), async {
            stamps_of(&*self.inner.reach().await?)?.peek_stamped(owners, waiter).await
        })
        .await
    }

    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        self.stamps()?;
        self.call(Call::AcquireStamped(owner), async {
            stamps_of(&*self.inner.reach().await?)?.acquire_stamped(owner, token, ttl, waiter).await
        })
        .await
    }

    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.stamps()?;
        let released =
            async { stamps_of(&*self.inner.reach().await?)?.release_drained(owner, token, drained, wake).await };
        self.call(Call::ReleaseDrained(owner), released).await
    }
}

#[async_trait]
impl<W: Wrapped<Store: FenceMarks>, H: Hooks> FenceMarks for Forward<W, H> {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        self.call(Call::Admit(resource), async { self.inner.reach().await?.admit(resource, fence).await }).await
    }

    async fn admit_fence(&self, resource: &str, fence: &Fence) -> Result<FenceVerdict, PortError> {
        self.call(Call::Admit(resource), async { self.inner.reach().await?.admit_fence(resource, fence).await }).await
    }
}

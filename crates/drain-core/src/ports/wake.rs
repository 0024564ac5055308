use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;

use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{Acquire, OwnerClaim, Release};
use crate::token::LeaseToken;

/// One instance waiting for owners' claims to be released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The instance's id: where its wake-ups go.
    pub instance: String,
    /// How long a registration lives unless renewed by the next one: longer than
    /// the claim retry window, whose timer is the backstop of a lost wake-up.
    pub ttl: Duration,
}

/// What [`ReleaseWake::release_and_wake`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeRelease {
    /// The release's answer, as [`LeaseStore::release`](crate::ports::LeaseStore::release).
    pub release: Release,
    /// A waiter was notified.
    pub woke: bool,
}

/// The owners whose claim release woke a subscribed instance, in arrival order.
/// It does not end while the store serves it; dropping it unsubscribes.
pub type Releases = Pin<Box<dyn Stream<Item = OwnerId> + Send + 'static>>;

/// The release wake-up, an optional capability of a store that holds owner claims
/// (as [`LeaseName::owner`](crate::ports::LeaseName::owner) leases): an instance
/// that finds an owner's claim held registers as a waiter, and the holder's release
/// notifies one waiter, so the waiter peeks again at once instead of waiting out its
/// retry window. A store that cannot offer it simply does not implement it; the
/// retry window then serves alone.
///
/// Registration happens in the same step as the read that found the claim held, so
/// no release falls between the two. A wake-up that is lost (a crashed waiter, a
/// dropped notification) costs only the retry window.
///
/// A store that implements it MUST offer it: its
/// [`OwnerClaims::release_wake`](crate::ports::OwnerClaims::release_wake) answers
/// `Some` (rule `wake.offered`), or admission, and every wrapper of the store, never
/// reach it.
///
/// `testkit::contract::release_wake` checks every rule below; each rule's name
/// follows its sentence.
///
/// # Errors
///
/// Every method answers `Err` when the store cannot answer (rule `wake.error`); the
/// owner drains then run without wake-ups.
#[async_trait]
pub trait ReleaseWake: Send + Sync {
    /// Start hearing the releases that notify `instance`. Resolves once the
    /// subscription is in place: a release after it is heard.
    ///
    /// A notification MUST reach only the subscription of the waiter it was meant
    /// for (rule `wake.deliver.own`).
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError>;

    /// [`OwnerClaims::peek_owners`](crate::ports::OwnerClaims::peek_owners), also
    /// registering `waiter` on every owner whose claim it finds held, in the same
    /// step.
    ///
    /// MUST answer as `peek_owners` does (rule `wake.peek.answers`), and MUST
    /// register `waiter` on every owner found held and on no free one
    /// (rule `wake.peek.registers`). A waiter is registered at most once per owner:
    /// registering again replaces its registration, which then counts from now
    /// (rule `wake.register.once`). A registration MUST lapse `waiter.ttl` after it
    /// was made (rule `wake.register.expires`).
    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError>;

    /// [`LeaseStore::acquire`](crate::ports::LeaseStore::acquire) of `owner`'s claim
    /// that registers `waiter` when the claim is held, in the same step.
    ///
    /// MUST answer as acquire does: of concurrent calls for a free claim, from any
    /// instance, exactly one answers `Acquired`, with a fence larger than every one
    /// handed out before for the claim, by this call or a plain acquire
    /// (rule `wake.acquire.exclusive`). MUST register `waiter` when it answers `Busy`
    /// (rule `wake.acquire.registers`); when it answers `Acquired`, MUST drop
    /// `waiter`'s registration on `owner`, so it does not take a wake-up another
    /// waiter needs (rule `wake.acquire.unregisters`).
    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError>;

    /// [`LeaseStore::release`](crate::ports::LeaseStore::release) of `owner`'s claim
    /// that, when it was `token`'s and `wake` is set, notifies one registered waiter
    /// with `owner`. Pass `wake = false` when the holder continues with the owner at
    /// once.
    ///
    /// MUST release as release does (rule `wake.release.frees`), and MUST keep the
    /// claim's fence as release does: the next acquire hands out a larger one
    /// (rule `wake.release.fence`). With `wake`, it
    /// MUST notify exactly one waiter, the one whose registration is the oldest, and
    /// drop that registration (rule `wake.release.one`); `woke` MUST say whether a waiter was
    /// notified: true only when a notification went out (rule `wake.release.reports`).
    /// The notification MUST leave only once the release is in effect (committed, on
    /// a store with transactions): a waiter that peeks as soon as it hears it finds
    /// the claim free (rule `wake.release.committed`). A release that answers `NotOwner`,
    /// and one without `wake`, MUST notify nobody and keep every registration
    /// (rule `wake.release.quiet`).
    async fn release_and_wake(&self, owner: &OwnerId, token: &LeaseToken, wake: bool)
    -> Result<WakeRelease, PortError>;
}

//! Release wake-up for `drain owners` (`PROJECTION_DRAIN_RELEASE_WAKE`): drain-core's
//! `OwnerTurns` and admission driver use the store's `ReleaseWake` by themselves (the
//! driver subscribes, its peeks and the turns' lost races register this process as a
//! waiter, a release wakes one). What stays here is the decision (the switches, and on
//! Redis the rights the wake-up needs, probed first: a user without them runs without
//! it, and a warning says so; on PostgreSQL `grant_sql` grants them with the rest)
//! and counting, for `drain owners`' report. The drain stamps
//! (`PROJECTION_DRAIN_SKIP_SERVED`) are offered the same way: the driver peeks with
//! them, and `Peeks` counts those peeks with the others.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use adapter_redis::RedisStore;
use async_trait::async_trait;
use drain_core::admission::{OwnerId, TurnOutcome};
use drain_core::event::{Event, SkipReason};
use drain_core::ports::{
    Acquire, DrainStamps, Observer, OwnerClaim, OwnerClaims, ReleaseWake, Releases, StampedClaim, Waiter, WakeRelease,
};
use drain_core::{LeaseToken, PortError, Switch};

use crate::compose::Runtime;

/// Admission's peeks through the store, counted (owners and round trips) for the
/// report; it offers the store's wake-up, and with `marks` the store's drain stamps,
/// counting their peeks too.
pub(crate) struct Peeks<S> {
    pub(crate) store: S,
    /// Offer the store's drain stamps (the skip-served switch is not Off).
    marks: bool,
    /// Owners peeked.
    pub(crate) owners: AtomicU64,
    /// Peek round trips (batches).
    pub(crate) batches: AtomicU64,
}

impl<S> Peeks<S> {
    /// Peeks through `store`, offering its drain stamps when `marks`.
    pub(crate) fn new(store: S, marks: bool) -> Self {
        Peeks { store, marks, owners: AtomicU64::new(0), batches: AtomicU64::new(0) }
    }

    fn count(&self, owners: &[OwnerId]) {
        self.owners.fetch_add(owners.len() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl<S: OwnerClaims + ReleaseWake + DrainStamps> OwnerClaims for Peeks<S> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.count(owners);
        self.store.peek_owners(owners).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        Some(self)
    }

    fn drain_stamps(&self) -> Option<&dyn DrainStamps> {
        if self.marks { Some(self) } else { None }
    }
}

#[async_trait]
impl<S: DrainStamps> DrainStamps for Peeks<S> {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        self.count(owners);
        self.store.peek_stamped(owners, waiter).await
    }
    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        self.store.acquire_stamped(owner, token, ttl, waiter).await
    }
    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.store.release_drained(owner, token, drained, wake).await
    }
}

#[async_trait]
impl<S: OwnerClaims + ReleaseWake> ReleaseWake for Peeks<S> {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        self.store.subscribe(instance).await
    }
    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        self.count(owners);
        self.store.peek_and_wait(owners, waiter).await
    }
    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        self.store.acquire_or_wait(owner, token, ttl, waiter).await
    }
    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.store.release_and_wake(owner, token, wake).await
    }
}

/// The app's observer, counting turn outcomes, the driver's release wake-ups and the
/// requests it skipped as served for `drain owners`' report (the wake-ups are not a
/// kept metric).
pub(crate) struct Counted {
    pub(crate) inner: Arc<dyn Observer>,
    pub(crate) wakes: AtomicU64,
    /// Requests a later drain served, skipped (in shadow, that would have been).
    pub(crate) served: AtomicU64,
    /// Turns by outcome: claim-busy, productive, done, failed.
    pub(crate) turns: [AtomicU64; 4],
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn Observer>) -> Self {
        Counted { inner, wakes: AtomicU64::new(0), served: AtomicU64::new(0), turns: Default::default() }
    }

    /// Turns that ended `outcome`'s way (`Productive` counts both kinds).
    pub(crate) fn turns(&self, outcome: TurnOutcome) -> u64 {
        let i = match outcome {
            TurnOutcome::ClaimBusy => 0,
            TurnOutcome::Productive { .. } => 1,
            TurnOutcome::Done => 2,
            TurnOutcome::Failed => 3,
        };
        self.turns[i].load(Ordering::Relaxed)
    }
}

impl Observer for Counted {
    fn observe(&self, event: &Event<'_>) {
        match event {
            Event::ReleaseWake { .. } => {
                self.wakes.fetch_add(1, Ordering::Relaxed);
            }
            Event::OwnerSkipped { reason: SkipReason::Served, .. } => {
                self.served.fetch_add(1, Ordering::Relaxed);
            }
            Event::OwnerTurn { outcome } => {
                let i = match outcome {
                    TurnOutcome::ClaimBusy => 0,
                    TurnOutcome::Productive { .. } => 1,
                    TurnOutcome::Done => 2,
                    TurnOutcome::Failed => 3,
                };
                self.turns[i].fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.inner.observe(event);
    }
}

/// Whether the switches let the release wake-up act: claim-aware On and release
/// wake not Off.
pub(crate) fn switches_allow_wake(rt: &Runtime) -> bool {
    rt.config.claim_aware == Switch::On && rt.config.release_wake != Switch::Off
}

/// Whether the release wake-up may act for this process on Redis: the switches, and
/// a Redis user that may run its commands (a user without them, an ACL from before
/// the wake-up, would fail every turn's claim: run without it, and say so).
pub(crate) async fn wake_allowed(rt: &Runtime, store: &RedisStore) -> bool {
    let c = &rt.config;
    if !switches_allow_wake(rt) {
        return false;
    }
    let probe = format!("drain-owners.{}", c.instance_id);
    let rights = store
        .missing_wake_rights(&rt.keys.owner_waiters(&probe), &rt.keys.wake_channel(&format!("{probe}.probe")))
        .await;
    match rights {
        Ok(missing) if missing.is_empty() => true,
        Ok(missing) => {
            tracing::warn!(
                "release wake-up off: the Redis user may not run {} (docs/operations.md)",
                missing.join(" ")
            );
            false
        }
        Err(e) => {
            tracing::warn!("release wake-up off: its rights could not be checked ({e})");
            false
        }
    }
}

//! Counts of what owner drains did, for a report: the peeks admission made, and
//! how the turns ended. Both forward everything; they only count on the way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::{OwnerId, TurnOutcome};
use drain_core::event::{Event, SkipReason};
use drain_core::ports::{
    Acquire, DrainStamps, Observer, OwnerClaim, OwnerClaims, ReleaseWake, Releases, StampedClaim, Waiter, WakeRelease,
};
use drain_core::{LeaseToken, PortError};

/// Admission's peeks through `store`, counted (owners, round trips). It offers the
/// store's release wake-up, and with `stamps` the store's drain stamps, whose peeks
/// it counts too. Give it to `DriverPorts::claims`; the turns take claims from the
/// store itself.
pub struct CountedPeeks<S> {
    store: S,
    stamps: bool,
    owners: AtomicU64,
    round_trips: AtomicU64,
}

impl<S> CountedPeeks<S> {
    /// Peeks through `store`, offering its drain stamps when `stamps` (the
    /// skip-served switch is not Off).
    pub fn new(store: S, stamps: bool) -> Self {
        CountedPeeks { store, stamps, owners: AtomicU64::new(0), round_trips: AtomicU64::new(0) }
    }

    /// Owners peeked so far.
    pub fn owners(&self) -> u64 {
        self.owners.load(Ordering::Relaxed)
    }

    /// Peek round trips (batches) so far.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn count(&self, owners: &[OwnerId]) {
        self.owners.fetch_add(owners.len() as u64, Ordering::Relaxed);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl<S: OwnerClaims + ReleaseWake + DrainStamps> OwnerClaims for CountedPeeks<S> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.count(owners);
        self.store.peek_owners(owners).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        Some(self)
    }

    fn drain_stamps(&self) -> Option<&dyn DrainStamps> {
        if self.stamps { Some(self) } else { None }
    }
}

#[async_trait]
impl<S: DrainStamps> DrainStamps for CountedPeeks<S> {
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
impl<S: OwnerClaims + ReleaseWake> ReleaseWake for CountedPeeks<S> {
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

/// An observer that counts owner turns by outcome, the release wake-ups the driver
/// acted on and the requests it skipped as served, then passes every event on to
/// `inner` (the wake-ups are no kept metric, so a report counts them here).
pub struct CountedTurns {
    inner: Arc<dyn Observer>,
    wakes: AtomicU64,
    served: AtomicU64,
    /// Turns by outcome, in [`slot`]'s order.
    turns: [AtomicU64; 4],
}

/// Where an outcome is counted (`Productive` counts both kinds).
fn slot(outcome: TurnOutcome) -> usize {
    match outcome {
        TurnOutcome::ClaimBusy => 0,
        TurnOutcome::Productive { .. } => 1,
        TurnOutcome::Done => 2,
        TurnOutcome::Failed => 3,
    }
}

impl CountedTurns {
    /// Count the events on their way to `inner`.
    pub fn new(inner: Arc<dyn Observer>) -> Self {
        CountedTurns { inner, wakes: AtomicU64::new(0), served: AtomicU64::new(0), turns: Default::default() }
    }

    /// Turns that ended `outcome`'s way (`Productive` counts both kinds).
    pub fn turns(&self, outcome: TurnOutcome) -> u64 {
        self.turns[slot(outcome)].load(Ordering::Relaxed)
    }

    /// Turns of every outcome.
    pub fn all_turns(&self) -> u64 {
        self.turns.iter().map(|t| t.load(Ordering::Relaxed)).sum()
    }

    /// Claim waits a release wake-up ended (in shadow, would have ended).
    pub fn release_wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// Requests a later drain had served, skipped (in shadow, would have been).
    pub fn skipped_served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Observer for CountedTurns {
    fn observe(&self, event: &Event<'_>) {
        match event {
            Event::ReleaseWake { .. } => {
                self.wakes.fetch_add(1, Ordering::Relaxed);
            }
            Event::OwnerSkipped { reason: SkipReason::Served, .. } => {
                self.served.fetch_add(1, Ordering::Relaxed);
            }
            Event::OwnerTurn { outcome } => {
                self.turns[slot(*outcome)].fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.inner.observe(event);
    }
}

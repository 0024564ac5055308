//! Counts of what owner drains did, for a report: the peeks admission made, and
//! how the turns ended. Both pass everything on and only count on the way: the
//! peeks as hooks on drain-core's one forwarding layer, the turns as an observer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use drain_core::PortError;
use drain_core::admission::TurnOutcome;
use drain_core::event::{Event, SkipReason};
use drain_core::layer::{Call, Hooks, Run};
use drain_core::ports::{Observer, StoreOffers};

/// Hooks for a [`Forward`](drain_core::layer::Forward) over the store admission
/// peeks: they count its peeks (owners, round trips), those through the release
/// wake-up and the drain stamps included, and hide the drain stamps unless `stamps`.
/// Give the wrapper to `DriverPorts::claims`; the turns take claims from the store
/// itself.
///
/// ```
/// use std::sync::Arc;
///
/// use drain_core::layer::Forward;
/// use drain_core::memory::{ManualClock, MemoryStore};
/// use drain_runtime::CountedPeeks;
///
/// let store = Arc::new(MemoryStore::new(Arc::new(ManualClock::new())));
/// let peeks = Forward::new(store, CountedPeeks::new(true));
/// assert_eq!(peeks.hooks().round_trips(), 0);
/// ```
#[derive(Debug, Default)]
pub struct CountedPeeks {
    stamps: bool,
    owners: AtomicU64,
    round_trips: AtomicU64,
}

impl CountedPeeks {
    /// Counting hooks, offering the store's drain stamps when `stamps` (the
    /// skip-served switch is not Off).
    pub fn new(stamps: bool) -> Self {
        CountedPeeks { stamps, owners: AtomicU64::new(0), round_trips: AtomicU64::new(0) }
    }

    /// Owners peeked so far.
    pub fn owners(&self) -> u64 {
        self.owners.load(Ordering::Relaxed)
    }

    /// Peek round trips (batches) so far.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Hooks for CountedPeeks {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        if let Some(owners) = call.peeked() {
            self.owners.fetch_add(owners.len() as u64, Ordering::Relaxed);
            self.round_trips.fetch_add(1, Ordering::Relaxed);
        }
        run.await
    }

    fn offers(&self, inner: StoreOffers) -> StoreOffers {
        StoreOffers { drain_stamps: inner.drain_stamps && self.stamps, ..inner }
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

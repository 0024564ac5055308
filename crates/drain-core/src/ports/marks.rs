use async_trait::async_trait;

use crate::error::PortError;
use crate::ports::Fence;

/// What a fence mark answered ([`FenceMarks::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceVerdict {
    /// The fence is not below the resource's mark: the write may go ahead, and the
    /// mark is now this fence (it was at most this fence before).
    Accepted,
    /// A larger fence was accepted before: a holder that lost its lease sent this
    /// write, and the resource must refuse it. Nothing was changed.
    Stale {
        /// The resource's mark: the highest fence it accepted.
        mark: u64,
    },
}

impl FenceVerdict {
    /// Whether the write may go ahead.
    #[must_use]
    pub fn is_accepted(self) -> bool {
        self == FenceVerdict::Accepted
    }
}

/// Fence marks: for each resource, the highest fence it accepted, so that a write
/// carrying a lower fence (from a holder that lost its lease while paused, and does
/// not know it yet) is refused.
///
/// A lease alone cannot stop a holder that paused past its time to live: it resumes
/// believing it holds the lease. Every acquire hands out a larger fence than the one
/// before, so a resource that remembers the highest fence it accepted tells the
/// stale holder from the current one. A fence equal to the mark is accepted: the
/// same holder writes many times. Fences count per lease and per store (see
/// [`Fence`]): guard one resource by one lease of one store, or its marks mean
/// nothing (the port cannot check that).
///
/// A resource is any name the embedder chooses (a table, a key, a queue a consumer
/// reads). Implementations: drain-core's `MemoryStore` (feature `memory`) and the
/// adapters, each one round trip per admit. `testkit::contract::fence_marks` checks
/// every rule below; each rule's name follows its sentence.
///
/// ```
/// use std::sync::Arc;
///
/// use drain_core::memory::{ManualClock, MemoryStore, block_on};
/// use drain_core::ports::{Clock, FenceMarks, FenceVerdict};
///
/// let clock = Arc::new(ManualClock::new());
/// let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
/// block_on(&clock, async {
///     assert_eq!(store.admit("orders", 7).await.unwrap(), FenceVerdict::Accepted);
///     assert_eq!(store.admit("orders", 7).await.unwrap(), FenceVerdict::Accepted);
///     // A holder that lost the lease to fence 7 comes back with fence 6.
///     assert_eq!(store.admit("orders", 6).await.unwrap(), FenceVerdict::Stale { mark: 7 });
/// });
/// ```
///
/// # Errors
///
/// MUST answer `Err`, never an answer, when the store cannot answer
/// (rule `fence.error`): an outage must not let a stale write through, nor refuse a
/// current one.
#[async_trait]
pub trait FenceMarks: Send + Sync {
    /// Admit a write carrying `fence` to `resource`: accept it and raise the mark
    /// when the fence is not below the mark, refuse it otherwise.
    ///
    /// A fence not below the resource's mark, an equal one included, MUST answer
    /// `Accepted` and leave the mark at that fence (rule `fence.accepts`). A fence
    /// below the mark MUST answer `Stale` with the mark and change nothing
    /// (rule `fence.stale`). Admits MUST be atomic: of concurrent admits of different
    /// fences to one resource, the largest is accepted, the mark ends at it, and an
    /// admit that starts after a fence was accepted never accepts a lower one
    /// (rule `fence.exclusive`). A mark MUST never expire or go down, however long
    /// the resource stays quiet (rule `fence.keeps`). Every `u64` MUST compare as the
    /// number it is, those above the largest signed 64-bit integer and those a
    /// floating-point number cannot hold included, or be refused with an
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) error when it is wider than the
    /// store keeps, never answered: a store that keeps fences in a signed or
    /// floating-point column refuses a larger fence or accepts a smaller one
    /// (rule `fence.units`). Marks of different resources MUST be independent,
    /// whatever characters the names hold (rule `fence.resources`).
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError>;

    /// [`FenceMarks::admit`] with the fence of a lease the caller holds (a lease
    /// guard's, say), handed over as it is.
    async fn admit_fence(&self, resource: &str, fence: &Fence) -> Result<FenceVerdict, PortError> {
        self.admit(resource, fence.number()).await
    }
}

use async_trait::async_trait;

use crate::error::PortError;
use crate::ports::{Fence, LeaseName, LeaseStore};

/// What a fenced write did ([`FencedWrites::write_fenced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVerdict {
    /// The fence was its lease's current one: the value was written.
    Written,
    /// The fence was not its lease's current one: nothing was written.
    Stale {
        /// The lease's current fence: the one its latest acquire handed out, 0 when
        /// it was never taken.
        current: u64,
    },
}

/// Writes that land only while their fence is the current one of its lease: the
/// fence the lease's latest acquire handed out, whether that holder still holds the
/// lease or not. A holder that paused past its time to live and lost the lease
/// writes nothing once another took it, not even a write it began before.
///
/// Where [`FenceMarks`](crate::ports::FenceMarks) compares a fence with the highest
/// one a resource accepted, this compares it with the lease itself, in the store
/// that holds the lease: the values are kept beside the lease (a row in the lease's
/// database, a key in the lease's shard), named by the lease and a key of the
/// embedder's choosing. Implementations: drain-core's `MemoryStore` (feature
/// `memory`) and the adapters. `testkit::contract::fenced_writes` checks every rule
/// below, over the writes and the lease store they answer with
/// ([`FencedWrites::leases`]); each rule's name follows its sentence.
///
/// # Errors
///
/// Every method answers `Err` when the store cannot answer, never a verdict or a
/// value (rule `write.error`).
#[async_trait]
pub trait FencedWrites: Send + Sync {
    /// The lease store whose fences these writes are checked against: the store
    /// itself when it holds the leases too, or the store a table of values was made
    /// over.
    fn leases(&self) -> &dyn LeaseStore;

    /// Write `value` under `key` of `fence`'s lease if `fence` is the lease's current
    /// fence, in one step.
    ///
    /// A write with the lease's current fence MUST land and answer `Written`, also
    /// after the lease expired or was released while nobody took it since; a later
    /// read answers the value (rule `write.current`). A write with any other fence
    /// (an earlier holder's, a larger one never handed out, one of a lease never
    /// taken) MUST answer `Stale` with the current fence and write nothing
    /// (rule `write.stale`). The check and the write MUST be one step: a write
    /// checked before another holder's acquire never lands after that acquire
    /// answered (rule `write.atomic`).
    async fn write_fenced(&self, fence: &Fence, key: &str, value: &[u8]) -> Result<WriteVerdict, PortError>;

    /// The value last written under `key` of `lease`, `None` when none was.
    ///
    /// MUST answer the value of the last write that answered `Written`, and `None`
    /// for a key never written; keys of different leases, or with different names,
    /// are independent (rule `write.read`).
    async fn read_fenced(&self, lease: &LeaseName, key: &str) -> Result<Option<Vec<u8>>, PortError>;
}

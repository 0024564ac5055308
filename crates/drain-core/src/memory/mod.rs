//! In-memory ports and virtual time (feature `memory`).
//!
//! * [`MemoryStore`]: leases with fences, per-message claims, fence marks,
//!   owner-claim peeks, the release wake-up and drain stamps, with real expiry on any
//!   [`Clock`](crate::ports::Clock).
//! * [`MemorySource`]: a peek-lock queue (and a [`Submitter`](crate::ports::Submitter)
//!   that enqueues).
//! * [`ManualClock`] and [`block_on`]: time that moves only when told to, and an
//!   executor that jumps it to the next deadline whenever everything waits.
//!
//! They serve a single process: the binary's embedded default (no store or broker
//! configured), simulations in virtual time, and tests. They pass the same contract
//! suites as the real adapters (`testkit::contract`), but they are never a stand-in
//! for testing an adapter.

mod clock;
mod drained;
mod executor;
mod source;
pub(crate) mod store;
mod writes;

pub use clock::ManualClock;
pub use executor::block_on;
pub use source::MemorySource;
pub use store::{MemoryStore, StoredClaim};

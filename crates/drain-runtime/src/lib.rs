#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod beat;
mod clock;
mod counted;
mod gate;
mod lazy;
mod lease;
mod owners;
mod purge;
pub mod redact;
mod retry;
mod ticks;

pub use beat::{Beat, BeatConfig, OnReport};
pub use clock::TokioClock;
pub use counted::{CountedPeeks, CountedTurns};
pub use gate::ClaimGate;
pub use lazy::{Connect, LazyStore};
pub use lease::{DROP_RELEASE_WAIT, HeldLease, Taken, take};
pub use owners::owner_passes;
pub use purge::purge_rounds;
pub use retry::retrying;
pub use ticks::Ticks;

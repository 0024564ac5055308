#![doc = include_str!("../README.md")]
//!
//! ## The crate
//!
//! Time is an argument ([`Time`]), randomness an injected [`rand::Rng`], every effect
//! a port in [`ports`]. The ports speak of leases, fences, claims and owners; how a
//! store keeps them is the adapter's business. docs/embedding.md (in the repository) walks through writing
//! an adapter and running the contract suites on it; `examples/` holds three worked
//! examples, run by `cargo test`.
//!
//! ## The public API
//!
//! * Run any work under a lease: [`guard::LeaseGuard`] (its work holds a
//!   [`guard::LeaseHandle`]; it ends as a [`guard::Guarded`], with a [`guard::LeaseStatus`]
//!   and a [`guard::Loss`]). drain-runtime's `take` is the same guard on a task.
//! * Run a tick: [`tick::run_tick`] over [`tick::TickPorts`], configured by
//!   [`tick::TickConfig`], controlled by [`tick::TickControl`], answering a
//!   [`tick::TickReport`] ([`tick::DrainStats`], [`tick::ClaimHealth`]; it serializes
//!   to the JSON line `drain run --once` prints). Across ticks, [`tick::Outage`]
//!   ([`tick::OutagePolicy`], [`tick::OutageVerdict`], [`tick::Step`], [`tick::StaleClaims`],
//!   [`tick::probe_claims`], [`tick::release_stale_claims`]) keeps a process from
//!   receiving while the claim store is down.
//! * Admit owners: [`admission::Scheduler`] (sans-IO, configured by
//!   [`admission::SchedulerConfig`]), or [`admission::drive`] over
//!   [`admission::DriverPorts`] with [`admission::OwnerTurns`] (owner turns that take
//!   their own claim around your work function, answering [`admission::Worked`]) or
//!   your own [`admission::OwnerWork`]. Owners are [`admission::OwnerId`]s.
//! * Check fences where writes land: [`fence::FenceCheck`] ([`fence::FenceDecision`])
//!   over a [`ports::FenceMarks`] store.
//! * Implement a port ([`ports`]): the stores [`ports::LeaseStore`] (leases named by
//!   [`ports::LeaseName`], handing out a [`ports::Fence`]), [`ports::ClaimStore`],
//!   [`ports::OwnerClaims`], [`ports::ReleaseWake`] (optional), [`ports::FenceMarks`];
//!   the queue and the target [`ports::MessageSource`] and [`ports::Submitter`];
//!   [`ports::Clock`]; [`ports::Observer`]. Implement them with [`macro@async_trait`].
//! * Errors: [`PortError`] ([`ErrorKind`], [`Persistence`]).
//! * Decisions as data, for an observer: [`Event`] and its labels in [`event`].
//! * Values: [`Switch`] (off / shadow / on), [`Time`], [`LeaseToken`].
//! * Retries: [`Backoff`], the one jittered exponential back-off.
//! * `memory` (feature): `MemoryStore` (every store port), `StoredClaim`,
//!   `MemorySource`, `ManualClock`, `block_on`.
//! * `testkit` (feature, implies `memory`): the contract suites (`testkit::contract`),
//!   the broken stores they reject (`testkit::broken`), `RecordingObserver`,
//!   `RecordingSubmitter`, `BacklogWork`, `TestRng`, `message`.
//! * Re-exported: [`macro@async_trait`] (the ports are declared with it) and [`rand`]
//!   (its `Rng` and `CryptoRng` appear in the API; with the default `os-rng` feature,
//!   `drain_core::rand::rng()` makes tokens: `LeaseToken::generate("me", &mut
//!   drain_core::rand::rng())`; with another rand, use [`LeaseToken::from_random`]).
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admission;
pub mod backoff;
pub mod error;
pub mod event;
pub mod fence;
pub mod guard;
pub mod layer;
pub mod outcome;
pub mod owner;
pub mod ports;
pub mod switch;
pub mod tick;
pub mod time;
pub mod token;

#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use backoff::Backoff;
pub use error::{ErrorKind, Persistence, PortError};
pub use event::Event;
pub use owner::OwnerId;
pub use switch::Switch;
pub use time::Time;
pub use token::LeaseToken;

/// The `async_trait` attribute the port traits are declared with: implement a port
/// with `#[drain_core::async_trait]`, without depending on the crate yourself.
pub use async_trait::async_trait;
/// The `rand` drain-core is built on (its [`Rng`](rand::Rng) and
/// [`CryptoRng`](rand::CryptoRng) traits appear in its API): use its generators, or
/// pass random bytes to [`LeaseToken::from_random`].
pub use rand;

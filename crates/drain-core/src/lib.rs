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
//! * Run a tick: [`tick::run_tick`] over [`tick::TickPorts`],
//!   configured by [`tick::TickConfig`], answering a [`tick::TickReport`]
//!   ([`guard::LeaseStatus`], [`tick::DrainStats`], [`tick::MISSING_ID_REASON`]).
//! * Admit owners: [`admission::Scheduler`] (sans-IO: [`admission::Action`],
//!   [`admission::PeekResult`], [`admission::TurnOutcome`], [`admission::Entry`],
//!   [`admission::OwnerState`], [`admission::Requested`], [`admission::Woken`],
//!   [`admission::Closed`], [`admission::NotRunning`]) configured by
//!   [`admission::SchedulerConfig`]; or [`admission::drive`] /
//!   [`admission::drive_with_releases`] over [`admission::DriverPorts`] and your
//!   [`admission::OwnerWork`]. Owners are [`OwnerId`]s.
//! * Implement a port ([`ports`]): the stores [`ports::LeaseStore`]
//!   ([`ports::LeaseName`], [`ports::LeaseKind`], [`ports::Acquire`],
//!   [`ports::Release`], [`ports::Renew`], [`ports::Holding`]),
//!   [`ports::ClaimStore`] ([`ports::ClaimState`], [`ports::Settlement`],
//!   [`ports::SettleAction`], [`ports::SettleResult`]), [`ports::OwnerClaims`]
//!   ([`ports::OwnerClaim`]), the optional [`ports::ReleaseWake`]
//!   ([`ports::Waiter`], [`ports::WakeRelease`], [`ports::Releases`]) and
//!   [`ports::FenceMarks`] ([`ports::FenceVerdict`], [`ports::Fence`]); the queue and
//!   the target [`ports::MessageSource`] and [`ports::Submitter`]
//!   ([`ports::Message`], [`ports::MessageId`], [`ports::PropertyValue`],
//!   [`ports::Delivery`], [`ports::DeliveryHandle`], [`ports::Capabilities`],
//!   [`ports::SubmitContext`]); [`ports::Clock`]; [`ports::Observer`] (and
//!   [`ports::NoopObserver`]). Implement them with [`macro@async_trait`].
//! * Check fences where writes land: [`fence::FenceCheck`] ([`fence::FenceDecision`],
//!   [`fence::Refusal`]) refuses the messages of a holder that lost its lease, over
//!   any [`ports::FenceMarks`].
//! * Errors: [`PortError`], [`ErrorKind`], [`Persistence`].
//! * Decisions as data, for an observer: [`Event`] and its labels in [`event`].
//! * Values: [`Switch`] (off / shadow / on), [`Time`], [`LeaseToken`] (and
//!   [`token::holder_of`]); the setting rules in [`settings`].
//! * `memory` (feature): `MemoryStore` (every store port), `StoredClaim`,
//!   `MemorySource`, `ManualClock`, `block_on`.
//! * `testkit` (feature, implies `memory`): the contract suites
//!   (`testkit::contract`: `lease_store`, `claim_store`, `owner_claims`,
//!   `release_wake`, `fence_marks`, `message_source`, with `ContractEnv`, `Outage`, `Checked`,
//!   `Violation`, `Rule`, `Port`), the broken stores (`testkit::broken`:
//!   `BrokenStore`, `Defect`), `RecordingObserver`, `RecordingSubmitter`,
//!   `BacklogWork`, `TestRng`, `message`.
//! * Re-exported: [`macro@async_trait`] (the ports are declared with it) and [`rand`]
//!   (its `Rng` and `CryptoRng` appear in the API; with another version of rand,
//!   use [`LeaseToken::from_random`]).
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admission;
pub mod error;
pub mod event;
pub mod fence;
pub mod guard;
pub mod ports;
pub mod settings;
pub mod switch;
pub mod tick;
pub mod time;
pub mod token;

#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use admission::OwnerId;
pub use error::{ErrorKind, Persistence, PortError};
pub use event::Event;
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

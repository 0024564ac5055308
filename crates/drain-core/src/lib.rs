//! # drain-core
//!
//! The pure domain of drain. It performs no I/O, never reads the clock or the
//! operating system's randomness, spawns nothing and depends on no async runtime:
//! time is an argument ([`Time`]), randomness an injected [`rand::Rng`], and every
//! effect goes through a port trait in [`ports`] that an adapter implements.
//!
//! * [`tick`]: one beat tick — single-flight lease, drain, per-message atomic claim.
//! * [`admission`]: the claim-aware owner admission scheduler, a sans-IO state
//!   machine, and its async driver.
//! * [`ports`]: the traits adapters implement, each with its contract.
//! * [`switch`] and [`settings`]: the switch grammar and every setting's rule.
//! * [`token`]: lease tokens; [`error`]: the errors every port returns; [`event`]:
//!   every decision as data, for the [`ports::Observer`].
//! * `memory` (feature): in-memory ports and virtual time, for a single process
//!   and simulations.
//! * `testkit` (feature): the contract suites, deliberately broken stores, recorders.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admission;
pub mod error;
pub mod event;
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

//! # drain-core
//!
//! The pure domain of drain. It performs no I/O, never reads the clock or the
//! operating system's randomness, spawns nothing and depends on no async runtime:
//! time is an argument ([`Time`]), randomness an injected [`rand::Rng`], and every
//! effect goes through a port trait in [`ports`] that an adapter implements.
//!
//! * [`switch`] and [`settings`]: the switch grammar and every setting's rule (SPEC §3).
//! * [`keys`] and [`token`]: the key layout and lease tokens (SPEC §4, §6).
//! * [`tick`]: one beat tick — single-flight lease, drain, per-message atomic claim.
//! * [`admission`]: the claim-aware owner admission scheduler (SPEC §5), a sans-IO
//!   state machine.
//! * [`event`]: every decision as data, for the [`ports::Observer`].
//! * `testkit` (feature): in-memory ports, a virtual clock and the contract suites.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admission;
pub mod error;
pub mod event;
pub mod keys;
pub mod ports;
pub mod settings;
pub mod switch;
pub mod tick;
pub mod time;
pub mod token;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use error::{ErrorKind, Persistence, PortError};
pub use event::Event;
pub use keys::{KeySpace, LeaseKey};
pub use switch::Switch;
pub use time::Time;
pub use token::LeaseToken;

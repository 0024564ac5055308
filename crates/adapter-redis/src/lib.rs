#![doc = include_str!("../README.md")]
//!
//! ## Ports and keys
//!
//! [`RedisStore`] implements [`LeaseStore`](drain_core::ports::LeaseStore),
//! [`ClaimStore`](drain_core::ports::ClaimStore),
//! [`OwnerClaims`](drain_core::ports::OwnerClaims) and
//! [`ReleaseWake`](drain_core::ports::ReleaseWake),
//! [`DrainStamps`](drain_core::ports::DrainStamps) and
//! [`FenceMarks`](drain_core::ports::FenceMarks); [`RedisStore::fenced_write`]
//! writes an embedder's key only while the writer's fence is not below the key's
//! mark. The key layout is this crate's
//! ([`KeySpace`], the [`keys`] module): every key starts with
//! [`RedisConfig::key_prefix`].
//!
//! ## Round trips
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `acquire` | `EVALSHA acquire` (`SET NX PX` + `INCR fence`) | 1 |
//! | `release` | `EVALSHA release` (compare-and-`DEL`) | 1 |
//! | `renew` | `EVALSHA renew` (compare-and-`PEXPIRE`) | 1 |
//! | `peek` | pipeline `GET` + `PTTL` of the lease, `GET` of its fence | 1 |
//! | `peek_owners` (K owners) | pipeline of K × (`GET` + `PTTL`) | 1 (1 per hash slot on a Cluster, in parallel) |
//! | `claim_batch` | `EVALSHA claims` over the batch's keys | 1 (one queue, one hash slot) |
//! | `settle_batch` | `EVALSHA claims` over the batch's keys | 1 |
//! | `settle_then_claim` | `EVALSHA claims`: one batch's settlements, then the next batch's claims | 1 |
//! | [`RedisStore::fenced_write`] | `EVALSHA fence`: the key's mark checked, the write (`SET`, `SET PX`, `HSET`, `DEL`), the mark raised | 1 |
//! | `admit` ([`FenceMarks`](drain_core::ports::FenceMarks)) | `EVALSHA fence`: the mark checked and raised | 1 |
//!
//! The release wake-up's operations and the drain stamps' are one round trip each too
//! (see the `wake` and `drained` modules' tables). Besides the ports, a few list and hash operations serve an
//! embedder's owner work on the same connection, without ever losing an item:
//! [`RedisStore::take_batch`] moves a batch from an owner's backlog into its
//! in-flight list (or hands back what the list still holds),
//! [`RedisStore::record_batch`] counts it processed and empties the list in the same
//! step; [`RedisStore::list_lengths`], [`RedisStore::push_items`] (`drain owners`
//! uses them); and [`KeyedClaims`] peeks at owner claims under keys of an embedder's
//! own.
//!
//! The scripts (`src/scripts/*.lua`) are loaded with `SCRIPT LOAD` at connect and
//! called by SHA. When a server answers `NOSCRIPT` (restart, `SCRIPT FLUSH`,
//! failover) the same call sends `EVAL` with the source, which also re-caches it.
//!
//! ## Connections
//!
//! Every port operation goes through **one shared multiplexed connection**
//! (redis-rs `ConnectionManager`; the async cluster connection in Cluster mode):
//! concurrent callers pipeline onto it, and nothing is sent besides the operation
//! itself (no `PING`, no `UNWATCH`). [`RedisStore::scan`], exclusive and off the
//! hot path, opens a connection of its own for the call, so that its pages never
//! queue in front of a lease renewal.
//!
//! A connection that broke is replaced by the next call: the caller sees one
//! failed call (a temporary error), never a hang: no reconnect retries run inside
//! a call, so every call is bounded by [`RedisConfig::operation_deadline`] (connect
//! timeout + response timeout, enforced by redis-rs). Two timeouts in a row also
//! replace the connection, which covers half-open TCP connections.
//!
//! ## Errors
//!
//! Driver errors are mapped at the boundary by [`map_error`] to drain-core's kinds:
//!
//! | Redis says | kind | persistence |
//! |---|---|---|
//! | a timeout, our own deadline | `Timeout` | temporary |
//! | refused, reset or broken connections, other I/O errors | `Connection` | temporary |
//! | `LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, `MASTERDOWN`, `OOM` | `Unavailable` | temporary |
//! | `MOVED`/`ASK` (redirect storms) | `Redirected` | temporary |
//! | `NOPERM` | `Permission` | permanent |
//! | `WRONGPASS`, `NOAUTH`, authentication failed | `Auth` | permanent |
//! | `WRONGTYPE`, a fence key that is not a counter | `WrongType` | permanent |
//! | `CROSSSLOT`, `NOSCRIPT` after `EVAL`, a reply drain's scripts never give | `Protocol` | permanent |
//!
//! Messages name the endpoint (`host:port`) and what to check, and never contain the
//! password ([`drain_runtime::redact::redact`]). A lease key without a TTL (written by hand, never by
//! drain) is held until someone deletes it: `Busy` reports [`Duration::MAX`] left.
//!
//! [`Duration::MAX`]: std::time::Duration::MAX
#![forbid(unsafe_code)]

mod claim;
mod config;
mod conn;
mod drained;
mod error;
mod fenced;
pub mod keys;
mod lease;
mod lists;
mod owners;
mod releases;
mod reply;
pub mod rights;
mod scripts;
mod sentinel;
mod store;
mod wake;

pub use config::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEY_PREFIX, DEFAULT_RESPONSE_TIMEOUT, RedisConfig};
pub use error::map_error;
pub use fenced::FencedWrite;
pub use keys::{KeySpace, LeaseKeys};
pub use lists::Batch;
pub use owners::KeyedClaims;
pub use releases::{ReleaseCounters, Releases};
pub use store::{RedisStore, Scanned};

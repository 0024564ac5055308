//! # adapter-redis
//!
//! drain-core's [`LeaseStore`](drain_core::ports::LeaseStore) and
//! [`ClaimStore`](drain_core::ports::ClaimStore) on Redis 6.2+ (standalone or
//! Redis Cluster), exactly as SPEC §4 and §6 describe.
//!
//! ## Round trips
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `acquire` | `EVALSHA acquire` (`SET NX PX` + `INCR fence`) | 1 |
//! | `release` | `EVALSHA release` (compare-and-`DEL`) | 1 |
//! | `renew` | `EVALSHA renew` (compare-and-`PEXPIRE`) | 1 |
//! | `peek` | pipeline `GET` + `PTTL` | 1 |
//! | `peek_many` (K keys) | pipeline of K × (`GET` + `PTTL`) | 1 (1 per hash slot on a Cluster, in parallel) |
//! | `claim_batch` | `EVALSHA claim` over the batch's keys | 1 per hash slot |
//! | `settle_batch` | `EVALSHA settle` over the batch's keys | 1 per hash slot |
//!
//! Besides the ports, a few list and hash operations serve an embedder's owner work
//! on the same connection, without ever losing an item: [`RedisStore::take_batch`]
//! moves a batch from an owner's backlog into its in-flight list (or hands back what
//! the list still holds), [`RedisStore::record_batch`] counts it processed and empties
//! the list in the same step; [`RedisStore::list_lengths`], [`RedisStore::push_items`]
//! (`drain owners` uses them).
//!
//! Release wake-up (issue 7) adds a waiter list per owner, registration inside the
//! claim-held peek and the lost acquire, a release that publishes to one waiter, and a
//! subscriber: [`RedisStore::peek_and_wait`], [`RedisStore::acquire_or_wait`],
//! [`RedisStore::release_and_wake`], [`RedisStore::subscribe_releases`] (one round
//! trip each; see the `wake` module's table).
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
//! itself (no `PING`, no `UNWATCH`). A deadpool-redis pool (bounded by
//! [`RedisConfig::pool_size`]) serves only exclusive, off-hot-path work:
//! [`RedisStore::scan`]. The benchmark `benches/lease_cycle.rs` shows why:
//! checking a connection out of deadpool-redis costs an `UNWATCH` + `PING` round
//! trip per checkout.
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
//! timeouts, refused or broken connections, `LOADING`, `BUSY`, `TRYAGAIN`,
//! `CLUSTERDOWN`, `READONLY`, `MASTERDOWN`, `MOVED`/`ASK` are temporary; `NOPERM`,
//! `WRONGPASS`/`NOAUTH`, `WRONGTYPE` are permanent. Messages name the endpoint
//! (`host:port`) and what to check, and never contain the password
//! ([`redact_url`]).
//!
//! ## Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use adapter_redis::{RedisConfig, RedisStore};
//! use drain_core::ports::{Acquire, LeaseStore, NoopObserver};
//! use drain_core::{KeySpace, LeaseToken};
//!
//! # async fn demo(token: LeaseToken) -> Result<(), drain_core::PortError> {
//! // DRAIN_REDIS_URL and DRAIN_REDIS_CLUSTER, as drain-app's config layer read them.
//! let config = RedisConfig::new("redis://drain:secret@127.0.0.1:6379").cluster(false);
//! let store = RedisStore::connect(config).await?.with_observer(Arc::new(NoopObserver));
//!
//! let keys = KeySpace::new("drain");
//! let lease = keys.lease("requests");
//! match store.acquire(&lease, &token, Duration::from_secs(120)).await? {
//!     Acquire::Acquired { fence } => {
//!         // … drain, passing `fence` downstream …
//!         store.release(&lease, &token).await?;
//!         let _ = fence;
//!     }
//!     Acquire::Held { holder, .. } => println!("skipped: held by {holder}"),
//! }
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

mod claim;
mod config;
mod conn;
mod error;
mod lease;
mod lists;
mod releases;
mod reply;
pub mod rights;
mod scripts;
mod store;
mod wake;

pub use config::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_RESPONSE_TIMEOUT, RedisConfig, redact_url};
pub use error::map_error;
pub use lists::Batch;
pub use releases::{ReleaseCounters, Releases};
pub use store::RedisStore;
pub use wake::{Waiter, WakeRelease};

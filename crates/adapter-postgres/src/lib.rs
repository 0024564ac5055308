#![doc = include_str!("../README.md")]
//!
//! ## Ports and schema
//!
//! [`PostgresStore`] implements [`LeaseStore`](drain_core::ports::LeaseStore),
//! [`ClaimStore`](drain_core::ports::ClaimStore),
//! [`OwnerClaims`](drain_core::ports::OwnerClaims) and
//! [`ReleaseWake`](drain_core::ports::ReleaseWake),
//! [`DrainStamps`](drain_core::ports::DrainStamps) and
//! [`FenceMarks`](drain_core::ports::FenceMarks) over drain's schema
//! (`src/schema_v1.sql` to `src/schema_v6.sql`, version [`SCHEMA_VERSION`]): a table of leases whose rows
//! keep their fence when the lease is released or expires (so fences only grow,
//! across restarts too), a table of claims, a table of waiters, a table of drain stamps, a `schema_version`
//! table, and one plpgsql function per operation. Every row carries
//! [`PostgresConfig::key_prefix`]: tenants sharing a schema keep apart by prefix.
//! Expiry is the server's clock (`clock_timestamp()`), never the client's.
//!
//! ## Round trips
//!
//! Each statement is prepared once per connection; an operation is then one
//! Bind/Execute of one function call:
//!
//! | operation | function | round trips |
//! |---|---|---|
//! | `acquire` | `acquire()` (an upsert that takes a free or expired lease and bumps its fence) | 1 |
//! | `release` | `release()` (compare-and-free) | 1 |
//! | `renew` | `renew()` (compare-and-extend) | 1 |
//! | `peek` | `peek()` | 1 |
//! | `peek_owners` (K owners) | `peek_owners()` over an array | 1 |
//! | `claim_batch` (N ids) | `claim_batch()` over arrays (rows locked in id order: no deadlock) | 1 |
//! | `settle_batch` (N) | `settle_batch()` over arrays | 1 |
//! | `settle_then_claim` | `settle_batch()` and `claim_batch()`, pipelined on one connection | 1 |
//! | `admit` ([`FenceMarks`](drain_core::ports::FenceMarks)) | `admit_fence()` (an upsert that raises the resource's mark unless it is above the fence) | 1 |
//! | [`PostgresStore::check_fence`] | `current_fence()` in your transaction (the lease's row held `FOR SHARE` until it ends) | 1 |
//!
//! Expired claims and lapsed waiter registrations stay as rows (answering as free)
//! until [`PostgresStore::purge_expired`] deletes them, in one call.
//!
//! Operators' tools read on a connection of their own that never creates the
//! schema: [`inspect`] (server, role, schema version, the role's rights on each of
//! drain's functions, for `drain doctor`) and [`list`] (the leases and live claims
//! of a prefix, two calls, for `drain leases`).
//!
//! ## Fences checked where the writes land
//!
//! A lease alone cannot stop a holder that paused past its time to live. Schema
//! version 2 (`src/schema_v2.sql`) checks fences in the database:
//! [`PostgresStore::fenced`] runs your statements in one transaction on a client of
//! yours only while your fence is the lease's current one (the check holds the
//! lease's row, so no new acquire completes before your commit), answering
//! [`Fenced::Stale`] otherwise; [`PostgresStore::check_fence`] is the same check
//! inside a transaction you manage, and `<schema>.fence_is_current(prefix, kind,
//! name, fence)` is it for your own SQL. For a resource that does not live beside
//! drain's lease rows, [`FenceMarks`](drain_core::ports::FenceMarks) keeps its mark
//! (the highest fence accepted) in the `fence_marks` table.
//!
//! The release wake-up's operations are one call each too; a subscription
//! `LISTEN`s on a dedicated connection and listens again after it broke.
//!
//! Schema version 3 (`src/schema_v3.sql`) holds owner backlogs, the work `drain
//! owners` drains: [`PostgresStore::push_backlog`], [`PostgresStore::take_batch`]
//! (a batch moves into flight), [`PostgresStore::record_batch`] (each item counted
//! once as it leaves) and [`PostgresStore::backlog_pending`], one call each.
//!
//! ## Rights
//!
//! The functions are `SECURITY DEFINER` with a fixed `search_path`, and `EXECUTE`
//! is revoked from `PUBLIC`: a role granted only [`grant_sql`] (`USAGE` on the
//! schema, `EXECUTE` on its functions) runs drain and can touch the tables only
//! through them. On first use, [`PostgresStore::connect`] creates the schema when
//! it is missing (under an advisory lock, so racing stores wait for each other);
//! a role that may not gets a `Permission` error naming the right, and
//! [`schema_sql`] is the SQL for an owner to run.
//!
//! ## Connections
//!
//! Operations are spread round robin over [`PostgresConfig::connections`]
//! tokio-postgres clients; each pipelines the calls given to it. No pool: a
//! checkout costs nothing here, and a pool would add a dependency for what a
//! round robin over a few clients does. A connection that broke or timed out is
//! replaced by the next call on its slot: the caller sees one failed call (a
//! temporary error), never a hang; every call is bounded by
//! [`PostgresConfig::operation_deadline`]. The statement of a call that timed out
//! still runs on the old connection's backend, so the next call first ends that
//! backend (`pg_terminate_backend`, waiting for it to go within what is left of the
//! connect timeout; one round trip more, after a timeout only) and fails as a
//! timeout while it cannot: a claim call that timed out never lands after what the
//! caller sends next.
//!
//! ## Errors
//!
//! Driver errors are mapped at the boundary by [`map_error`] (its table). Messages
//! name the endpoint (`host:port`) and what to check, and never contain the
//! password ([`drain_runtime::redact::redact`]).
#![forbid(unsafe_code)]

mod backlogs;
mod claims;
mod config;
mod conn;
mod drained;
mod error;
mod fenced;
mod fenced_table;
mod inspect;
mod orphans;
mod releases;
mod schema;
mod store;
mod wake;

pub use backlogs::BacklogBatch;
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_CONNECTIONS, DEFAULT_KEY_PREFIX, DEFAULT_RESPONSE_TIMEOUT, DEFAULT_SCHEMA,
    PostgresConfig,
};
pub use error::map_error;
pub use fenced::{Fenced, FencedError};
pub use fenced_table::FencedTable;
pub use inspect::{
    Inspection, ListedLease, Listing, PendingClaim, QueueClaims, SchemaState, check_url, functions, inspect, list,
};
pub use releases::ReleaseCounters;
pub use schema::{SCHEMA_VERSION, grant_sql, schema_sql};
pub use store::PostgresStore;

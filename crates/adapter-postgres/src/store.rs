//! [`PostgresStore`]: the connections, the call path every operation takes, and the
//! store ports.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, Holding, LeaseName, LeaseStore, Observer, OwnerClaim, OwnerClaims, Release, Renew};
use drain_core::{Event, LeaseToken, PortError};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::config::PostgresConfig;
use crate::conn::{Conn, Slot, Statements};
use crate::error::{breaks_connection, map_error, protocol, timeout};
use crate::orphans::Orphans;
use crate::releases::ReleaseCounters;
use crate::schema::check_schema;

/// A statement (picked from the prepared ones) and its parameters.
pub(crate) type Query<'a> = (fn(&Statements) -> &tokio_postgres::Statement, &'a [&'a (dyn ToSql + Sync)]);

/// drain-core's store ports on PostgreSQL: [`LeaseStore`], [`ClaimStore`](drain_core::ports::ClaimStore),
/// [`OwnerClaims`] and [`ReleaseWake`](drain_core::ports::ReleaseWake), each
/// operation one round trip: one call of one of drain's functions (the tick's
/// `settle_then_claim`: two, pipelined).
///
/// Cloning is cheap: clones share the connections.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
    observer: Option<Arc<dyn Observer>>,
}

pub(crate) struct Inner {
    pub(crate) config: PostgresConfig,
    pub(crate) endpoint: String,
    slots: Vec<Slot>,
    next: AtomicUsize,
    pub(crate) counters: Arc<ReleaseCounters>,
    /// Backends of connections given up while a call may still run there.
    orphans: Orphans,
}

impl Inner {
    /// `conn` is of no further use (it broke or timed out), and a call may still run
    /// on its backend: the next call on `slot` connects anew, and the next call of
    /// any slot first ends that backend.
    fn give_up(&self, slot: &Slot, conn: &Arc<Conn>) {
        slot.discard(conn);
        self.orphans.add(conn);
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connect (one connection now, the others on first use), check drain's schema
    /// and create it when it is missing and [`PostgresConfig::create_schema`] allows,
    /// and prepare drain's statements.
    ///
    /// # Errors
    /// `Config` for a URL that does not parse, a bad schema name, a missing schema
    /// that may not be created, or a schema of a newer version; `Permission` when
    /// the role may not create the schema or run its functions (the message names
    /// the right; [`schema_sql`](crate::schema_sql) and
    /// [`grant_sql`](crate::grant_sql) are the SQL to run as an owner); `Auth`,
    /// `Connection`, `Timeout` when the server cannot be reached or refuses.
    pub async fn connect(config: PostgresConfig) -> Result<PostgresStore, PortError> {
        check_schema(&config.schema)?;
        let endpoint = config.endpoint();
        let slots = (0..config.connections.max(1)).map(|_| Slot::default()).collect();
        let inner = Arc::new(Inner {
            config,
            endpoint,
            slots,
            next: AtomicUsize::new(0),
            counters: Arc::new(ReleaseCounters::default()),
            orphans: Orphans::default(),
        });
        inner.slots[0].get(&inner.config, true).await?;
        Ok(PostgresStore { inner, observer: None })
    }

    /// The same store reporting one [`Event::StoreOp`] per round trip to `observer`.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The configuration it was connected with.
    #[must_use]
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// What the release wake-up's subscriptions heard and how often they
    /// reconnected.
    #[must_use]
    pub fn release_counters(&self) -> &ReleaseCounters {
        &self.inner.counters
    }

    /// Delete up to `limit` expired claims and up to `limit` lapsed waiter
    /// registrations under this store's prefix, in one call; answers how many rows
    /// went. PostgreSQL keeps expired rows until they are purged (they answer as
    /// free meanwhile); run it now and then. Lease rows are never purged: they keep
    /// the fence.
    ///
    /// # Errors
    /// As every operation: when the server cannot answer.
    pub async fn purge_expired(&self, limit: u32) -> Result<u64, PortError> {
        let op = "purge_expired";
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows = self.call(op, |s| &s.purge_expired, &[&self.prefix(), &limit]).await?;
        let gone = get::<i64>(self, op, one(self, op, &rows)?, 0)?;
        u64::try_from(gone).map_err(|_| self.bad(op, "a negative count"))
    }

    /// Run `stmt` with `params` on the next connection: one round trip, bounded by
    /// the connect timeout (when a connection must be made) plus the response
    /// timeout. A connection that broke or timed out is replaced by the next call,
    /// which first ends its backend (one more round trip, only then: see
    /// `orphans.rs`).
    pub(crate) async fn call(
        &self,
        op: &'static str,
        stmt: fn(&Statements) -> &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, PortError> {
        let [rows] = self.call_pipelined(op, [(stmt, params)]).await;
        rows
    }

    /// Run the statements of `queries` in order on one connection, pipelined: all
    /// are sent before any answer is awaited, so the server runs them one after the
    /// other (each in a transaction of its own) and the whole costs one round trip.
    /// Bounded as [`Self::call`] is, with the response timeout once per statement:
    /// the server gives each its own `statement_timeout`, so two statements held up
    /// by a lock answer after twice that, as two calls would. One answer per
    /// statement: a statement the server refuses does not stop the ones after it; a
    /// broken connection or the response timeout fails them all.
    pub(crate) async fn call_pipelined<const N: usize>(
        &self,
        op: &'static str,
        queries: [Query<'_>; N],
    ) -> [Result<Vec<Row>, PortError>; N] {
        let inner = &self.inner;
        let slot = &inner.slots[inner.next.fetch_add(1, Ordering::Relaxed) % inner.slots.len()];
        // Waiting for another caller's reconnect counts against the connect timeout too.
        let connect = inner.config.connect_timeout;
        let connecting = Instant::now();
        // Until the statements go out below, a failure sent nothing: it ran nothing.
        let conn: Arc<Conn> = match tokio::time::timeout(connect, slot.get(&inner.config, false)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return std::array::from_fn(|_| Err(e.clone().never_sent())),
            Err(_) => return std::array::from_fn(|_| Err(timeout(op, &inner.endpoint, connect).never_sent())),
        };
        // A call that timed out earlier may still run on its old backend: end it first,
        // within what is left of the connect timeout (it readies the connection).
        let left = connect.saturating_sub(connecting.elapsed());
        if let Err((e, give_up)) = inner.orphans.end(&conn, op, &inner.endpoint, left).await {
            if give_up {
                inner.give_up(slot, &conn);
            }
            return std::array::from_fn(|_| Err(e.clone().never_sent()));
        }
        let start = Instant::now();
        let limit = inner.config.response_timeout.saturating_mul(u32::try_from(N).unwrap_or(u32::MAX));
        let sent = queries.map(|(stmt, params)| conn.client.query(stmt(&conn.stmts), params));
        let result = tokio::time::timeout(limit, futures::future::join_all(sent)).await;
        if let Some(observer) = &self.observer {
            observer.observe(&Event::StoreOp { op, duration: start.elapsed() });
        }
        let Ok(answers) = result else {
            // The answers may still come; a fresh connection does not wait behind them.
            inner.give_up(slot, &conn);
            return std::array::from_fn(|_| Err(timeout(op, &inner.endpoint, limit)));
        };
        let mut answers = answers.into_iter();
        std::array::from_fn(|_| match answers.next() {
            Some(Ok(rows)) => Ok(rows),
            Some(Err(e)) => {
                if conn.client.is_closed() || breaks_connection(&e) {
                    inner.give_up(slot, &conn);
                }
                Err(map_error(&e, op, &inner.endpoint))
            }
            None => Err(self.bad(op, "a statement without an answer")),
        })
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.inner.config.key_prefix
    }

    pub(crate) fn bad(&self, op: &str, what: &str) -> PortError {
        protocol(op, &self.inner.endpoint, what)
    }
}

/// Microseconds of `d`, saturated to what a bigint holds.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A remaining time from the server: above zero by construction of drain's
/// functions.
pub(crate) fn remaining(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0).max(1))
}

pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    store: &PostgresStore,
    op: &str,
    row: &'a Row,
    i: usize,
) -> Result<T, PortError> {
    row.try_get(i).map_err(|e| store.bad(op, &format!("column {i} of an unexpected type: {e}")))
}

/// The one row of `rows`.
pub(crate) fn one<'a>(store: &PostgresStore, op: &str, rows: &'a [Row]) -> Result<&'a Row, PortError> {
    match rows {
        [row] => Ok(row),
        _ => Err(store.bad(op, &format!("{} rows where one was expected", rows.len()))),
    }
}

/// An `acquire` / `acquire_or_wait` row: acquired, fence, holder, remaining_us.
pub(crate) fn acquire_answer(store: &PostgresStore, op: &str, row: &Row) -> Result<Acquire, PortError> {
    if get::<bool>(store, op, row, 0)? {
        let fence = get::<i64>(store, op, row, 1)?;
        let fence = u64::try_from(fence).map_err(|_| store.bad(op, "a negative fence"))?;
        Ok(Acquire::Acquired { fence })
    } else {
        let holder =
            get::<Option<String>>(store, op, row, 2)?.ok_or_else(|| store.bad(op, "a held lease without a holder"))?;
        let us =
            get::<Option<i64>>(store, op, row, 3)?.ok_or_else(|| store.bad(op, "a held lease without a time left"))?;
        Ok(Acquire::Busy { holder, remaining: remaining(us) })
    }
}

/// `peek_owners` / `peek_and_wait` rows: ord, holder, remaining_us; one per owner.
pub(crate) fn owner_answers(
    store: &PostgresStore,
    op: &str,
    rows: &[Row],
    n: usize,
) -> Result<Vec<OwnerClaim>, PortError> {
    if rows.len() != n {
        return Err(store.bad(op, &format!("{} rows for {n} owners", rows.len())));
    }
    rows.iter()
        .map(|row| match get::<Option<String>>(store, op, row, 1)? {
            None => Ok(OwnerClaim::Free),
            Some(holder) => {
                let us = get::<Option<i64>>(store, op, row, 2)?
                    .ok_or_else(|| store.bad(op, "a held claim without a time left"))?;
                Ok(OwnerClaim::Busy { holder, remaining: remaining(us) })
            }
        })
        .collect()
}

pub(crate) fn owner_names(owners: &[OwnerId]) -> Vec<&str> {
    owners.iter().map(OwnerId::as_str).collect()
}

#[drain_core::async_trait]
impl LeaseStore for PostgresStore {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        let op = "acquire";
        let (kind, ttl) = (lease.kind().as_str(), micros(ttl));
        let rows = self
            .call(op, |s| &s.acquire, &[&self.prefix(), &kind, &lease.name(), &token.as_str(), &token.holder(), &ttl])
            .await?;
        acquire_answer(self, op, one(self, op, &rows)?)
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        let op = "release";
        let kind = lease.kind().as_str();
        let rows = self.call(op, |s| &s.release, &[&self.prefix(), &kind, &lease.name(), &token.as_str()]).await?;
        Ok(if get::<bool>(self, op, one(self, op, &rows)?, 0)? { Release::Released } else { Release::NotOwner })
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        let op = "renew";
        let (kind, ttl) = (lease.kind().as_str(), micros(ttl));
        let rows = self.call(op, |s| &s.renew, &[&self.prefix(), &kind, &lease.name(), &token.as_str(), &ttl]).await?;
        Ok(if get::<bool>(self, op, one(self, op, &rows)?, 0)? { Renew::Renewed } else { Renew::Lost })
    }

    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        let op = "peek";
        let kind = lease.kind().as_str();
        let rows = self.call(op, |s| &s.peek, &[&self.prefix(), &kind, &lease.name()]).await?;
        let Some(row) = rows.first() else { return Ok(None) };
        let fence = u64::try_from(get::<i64>(self, op, row, 2)?).map_err(|_| self.bad(op, "a negative fence"))?;
        Ok(Some(Holding { holder: get(self, op, row, 0)?, remaining: remaining(get(self, op, row, 1)?), fence }))
    }
}

#[drain_core::async_trait]
impl OwnerClaims for PostgresStore {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        let op = "peek_owners";
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let names = owner_names(owners);
        let rows = self.call(op, |s| &s.peek_owners, &[&self.prefix(), &names]).await?;
        owner_answers(self, op, &rows, owners.len())
    }

    /// The release wake-up of `src/wake.rs`: a waiters table and `NOTIFY`.
    fn release_wake(&self) -> Option<&dyn drain_core::ports::ReleaseWake> {
        Some(self)
    }

    /// The drain stamps of `src/drained.rs`: a table beside the leases.
    fn drain_stamps(&self) -> Option<&dyn drain_core::ports::DrainStamps> {
        Some(self)
    }
}

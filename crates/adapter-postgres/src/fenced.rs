//! Fences checked where the writes land: [`PostgresStore::fenced`] runs an
//! embedder's statements in one transaction only while their fence is the lease's
//! current one, [`PostgresStore::check_fence`] is that check inside a transaction
//! of the embedder's own, and [`FenceMarks`] keeps a mark per resource elsewhere
//! (`src/schema_v2.sql`: `current_fence()`, `fence_is_current()`, `admit_fence()`).

use std::fmt;

use drain_core::ports::{Fence, FenceMarks, FenceVerdict};
use drain_core::{ErrorKind, PortError};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

use crate::conn::connect_client;
use crate::error::map_error;
use crate::store::{PostgresStore, get, one};

/// What [`PostgresStore::fenced`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Fenced<T> {
    /// The fence was current: the work ran and its transaction committed.
    Committed(T),
    /// The fence was not current: a larger one was handed out (the holder lost the
    /// lease), or the lease was never taken with it in this store. The work did not
    /// run and nothing was written.
    Stale {
        /// The lease's current fence (0 when it was never taken).
        current: u64,
    },
}

impl<T> Fenced<T> {
    /// The work's output when it committed; `None` for a stale fence.
    pub fn committed(self) -> Option<T> {
        match self {
            Fenced::Committed(out) => Some(out),
            Fenced::Stale { .. } => None,
        }
    }
}

/// Why [`PostgresStore::fenced`] failed: the store, or the work.
#[derive(Debug)]
pub enum FencedError<E> {
    /// The transaction could not be begun, checked or committed (the work's writes
    /// are rolled back unless the commit's answer was lost).
    Store(PortError),
    /// The work failed; its transaction was rolled back.
    Work(E),
}

impl<E: fmt::Display> fmt::Display for FencedError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FencedError::Store(e) => write!(f, "fenced transaction: {e}"),
            FencedError::Work(e) => write!(f, "fenced transaction's work: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for FencedError<E> {}

/// A fenced transaction whose work ran statements: its failure as a port error (a
/// statement's error mapped as the store's own are), so a turn can answer it with `?`.
impl From<FencedError<tokio_postgres::Error>> for PortError {
    fn from(e: FencedError<tokio_postgres::Error>) -> Self {
        match e {
            FencedError::Store(e) => e,
            FencedError::Work(e) => map_error(&e, "fenced work", "the work's transaction"),
        }
    }
}

impl PostgresStore {
    /// Run `work` in one transaction on `client` only while `fence` is the current
    /// fence of its lease: begin, [`check_fence`](Self::check_fence) (which holds the
    /// lease's row until the transaction ends, so no acquire can hand out a larger
    /// fence meanwhile), then `work`, then commit. A stale fence is answered
    /// `Fenced::Stale` without running `work`; an error of `work` rolls back.
    ///
    /// `client` is a connection of yours to the database that holds drain's schema
    /// (your pool's, or [`connect_client`](Self::connect_client)), its role granted
    /// [`grant_sql`](crate::grant_sql) and the rights `work` needs. "Current" means
    /// that no larger fence has been handed out: a holder whose lease expired, or
    /// who released it, still writes until someone acquires the lease again, and
    /// that is safe, since nobody else wrote under a larger fence. The lease's renew
    /// and release wait for the transaction, as a new acquire does: keep it well
    /// under the lease's time to live.
    ///
    /// ```no_run
    /// # async fn demo(store: adapter_postgres::PostgresStore, fence: drain_core::ports::Fence) -> Result<(), Box<dyn std::error::Error>> {
    /// use adapter_postgres::Fenced;
    ///
    /// let mut client = store.connect_client().await?;
    /// // `fence` is the one the lease guarding this work was taken with.
    /// let done = store
    ///     .fenced(&mut client, &fence, async |tx| {
    ///         tx.execute("UPDATE report SET total = total + 1 WHERE day = current_date", &[]).await
    ///     })
    ///     .await?;
    /// if let Fenced::Stale { current } = done {
    ///     eprintln!("lost the lease: fence {current} was handed out since; nothing written");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`FencedError::Work`] with `work`'s error; [`FencedError::Store`] when the
    /// transaction could not be begun, checked or committed (`Permission` when the
    /// role may not run drain's `current_fence()`).
    pub async fn fenced<T, E, F>(
        &self,
        client: &mut Client,
        fence: &Fence,
        work: F,
    ) -> Result<Fenced<T>, FencedError<E>>
    where
        F: AsyncFnOnce(&Transaction<'_>) -> Result<T, E>,
    {
        let store = |e: &tokio_postgres::Error| FencedError::Store(map_error(e, "fenced", &self.inner.endpoint));
        let tx = client.transaction().await.map_err(|e| store(&e))?;
        if let FenceVerdict::Stale { mark } = self.check_fence(&tx, fence).await.map_err(FencedError::Store)? {
            // Dropping the transaction would roll it back too, without telling us.
            tx.rollback().await.map_err(|e| store(&e))?;
            return Ok(Fenced::Stale { current: mark });
        }
        let out = match work(&tx).await {
            Ok(out) => out,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(FencedError::Work(e));
            }
        };
        tx.commit().await.map_err(|e| store(&e))?;
        Ok(Fenced::Committed(out))
    }

    /// Inside `tx` (your own transaction, before your writes): whether `fence` is
    /// still its lease's current fence, holding the lease's row until `tx` ends so
    /// that the answer stands until you commit. `Stale { mark }` carries the lease's
    /// current fence (0 when never taken here; below yours when your fence came from
    /// another store). One round trip: `SELECT <schema>.current_fence(…)`; SQL of
    /// your own can call `<schema>.fence_is_current(prefix, kind, name, fence)`.
    ///
    /// # Errors
    /// The mapped error of the call (`Permission` without `EXECUTE` on
    /// `current_fence()`); `Config` for a fence above what a `bigint` holds.
    pub async fn check_fence(&self, tx: &Transaction<'_>, fence: &Fence) -> Result<FenceVerdict, PortError> {
        let op = "check_fence";
        let number = self.bigint(op, fence.number())?;
        let (kind, name) = (fence.lease().kind().as_str(), fence.lease().name());
        let sql = format!("SELECT {}.current_fence($1, $2, $3)", self.inner.config.schema);
        let rows = tx
            .query_typed(&sql, &[(&self.prefix(), Type::TEXT), (&kind, Type::TEXT), (&name, Type::TEXT)])
            .await
            .map_err(|e| map_error(&e, op, &self.inner.endpoint))?;
        let current = get::<Option<i64>>(self, op, one(self, op, &rows)?, 0)?.unwrap_or(0);
        if current == number && current > 0 {
            Ok(FenceVerdict::Accepted)
        } else {
            Ok(FenceVerdict::Stale { mark: u64::try_from(current).map_err(|_| self.bad(op, "a negative fence"))? })
        }
    }

    /// A new connection of its own to the store's database, with the store's URL
    /// and connect timeout, for [`fenced`](Self::fenced) (one transaction at a time
    /// on it); it closes when dropped.
    ///
    /// # Errors
    /// As [`PostgresStore::connect`] when the server cannot be reached or refuses.
    pub async fn connect_client(&self) -> Result<Client, PortError> {
        let (client, _task) = connect_client(&self.inner.config).await?;
        Ok(client)
    }

    fn bigint(&self, op: &str, fence: u64) -> Result<i64, PortError> {
        i64::try_from(fence).map_err(|_| {
            PortError::new(ErrorKind::Config, format!("{op}: fence {fence} is above what PostgreSQL keeps (a bigint)"))
        })
    }
}

/// Marks in drain's `fence_marks` table: one call of `admit_fence()` (an upsert
/// that raises the mark only when it is not above the fence).
#[drain_core::async_trait]
impl FenceMarks for PostgresStore {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        let op = "admit";
        let number = self.bigint(op, fence)?;
        let rows = self.call(op, |s| &s.admit_fence, &[&self.prefix(), &resource, &number]).await?;
        let row = one(self, op, &rows)?;
        if get::<bool>(self, op, row, 0)? {
            return Ok(FenceVerdict::Accepted);
        }
        let mark = get::<i64>(self, op, row, 1)?;
        Ok(FenceVerdict::Stale { mark: u64::try_from(mark).map_err(|_| self.bad(op, "a negative mark"))? })
    }
}

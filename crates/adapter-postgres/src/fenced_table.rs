//! [`FencedWrites`] on a table of the embedder's, written through
//! [`PostgresStore::fenced`]: a value lands only in a transaction that found its
//! fence current, holding the lease's row until it commits.

use drain_core::ports::{Fence, FencedWrites, LeaseName, LeaseStore, WriteVerdict};
use drain_core::{ErrorKind, PortError};
use tokio::sync::Mutex;
use tokio_postgres::Client;

use crate::error::map_error;
use crate::fenced::{Fenced, FencedError};
use crate::store::PostgresStore;

/// Values beside their leases in `table` (columns `kind`, `name`, `key`, `value`),
/// in the database that holds drain's schema, on one connection of its own: each
/// write is one [`PostgresStore::fenced`] transaction, each call bounded by the
/// store's operation deadline (after one that timed out, the next call connects
/// again).
pub struct FencedTable {
    store: PostgresStore,
    client: Mutex<Option<Client>>,
    table: String,
}

impl FencedTable {
    /// Values in `table` (a plain identifier: letters, digits and `_`), created if
    /// missing, written through `store`.
    ///
    /// # Errors
    /// `Config` for a table name that is not a plain identifier; as
    /// [`PostgresStore::connect_client`] when the server cannot be reached.
    pub async fn create(store: PostgresStore, table: &str) -> Result<FencedTable, PortError> {
        let plain = !table.is_empty() && table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain || table.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(PortError::new(ErrorKind::Config, format!("{table:?} is not a plain table name")));
        }
        let fenced = FencedTable { store, client: Mutex::new(None), table: table.to_owned() };
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {table} (kind text NOT NULL, name text NOT NULL, key text NOT NULL, \
             value bytea NOT NULL, PRIMARY KEY (kind, name, key))"
        );
        fenced.bounded("create", async |c: &mut Client| c.batch_execute(&sql).await.map_err(FencedError::Work)).await?;
        Ok(fenced)
    }

    /// `f` on the connection (made first when there is none), within the store's
    /// operation deadline; a connection whose call timed out is dropped.
    async fn bounded<T>(
        &self,
        op: &str,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, FencedError<tokio_postgres::Error>>,
    ) -> Result<T, PortError> {
        let deadline = self.store.config().operation_deadline();
        let mut slot = self.client.lock().await;
        let run = async {
            if slot.is_none() {
                *slot = Some(self.store.connect_client().await.map_err(FencedError::Store)?);
            }
            let client = slot.as_mut().ok_or_else(|| FencedError::Store(PortError::new(ErrorKind::Closed, op)))?;
            f(client).await
        };
        match tokio::time::timeout(deadline, run).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(FencedError::Store(e))) => Err(e),
            Ok(Err(FencedError::Work(e))) => Err(map_error(&e, op, &self.table)),
            Err(_) => {
                *slot = None;
                Err(PortError::new(
                    ErrorKind::Timeout,
                    format!("{op} on {}: no answer within {deadline:?}", self.table),
                ))
            }
        }
    }
}

#[drain_core::async_trait]
impl FencedWrites for FencedTable {
    fn leases(&self) -> &dyn LeaseStore {
        &self.store
    }

    async fn write_fenced(&self, fence: &Fence, key: &str, value: &[u8]) -> Result<WriteVerdict, PortError> {
        let (kind, name) = (fence.lease().kind().as_str(), fence.lease().name());
        let sql = format!(
            "INSERT INTO {} (kind, name, key, value) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (kind, name, key) DO UPDATE SET value = excluded.value",
            self.table
        );
        let store = &self.store;
        let done = self
            .bounded("write_fenced", async |c: &mut Client| {
                store.fenced(c, fence, async |tx| tx.execute(&sql, &[&kind, &name, &key, &value]).await).await
            })
            .await?;
        Ok(match done {
            Fenced::Committed(_) => WriteVerdict::Written,
            Fenced::Stale { current } => WriteVerdict::Stale { current },
        })
    }

    async fn read_fenced(&self, lease: &LeaseName, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        let (kind, name) = (lease.kind().as_str(), lease.name());
        let sql = format!("SELECT value FROM {} WHERE kind = $1 AND name = $2 AND key = $3", self.table);
        let rows = self
            .bounded("read_fenced", async |c: &mut Client| {
                c.query(&sql, &[&kind, &name, &key]).await.map_err(FencedError::Work)
            })
            .await?;
        Ok(rows.first().map(|r| r.get::<_, Vec<u8>>(0)))
    }
}

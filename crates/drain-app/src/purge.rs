//! PostgreSQL keeps expired claims and lapsed waiter registrations as rows (Redis
//! expires its keys by itself): `drain run` deletes them at start and every
//! [`EVERY`] after, [`LIMIT`] rows a call, in calls until fewer come back. Every
//! process of a fleet does; a row two of them race for goes once. Lease rows stay:
//! they keep the fence.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use adapter_postgres::PostgresStore;
use drain_runtime::LazyStore;

/// Time between two purges.
pub(crate) const EVERY: Duration = Duration::from_secs(300);

/// Rows one call deletes at most (of claims, and of waiter registrations).
pub(crate) const LIMIT: u32 = 10_000;

/// Purge until `stop` turns true. A failure is logged and waits for the next round.
pub(crate) async fn run(store: Arc<LazyStore<PostgresStore>>, mut stop: watch::Receiver<bool>) {
    loop {
        if let Ok(s) = store.store().await {
            let mut gone = 0u64;
            loop {
                match s.purge_expired(LIMIT).await {
                    Ok(n) => {
                        gone += n;
                        if n < u64::from(LIMIT) {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!("purging expired claims failed ({e}); retrying in {} s", EVERY.as_secs());
                        break;
                    }
                }
            }
            tracing::debug!(rows = gone, "purged expired claims and waiter registrations");
        }
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

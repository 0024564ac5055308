//! Rounds of purging what a store keeps after it expired.

use std::future::Future;
use std::time::Duration;

use drain_core::PortError;

/// Purge now and every `every` after, for as long as the future is polled (spawn it
/// and abort the task, or drop it, to stop). A round calls `purge(limit)`, which
/// deletes at most `limit` expired rows and answers how many it deleted, again and
/// again until fewer than `limit` come back, so one round empties a backlog of any
/// size without one long statement. A failed call is logged and ends the round; the
/// next round tries again.
///
/// For a store that keeps expired records until someone deletes them (on
/// PostgreSQL, `PostgresStore::purge_expired`: claims and lapsed waiter
/// registrations; lease rows stay, they keep the fence). Every process of a fleet
/// may run it: a row two of them race for goes once.
///
/// ```
/// # async fn demo() {
/// use std::time::Duration;
///
/// let rounds = drain_runtime::purge_rounds(Duration::from_secs(300), 10_000, |limit| async move {
///     // store.purge_expired(limit).await
///     Ok(u64::from(limit) / 2)
/// });
/// let purging = tokio::spawn(rounds);
/// // ... at shutdown:
/// purging.abort();
/// # }
/// ```
pub async fn purge_rounds<F, Fut>(every: Duration, limit: u32, mut purge: F)
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<u64, PortError>>,
{
    loop {
        let mut gone = 0u64;
        loop {
            match purge(limit).await {
                Ok(n) => {
                    gone = gone.saturating_add(n);
                    if n < u64::from(limit) {
                        tracing::debug!(rows = gone, "purged expired records");
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!("purging expired records failed ({e}); retrying in {} s", every.as_secs());
                    break;
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

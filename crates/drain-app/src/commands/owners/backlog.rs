//! The owner backlogs `drain owners` drains, behind one small port so that the
//! command's logic (`drains`) is the same on every store: Redis keeps them in lists
//! (`keys`), PostgreSQL in a table of drain's schema (adapter-postgres'
//! `schema_v3.sql`). Both move a batch into flight before a turn works it and count
//! each item once as it leaves, so a turn that dies leaves its batch for the next.

use adapter_postgres::PostgresStore;
use adapter_redis::RedisStore;
use async_trait::async_trait;
use drain_core::PortError;
use drain_core::admission::OwnerId;

use super::keys::OwnerKeys;

/// An owner's batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    /// The items, oldest first.
    pub(crate) items: Vec<String>,
    /// They were in flight already: a turn that failed or died took them and did not
    /// record them.
    pub(crate) recovered: bool,
}

/// Owner backlogs in a store.
#[async_trait]
pub(crate) trait Backlogs: Send + Sync {
    /// Append `items[i]` to the backlog of `owners[i]` (the two have one length).
    async fn push(&self, owners: &[OwnerId], items: &[String]) -> Result<(), PortError>;

    /// `owner`'s next batch: the one in flight when there is one (`recovered`),
    /// otherwise up to `count` items of its backlog, now in flight.
    async fn take_batch(&self, owner: &OwnerId, count: usize) -> Result<Batch, PortError>;

    /// Record `items` of `owner`'s batch: each still in flight is counted once and
    /// leaves, in one step; answers how many were recorded.
    async fn record_batch(&self, owner: &OwnerId, items: &[String]) -> Result<u64, PortError>;

    /// Whether each of `owners` still holds items (waiting or in flight), in order.
    async fn pending(&self, owners: &[OwnerId]) -> Result<Vec<bool>, PortError>;
}

/// The backlogs as Redis lists (`keys`), one script per take or record.
pub(crate) struct RedisBacklogs {
    pub(crate) store: RedisStore,
    pub(crate) keys: OwnerKeys,
}

#[async_trait]
impl Backlogs for RedisBacklogs {
    async fn push(&self, owners: &[OwnerId], items: &[String]) -> Result<(), PortError> {
        // One list per owner, in the order owners first appear.
        let mut lists: Vec<(String, Vec<String>)> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for (owner, item) in owners.iter().zip(items) {
            let i = *index.entry(owner.as_str()).or_insert_with(|| {
                lists.push((self.keys.backlog(owner.as_str()), Vec::new()));
                lists.len() - 1
            });
            lists[i].1.push(item.clone());
        }
        self.store.push_items(&lists).await
    }

    async fn take_batch(&self, owner: &OwnerId, count: usize) -> Result<Batch, PortError> {
        let (backlog, in_flight) = (self.keys.backlog(owner.as_str()), self.keys.in_flight(owner.as_str()));
        let b = self.store.take_batch(&backlog, &in_flight, count).await?;
        Ok(Batch { items: b.items, recovered: b.recovered })
    }

    async fn record_batch(&self, owner: &OwnerId, items: &[String]) -> Result<u64, PortError> {
        let (in_flight, processed) = (self.keys.in_flight(owner.as_str()), self.keys.processed(owner.as_str()));
        self.store.record_batch(&in_flight, &processed, items).await
    }

    async fn pending(&self, owners: &[OwnerId]) -> Result<Vec<bool>, PortError> {
        let lists: Vec<String> =
            owners.iter().flat_map(|o| [self.keys.backlog(o.as_str()), self.keys.in_flight(o.as_str())]).collect();
        let lengths = self.store.list_lengths(&lists).await?;
        Ok(lengths.chunks(2).map(|n| n.iter().any(|&n| n > 0)).collect())
    }
}

/// The backlogs in drain's schema on PostgreSQL, one function call each.
#[async_trait]
impl Backlogs for PostgresStore {
    async fn push(&self, owners: &[OwnerId], items: &[String]) -> Result<(), PortError> {
        let owners: Vec<&str> = owners.iter().map(OwnerId::as_str).collect();
        let items: Vec<&str> = items.iter().map(String::as_str).collect();
        self.push_backlog(&owners, &items).await.map(|_| ())
    }

    async fn take_batch(&self, owner: &OwnerId, count: usize) -> Result<Batch, PortError> {
        let b = PostgresStore::take_batch(self, owner, count).await?;
        Ok(Batch { items: b.items, recovered: b.recovered })
    }

    async fn record_batch(&self, owner: &OwnerId, items: &[String]) -> Result<u64, PortError> {
        PostgresStore::record_batch(self, owner, items).await
    }

    async fn pending(&self, owners: &[OwnerId]) -> Result<Vec<bool>, PortError> {
        self.backlog_pending(owners).await
    }
}

/// Push `items` items (`item-0` …) round-robin onto the backlogs of `owners` owners,
/// in one call.
pub(crate) async fn seed(backlogs: &dyn Backlogs, owners: usize, items: u64) -> Result<(), PortError> {
    let owners = owners.max(1);
    let (mut names, mut values) = (Vec::new(), Vec::new());
    for n in 0..items {
        names.push(OwnerKeys::owner(usize::try_from(n).unwrap_or(usize::MAX) % owners));
        values.push(format!("item-{n}"));
    }
    backlogs.push(&names, &values).await
}

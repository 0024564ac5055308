//! Owner backlogs (schema version 3, `src/schema_v3.sql`): the items `drain owners`
//! drains, one call each, as Redis' lists and scripts hold them there.
//!
//! | operation | function | round trips |
//! |---|---|---|
//! | [`PostgresStore::push_backlog`] | `push_backlog()` over two arrays | 1 |
//! | [`PostgresStore::take_batch`] | `take_batch()` | 1 |
//! | [`PostgresStore::record_batch`] | `record_batch()` | 1 |
//! | [`PostgresStore::backlog_pending`] (K owners) | `backlog_pending()` over an array | 1 |

use drain_core::PortError;
use drain_core::admission::OwnerId;

use crate::store::{PostgresStore, get, one, owner_names};

/// An owner's batch, as [`PostgresStore::take_batch`] answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BacklogBatch {
    /// The items, oldest first.
    pub items: Vec<String>,
    /// They were already in flight: a turn that failed or died took them before and
    /// did not record them.
    pub recovered: bool,
}

impl PostgresStore {
    /// Append `items[i]` to the backlog of `owners[i]`, in order (one call seeds
    /// every owner); answers how many items were added.
    ///
    /// # Errors
    /// `Config` when the two slices differ in length; as every operation otherwise.
    pub async fn push_backlog(&self, owners: &[&str], items: &[&str]) -> Result<u64, PortError> {
        let op = "push_backlog";
        if owners.is_empty() && items.is_empty() {
            return Ok(0);
        }
        let rows = self.call(op, |s| &s.push_backlog, &[&self.prefix(), &owners, &items]).await?;
        let n = get::<i64>(self, op, one(self, op, &rows)?, 0)?;
        u64::try_from(n).map_err(|_| self.bad(op, "a negative count"))
    }

    /// `owner`'s next batch: the items in flight when there are any (`recovered`),
    /// otherwise up to `count` items of its backlog, oldest first, now in flight.
    /// Nothing leaves the backlog without being in flight.
    ///
    /// # Errors
    /// As every operation: when the server cannot answer.
    pub async fn take_batch(&self, owner: &OwnerId, count: usize) -> Result<BacklogBatch, PortError> {
        let op = "take_batch";
        if count == 0 {
            return Ok(BacklogBatch::default());
        }
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        let rows = self.call(op, |s| &s.take_batch, &[&self.prefix(), &owner.as_str(), &count]).await?;
        let row = one(self, op, &rows)?;
        Ok(BacklogBatch {
            recovered: get(self, op, row, 0)?,
            items: get::<Option<Vec<String>>>(self, op, row, 1)?.unwrap_or_default(),
        })
    }

    /// Record `items` of `owner`'s batch as processed: each still in flight leaves
    /// the backlog and is counted once (table `backlog_processed`) in the same
    /// statement; one no longer in flight (another turn took the batch over and
    /// recorded it) is not counted again. Answers how many were recorded.
    ///
    /// # Errors
    /// As every operation: when the server cannot answer.
    pub async fn record_batch(&self, owner: &OwnerId, items: &[String]) -> Result<u64, PortError> {
        let op = "record_batch";
        if items.is_empty() {
            return Ok(0);
        }
        let rows = self.call(op, |s| &s.record_batch, &[&self.prefix(), &owner.as_str(), &items]).await?;
        let n = get::<i64>(self, op, one(self, op, &rows)?, 0)?;
        u64::try_from(n).map_err(|_| self.bad(op, "a negative count"))
    }

    /// Whether each of `owners` still holds items (waiting or in flight), in the
    /// order of `owners`.
    ///
    /// # Errors
    /// As every operation: when the server cannot answer.
    pub async fn backlog_pending(&self, owners: &[OwnerId]) -> Result<Vec<bool>, PortError> {
        let op = "backlog_pending";
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let names = owner_names(owners);
        let rows = self.call(op, |s| &s.backlog_pending, &[&self.prefix(), &names]).await?;
        if rows.len() != owners.len() {
            return Err(self.bad(op, &format!("{} rows for {} owners", rows.len(), owners.len())));
        }
        rows.iter().map(|row| get::<bool>(self, op, row, 1)).collect()
    }
}

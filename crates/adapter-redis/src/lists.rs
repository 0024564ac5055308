//! Plain list and hash operations for an embedder's owner work, on the store's
//! connection: owner backlogs as Redis lists (`drain owners` pops them in
//! batches), and a processed-items hash that proves each item ran once.
//!
//! They are not drain-core ports: drain-core never sees owner items. They live
//! here so an embedder reuses the store's one multiplexed connection, its error
//! mapping, its round-trip accounting and its Cluster routing, and so drain-app
//! stays free of a direct `redis` dependency.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | [`RedisStore::pop_batch`] | `LPOP key count` | 1 |
//! | [`RedisStore::mark_processed`] (N items) | pipeline of N × `HINCRBY` | 1 |
//! | [`RedisStore::list_lengths`] (K keys) | pipeline of K × `LLEN` | 1 (1 per hash slot on a Cluster, in parallel) |
//! | [`RedisStore::push_items`] (K keys) | pipeline of K × `RPUSH` | 1 (1 per hash slot on a Cluster, in parallel) |

use drain_core::PortError;
use futures::future::try_join_all;
use redis::Value;

use crate::error::shape_error;
use crate::store::RedisStore;

impl RedisStore {
    /// Pop up to `count` items from the head of the list `key`, in one `LPOP key
    /// count` round trip (Redis 6.2+). An empty or missing list gives no items.
    ///
    /// # Errors
    /// The mapped error of the round trip, or `Shape` for a reply that is not a list
    /// of strings (e.g. `key` holds another type: `WRONGTYPE` is permanent).
    pub async fn pop_batch(&self, key: &str, count: usize) -> Result<Vec<String>, PortError> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("LPOP");
        cmd.arg(key).arg(count);
        match self.query("pop_batch", &cmd).await? {
            Value::Nil => Ok(Vec::new()),
            v => redis::from_redis_value(v)
                .map_err(|_| shape_error("pop_batch", self.endpoint(), "an LPOP reply that is not a list of strings")),
        }
    }

    /// Count each of `items` once more in the hash `key` (`HINCRBY key item 1` per
    /// item, one pipeline, one round trip), so a reader can prove every item was
    /// processed exactly once: every field equals 1.
    ///
    /// # Errors
    /// The mapped error of the round trip.
    pub async fn mark_processed(&self, key: &str, items: &[String]) -> Result<(), PortError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for item in items {
            pipe.cmd("HINCRBY").arg(key).arg(item).arg(1).ignore();
        }
        self.pipeline("mark_processed", &pipe).await?;
        Ok(())
    }

    /// The length of each list in `keys` (`LLEN`, missing keys are 0), in order; one
    /// pipelined round trip (one per hash slot on a Cluster, in parallel).
    ///
    /// # Errors
    /// The mapped error of the first failed round trip, or `Shape` for a reply of
    /// the wrong length or type.
    pub async fn list_lengths(&self, keys: &[String]) -> Result<Vec<u64>, PortError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.groups(keys.iter().map(String::as_str));
        let replies = try_join_all(groups.iter().map(|group| async move {
            let mut pipe = redis::pipe();
            for &i in group {
                pipe.cmd("LLEN").arg(keys[i].as_str());
            }
            let values = self.pipeline("list_lengths", &pipe).await?;
            if values.len() != group.len() {
                return Err(shape_error("list_lengths", self.endpoint(), "a pipeline reply of the wrong length"));
            }
            Ok(values)
        }))
        .await?;
        let mut out = vec![0; keys.len()];
        for (group, values) in groups.iter().zip(replies) {
            for (&i, v) in group.iter().zip(values) {
                out[i] = redis::from_redis_value(v)
                    .map_err(|_| shape_error("list_lengths", self.endpoint(), "an LLEN reply that is not a count"))?;
            }
        }
        Ok(out)
    }

    /// Append `items` to the tail of each list (`RPUSH key item…` per non-empty
    /// entry), one pipelined round trip (one per hash slot on a Cluster).
    ///
    /// # Errors
    /// The mapped error of the first failed round trip.
    pub async fn push_items(&self, lists: &[(String, Vec<String>)]) -> Result<(), PortError> {
        let lists: Vec<&(String, Vec<String>)> = lists.iter().filter(|(_, items)| !items.is_empty()).collect();
        if lists.is_empty() {
            return Ok(());
        }
        let groups = self.groups(lists.iter().map(|(k, _)| k.as_str()));
        try_join_all(groups.iter().map(|group| {
            let lists = &lists;
            async move {
                let mut pipe = redis::pipe();
                for &i in group {
                    let (key, items) = lists[i];
                    pipe.cmd("RPUSH").arg(key.as_str()).arg(items.as_slice()).ignore();
                }
                self.pipeline("push_items", &pipe).await
            }
        }))
        .await?;
        Ok(())
    }
}

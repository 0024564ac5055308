//! List and hash operations for an embedder's owner work, on the store's
//! connection: owner backlogs as Redis lists that `drain owners` drains in batches
//! without ever losing an item, and a processed-items hash that proves each item
//! was recorded once.
//!
//! A batch leaves an owner's backlog only into the owner's in-flight list, in one
//! script ([`RedisStore::take_batch`]), and leaves the in-flight list only counted
//! in the processed hash, in one script ([`RedisStore::record_batch`]). A turn that
//! fails, or a process that dies, between the two leaves the batch in the in-flight
//! list, and the owner's next turn (in any process) takes that batch again before
//! anything new. The three keys of an owner share its hash slot.
//!
//! They are not drain-core ports: drain-core never sees owner items. They live
//! here so an embedder reuses the store's one multiplexed connection, its error
//! mapping, its round-trip accounting and its Cluster routing, and so drain-app
//! stays free of a direct `redis` dependency.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | [`RedisStore::take_batch`] | `EVALSHA take_batch` (`LRANGE`, `RPUSH`, `LTRIM`) | 1 |
//! | [`RedisStore::record_batch`] (N items) | `EVALSHA record_batch` (`LRANGE`, N × `HINCRBY`, `DEL`) | 1 |
//! | [`RedisStore::list_lengths`] (K keys) | pipeline of K × `LLEN` | 1 (1 per hash slot on a Cluster, in parallel) |
//! | [`RedisStore::push_items`] (K keys) | pipeline of K × `RPUSH` | 1 (1 per hash slot on a Cluster, in parallel) |

use drain_core::PortError;
use futures::future::try_join_all;
use redis::Value;

use crate::error::shape_error;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// An owner's batch from [`RedisStore::take_batch`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The items, in order.
    pub items: Vec<String>,
    /// They were already in the owner's in-flight list: a turn that failed or died
    /// took them before and did not record them.
    pub recovered: bool,
}

impl RedisStore {
    /// An owner's next batch, in one script (one round trip; `backlog` and
    /// `in_flight` must share a hash slot): the items of the `in_flight` list when it
    /// holds any (a turn that failed or died before recording them), with
    /// `recovered` set; otherwise up to `count` items moved from the head of
    /// `backlog` to `in_flight`. An item never leaves the backlog without being in
    /// the in-flight list: it is copied before it is trimmed, and on Redis 7 the
    /// script checks its rights before it changes anything.
    ///
    /// # Errors
    /// The mapped error of the round trip (a missing right is `Permission`, a key of
    /// another type `WrongType`), or `Shape` for a reply of another form.
    pub async fn take_batch(&self, backlog: &str, in_flight: &str, count: usize) -> Result<Batch, PortError> {
        if count == 0 {
            return Ok(Batch::default());
        }
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(count);
        };
        let value = self.eval("take_batch", &SCRIPTS.take_batch, &[backlog, in_flight], args).await?;
        let shape = || shape_error("take_batch", self.endpoint(), "a take_batch reply that is not [flag, items...]");
        let Value::Array(mut parts) = value else { return Err(shape()) };
        if parts.is_empty() {
            return Err(shape());
        }
        let recovered = matches!(parts.remove(0), Value::Int(1));
        let items =
            parts.into_iter().map(redis::from_redis_value::<String>).collect::<Result<_, _>>().map_err(|_| shape())?;
        Ok(Batch { items, recovered })
    }

    /// Record `items` as processed, in one script (one round trip; `in_flight` and
    /// `processed` must share a hash slot): each item still in `in_flight` is
    /// counted once more in the hash `processed` (`HINCRBY processed item 1`) and
    /// leaves the list in the same step; an item no longer there (another holder
    /// took the batch over after this turn's claim expired, and recorded it) is not
    /// counted again. Returns how many were recorded. A reader proves every item was
    /// recorded exactly once: every field of the hash equals 1.
    ///
    /// # Errors
    /// The mapped error of the round trip; the items then stay in `in_flight`.
    pub async fn record_batch(&self, in_flight: &str, processed: &str, items: &[String]) -> Result<u64, PortError> {
        if items.is_empty() {
            return Ok(0);
        }
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(items);
        };
        let value = self.eval("record_batch", &SCRIPTS.record_batch, &[in_flight, processed], args).await?;
        redis::from_redis_value(value)
            .map_err(|_| shape_error("record_batch", self.endpoint(), "a record_batch reply that is not a count"))
    }

    /// Delete `keys` (`DEL`, one round trip; on a Cluster they must share a slot).
    /// For a caller's own probe keys, such as `drain doctor`'s. Returns how many
    /// existed.
    ///
    /// # Errors
    /// The mapped error of the round trip.
    pub async fn delete_keys(&self, keys: &[&str]) -> Result<u64, PortError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("DEL");
        cmd.arg(keys);
        redis::from_redis_value(self.query("delete_keys", &cmd).await?)
            .map_err(|_| shape_error("delete_keys", self.endpoint(), "a DEL reply that is not a count"))
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

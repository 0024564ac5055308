//! Fences checked where the writes land: [`RedisStore::fenced_write`] writes a key
//! only while the writer's fence is not below the key's mark, and
//! [`FenceMarks`] on Redis (`scripts/fence.lua`); [`FencedWrites`] writes a value
//! beside the lease only while the fence is the lease's current one
//! (`scripts/fenced_value.lua`). One round trip each.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{Fence, FenceMarks, FenceVerdict, FencedWrites, LeaseName, LeaseStore, WriteVerdict};
use drain_core::{ErrorKind, PortError};
use redis::Value;

use crate::error::shape_error;
use crate::lease::millis;
use crate::scripts::SCRIPTS;
use crate::store::RedisStore;

/// A write that [`RedisStore::fenced_write`] applies to one key only while the
/// writer's fence is not below the key's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite<'a> {
    /// `SET key value`, with `PX` when `ttl` is given.
    Set {
        /// The value.
        value: &'a [u8],
        /// How long the key lives; `None` keeps it until it is written or deleted.
        ttl: Option<Duration>,
    },
    /// `HSET key field value [field value …]`: at least one pair.
    HSet {
        /// The fields and their values.
        fields: &'a [(&'a [u8], &'a [u8])],
    },
    /// `DEL key`.
    Del,
}

impl RedisStore {
    /// Apply `write` to `key` if `fence` is not below the key's fence mark, and
    /// raise the mark to it: one script, one round trip, so no stale write can land
    /// between the check and the write. `Stale { mark }` when a larger fence wrote
    /// the key before: nothing was written.
    ///
    /// The mark is [`KeySpace::mark`](crate::KeySpace::mark) of `key`, in the key's
    /// hash slot (so this works on a Cluster), under the store's prefix, and it is
    /// the mark [`FenceMarks::admit`] keeps for the resource named `key`. A fence
    /// equal to the mark is accepted: the holder writes many times. Guard a key by
    /// one lease of one store: fences of other leases or stores do not compare.
    ///
    /// ```no_run
    /// # async fn demo(store: adapter_redis::RedisStore, fence: drain_core::ports::Fence) -> Result<(), drain_core::PortError> {
    /// use adapter_redis::FencedWrite;
    /// use drain_core::ports::FenceVerdict;
    ///
    /// // `fence` is the one the lease guarding this work was taken with.
    /// let write = FencedWrite::HSet { fields: &[(b"state", b"shipped"), (b"by", b"worker-3")] };
    /// match store.fenced_write("orders:{42}", &fence, write).await? {
    ///     FenceVerdict::Accepted => {}
    ///     FenceVerdict::Stale { mark } => eprintln!("lost the lease: fence {mark} wrote since"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `WrongType` when the key or the mark holds another type (nothing is written
    /// then); `Config` for an `HSet` without fields, or a key prefix holding `{` or
    /// `}` on a Cluster; otherwise as every operation of the store.
    pub async fn fenced_write(
        &self,
        key: &str,
        fence: &Fence,
        write: FencedWrite<'_>,
    ) -> Result<FenceVerdict, PortError> {
        if let FencedWrite::HSet { fields: [] } = write {
            return Err(PortError::new(ErrorKind::Config, "a fenced HSET needs at least one field"));
        }
        let mark = self.mark_key(key)?;
        let number = fence.number().to_string();
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(&number);
            match write {
                FencedWrite::Set { value, ttl } => {
                    cmd.arg("set").arg(value).arg(ttl.map_or(0, millis));
                }
                FencedWrite::HSet { fields } => {
                    cmd.arg("hset");
                    for (field, value) in fields {
                        cmd.arg(*field).arg(*value);
                    }
                }
                FencedWrite::Del => {
                    cmd.arg("del");
                }
            }
        };
        let v = self.eval("fenced_write", &SCRIPTS.fence, &[mark.as_str(), key], args).await?;
        self.verdict("fenced_write", &v)
    }

    /// The mark of `resource`, refusing a prefix that would move it out of the
    /// resource's slot on a Cluster.
    fn mark_key(&self, resource: &str) -> Result<String, PortError> {
        if self.is_cluster() && self.keys().prefix().contains(['{', '}']) {
            return Err(PortError::new(
                ErrorKind::Config,
                format!(
                    "the key prefix {:?} holds a brace: fence marks under it would leave their keys' hash slots",
                    self.keys().prefix()
                ),
            ));
        }
        Ok(self.keys().mark(resource))
    }

    /// The script's `1` (accepted) or the mark (stale).
    fn verdict(&self, op: &str, v: &Value) -> Result<FenceVerdict, PortError> {
        let mark = match v {
            Value::Int(1) => return Ok(FenceVerdict::Accepted),
            Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
            Value::SimpleString(s) => s.parse().ok(),
            _ => None,
        };
        mark.map(|mark| FenceVerdict::Stale { mark }).ok_or_else(|| shape_error(op, self.endpoint(), &format!("{v:?}")))
    }
}

/// The marks of [`RedisStore::fenced_write`], admitted without a write: one script
/// call on the resource's mark key ([`KeySpace::mark`](crate::KeySpace::mark)).
#[async_trait]
impl FenceMarks for RedisStore {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        let mark = self.mark_key(resource)?;
        let number = fence.to_string();
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(&number).arg("admit");
        };
        let v = self.eval("admit", &SCRIPTS.fence, &[mark.as_str()], args).await?;
        self.verdict("admit", &v)
    }
}

/// Values beside their lease ([`KeySpace::fenced_value`](crate::KeySpace::fenced_value),
/// in the lease's hash slot): a write is one script that compares the fence with the
/// lease's fence key and sets the value, a read one `GET`.
#[async_trait]
impl FencedWrites for RedisStore {
    fn leases(&self) -> &dyn LeaseStore {
        self
    }

    async fn write_fenced(&self, fence: &Fence, key: &str, value: &[u8]) -> Result<WriteVerdict, PortError> {
        let op = "write_fenced";
        let fence_key = self.keys().lease(fence.lease()).fence;
        let value_key = self.keys().fenced_value(fence.lease(), key);
        let number = fence.number().to_string();
        let args = |cmd: &mut redis::Cmd| {
            cmd.arg(&number).arg(value);
        };
        let v = self.eval(op, &SCRIPTS.fenced_value, &[fence_key.as_str(), value_key.as_str()], args).await?;
        match self.verdict(op, &v)? {
            FenceVerdict::Accepted => Ok(WriteVerdict::Written),
            FenceVerdict::Stale { mark } => Ok(WriteVerdict::Stale { current: mark }),
        }
    }

    async fn read_fenced(&self, lease: &LeaseName, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        let op = "read_fenced";
        let v = self.query(op, redis::cmd("GET").arg(self.keys().fenced_value(lease, key))).await?;
        match v {
            Value::Nil => Ok(None),
            Value::BulkString(b) => Ok(Some(b)),
            other => Err(shape_error(op, self.endpoint(), &format!("{other:?}"))),
        }
    }
}

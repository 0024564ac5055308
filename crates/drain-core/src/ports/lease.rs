use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;
use crate::keys::LeaseKey;
use crate::token::LeaseToken;

/// Result of [`LeaseStore::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours; `fence` is the queue's fencing number, strictly larger than
    /// every fence handed out before for this key.
    Acquired {
        /// Fencing token for downstream writers.
        fence: u64,
    },
    /// Someone else holds it.
    Held {
        /// The holder's instance id (the token before its last `:`).
        holder: String,
        /// Time left on the holder's lease, when the store can tell.
        remaining: Option<Duration>,
    },
}

/// Result of [`LeaseStore::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Our lease was deleted.
    Released,
    /// The lease is gone or belongs to someone else; nothing was deleted.
    NotOwner,
}

/// Result of [`LeaseStore::renew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renew {
    /// Our lease now expires `ttl` from now.
    Renewed,
    /// The lease is gone or belongs to someone else; nothing was changed.
    Lost,
}

/// What a read-only peek found at a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The stored value (a token, a claim state, a counter).
    pub value: String,
    /// Time to live, when the key has one.
    pub remaining: Option<Duration>,
}

/// A store of single-flight leases with fencing, and read-only peeks of any key.
///
/// Implementations: `testkit::MemoryStore` (in-memory, virtual clock) and
/// `adapter-redis` (one round trip per call).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Take the lease at `key.lease` for `token` for `ttl`, if nobody holds it.
    ///
    /// On success the store MUST increment the counter at `key.fence` in the same
    /// atomic step and return its new value, so fences strictly increase across
    /// holders and across expiry. When held, it MUST NOT change the lease or fence.
    ///
    /// # Errors
    /// MUST return `Err` (never `Held`) when the store cannot answer; the caller
    /// then fails open. A key holding a value of another type MUST give
    /// [`crate::ErrorKind::WrongType`].
    async fn acquire(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError>;

    /// Delete the lease only if it still holds `token` (compare-and-delete).
    ///
    /// MUST return `NotOwner` and leave the key untouched when it holds another
    /// token (a later holder after our TTL expired) or nothing.
    ///
    /// # Errors
    /// MUST return `Err` when the store cannot answer; the TTL then frees the lease.
    async fn release(&self, key: &LeaseKey, token: &LeaseToken) -> Result<Release, PortError>;

    /// Extend the lease to `ttl` from now only if it still holds `token`.
    ///
    /// MUST return `Lost` and change nothing when the lease is gone or foreign.
    ///
    /// # Errors
    /// MUST return `Err` when the store cannot answer (not `Lost`: a blip is not a loss).
    async fn renew(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError>;

    /// Read `key` without changing anything; `None` when absent.
    ///
    /// # Errors
    /// MUST return `Err` when the store cannot answer, never `None` for "unknown".
    async fn peek(&self, key: &str) -> Result<Option<Holding>, PortError>;

    /// Read many keys without changing anything, in as few round trips as the
    /// backend allows (one per hash slot at most). The result MUST have one entry per
    /// key, in the order of `keys`; an empty slice MUST return an empty vector
    /// without contacting the store.
    ///
    /// # Errors
    /// MUST return `Err` when any part of the read failed.
    async fn peek_many(&self, keys: &[String]) -> Result<Vec<Option<Holding>>, PortError>;
}

//! [`KeyedClaims`]: admission's peeks at owner claims an embedder keeps under keys
//! of its own.

use async_trait::async_trait;
use drain_core::PortError;
use drain_core::admission::OwnerId;
use drain_core::ports::{OwnerClaim, OwnerClaims};

use crate::reply;
use crate::store::RedisStore;

/// [`OwnerClaims`] over claim keys an embedder's own system writes: `key` names
/// each owner's key (`tenant:{a}:lock`, …). A key holding a string is `Busy` (its
/// holder is the value before its last `:`, its remaining time the key's TTL, or
/// "never" for a key without one); a missing key is `Free`.
///
/// One `GET` + `PTTL` pipeline per hash slot, the slots in parallel, as
/// [`RedisStore`]'s own [`peek_owners`](OwnerClaims::peek_owners) over drain's
/// layout. A key of another type fails the peek (a permanent `WrongType`), which
/// admission counts and admits through.
pub struct KeyedClaims<F> {
    store: RedisStore,
    key: F,
}

impl<F> std::fmt::Debug for KeyedClaims<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedClaims").field("store", &self.store).finish_non_exhaustive()
    }
}

impl<F: Fn(&OwnerId) -> String + Send + Sync> KeyedClaims<F> {
    /// Peeks of the keys `key` names, on `store`'s connection.
    pub fn new(store: RedisStore, key: F) -> Self {
        KeyedClaims { store, key }
    }
}

#[async_trait]
impl<F: Fn(&OwnerId) -> String + Send + Sync> OwnerClaims for KeyedClaims<F> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        let keys: Vec<String> = owners.iter().map(&self.key).collect();
        let read = self.store.read_keys("peek_owners", &keys).await?;
        Ok(read.into_iter().map(reply::owner_claim).collect())
    }
}

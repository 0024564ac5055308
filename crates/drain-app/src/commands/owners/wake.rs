//! Release wake-up for `drain owners` (`PROJECTION_DRAIN_RELEASE_WAKE`, issue 7):
//! the Redis side of `Scheduler::on_release`.
//!
//! With the wake active (claim-aware On, release wake On or Shadow), a turn takes the
//! owner's claim with `RedisStore::acquire_or_wait` (a lost race registers this
//! process's wake channel on `<prefix>:waiters:{<owner>}` in the same round trip),
//! admission's batched peek is `RedisStore::peek_and_wait` (a held claim registers
//! the same way, still one round trip for K owners), and the release is
//! `RedisStore::release_and_wake`: unless the turn continues at once (`more`), it
//! pops one waiter and publishes the owner on its channel `<prefix>:wake:<instance>`.
//! The process subscribes to its own channel and the driver feeds what it hears to
//! `Scheduler::on_release`. A subscription that cannot be made is logged and the
//! process does not register as a waiter (it still wakes others); nothing fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use adapter_redis::{RedisStore, Waiter};
use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::event::Event;
use drain_core::keys::KeyKind;
use drain_core::ports::{Acquire, Holding, LeaseStore, Observer, Release, Renew};
use drain_core::{KeySpace, LeaseKey, LeaseToken, PortError, Switch};

use crate::compose::Runtime;

/// The wake-up's Redis side for one process.
pub(crate) struct WakeSide {
    pub(crate) store: RedisStore,
    pub(crate) keys: KeySpace,
    /// This process as a waiter; `None` when it could not subscribe (it then never
    /// registers, but its releases still wake others).
    pub(crate) waiter: Option<Waiter>,
    /// Releases of this process that notified a waiter.
    pub(crate) sent: AtomicU64,
}

impl WakeSide {
    /// How long a registration lives: well past the retry window, whose timer is
    /// the backstop of a lost wake-up.
    pub(crate) fn waiter_ttl(backoff_max: Duration) -> Duration {
        backoff_max.saturating_mul(2).max(Duration::from_secs(30))
    }
}

/// An owner's claim as a turn takes and releases it.
pub(crate) struct Claims {
    pub(crate) keys: KeySpace,
    pub(crate) leases: Arc<dyn LeaseStore>,
    pub(crate) wake: Option<Arc<WakeSide>>,
}

impl Claims {
    pub(crate) async fn acquire(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<Acquire, PortError> {
        let key = self.keys.owner_lease(owner.as_str());
        if let Some(w) = &self.wake
            && let Some(waiter) = &w.waiter
        {
            return w.store.acquire_or_wait(&key, &w.keys.owner_waiters(owner.as_str()), token, ttl, waiter).await;
        }
        self.leases.acquire(&key, token, ttl).await
    }

    /// Release; wake one waiter unless the holder continues at once (`more`).
    pub(crate) async fn release(&self, owner: &OwnerId, token: &LeaseToken, more: bool) -> Result<(), PortError> {
        let key = self.keys.owner_lease(owner.as_str());
        match &self.wake {
            Some(w) => {
                let waiters = w.keys.owner_waiters(owner.as_str());
                let done = w.store.release_and_wake(&key, &waiters, token, owner.as_str(), !more).await?;
                if done.woke {
                    w.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.leases.release(&key, token).await?;
            }
        }
        Ok(())
    }
}

/// Admission's peeks: counted, and registering this process as a waiter on every
/// held claim when the wake is active.
pub(crate) struct Peeks {
    pub(crate) inner: Arc<dyn LeaseStore>,
    pub(crate) wake: Option<Arc<WakeSide>>,
    /// Owners peeked.
    pub(crate) owners: AtomicU64,
    /// Peek round trips (batches).
    pub(crate) batches: AtomicU64,
}

impl Peeks {
    pub(crate) fn new(inner: Arc<dyn LeaseStore>, wake: Option<Arc<WakeSide>>) -> Self {
        Peeks { inner, wake, owners: AtomicU64::new(0), batches: AtomicU64::new(0) }
    }
}

#[async_trait]
impl LeaseStore for Peeks {
    async fn acquire(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.inner.acquire(key, token, ttl).await
    }
    async fn release(&self, key: &LeaseKey, token: &LeaseToken) -> Result<Release, PortError> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.inner.renew(key, token, ttl).await
    }
    async fn peek(&self, key: &str) -> Result<Option<Holding>, PortError> {
        Ok(self.peek_many(&[key.to_owned()]).await?.pop().flatten())
    }
    async fn peek_many(&self, keys: &[String]) -> Result<Vec<Option<Holding>>, PortError> {
        self.owners.fetch_add(keys.len() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = &self.wake
            && let Some(waiter) = &w.waiter
            && let Some(pairs) = waiter_pairs(&w.keys, keys)
        {
            return w.store.peek_and_wait(&pairs, waiter).await;
        }
        self.inner.peek_many(keys).await
    }
}

/// Each owner claim key with its owner's waiter list; `None` when a key is not an
/// owner claim of this key space (then the plain peek is used).
fn waiter_pairs(keys: &KeySpace, claims: &[String]) -> Option<Vec<(String, String)>> {
    claims
        .iter()
        .map(|claim| match keys.parse(claim)? {
            KeyKind::OwnerClaim { owner } => {
                Some((claim.clone(), keys.owner_waiters(std::str::from_utf8(&owner).ok()?)))
            }
            _ => None,
        })
        .collect()
}

/// The app's observer, counting the driver's release wake-ups (not a kept metric:
/// they go to `drain owners`' report).
pub(crate) struct WakeCounter {
    pub(crate) inner: Arc<dyn Observer>,
    pub(crate) wakes: AtomicU64,
}

impl Observer for WakeCounter {
    fn observe(&self, event: &Event<'_>) {
        if let Event::ReleaseWake { .. } = event {
            self.wakes.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.observe(event);
    }
}

/// The wake-up's Redis side and this process's release subscription, when the
/// wake acts (claim-aware On, release wake On or Shadow); see this module.
pub(crate) async fn wake_side(
    rt: &Runtime,
    store: &RedisStore,
) -> (Option<Arc<WakeSide>>, Option<adapter_redis::Releases>) {
    let c = &rt.config;
    if c.claim_aware != Switch::On || c.release_wake == Switch::Off {
        return (None, None);
    }
    // A user without the wake's rights (an ACL from before it) would fail every
    // turn's script: run without the wake instead, and say so.
    let probe = format!("drain-owners.{}", c.instance_id);
    let rights = store
        .missing_wake_rights(&rt.keys.owner_waiters(&probe), &rt.keys.wake_channel(&format!("{probe}.probe")))
        .await;
    match rights {
        Ok(missing) if missing.is_empty() => {}
        Ok(missing) => {
            tracing::warn!(
                "release wake-up off: the Redis user may not run {} (docs/operations.md)",
                missing.join(" ")
            );
            return (None, None);
        }
        Err(e) => {
            tracing::warn!("release wake-up off: its rights could not be checked ({e})");
            return (None, None);
        }
    }
    let channel = rt.keys.wake_channel(&c.instance_id);
    let (waiter, releases) = match store.subscribe_releases(&channel).await {
        Ok(r) => (Some(Waiter { channel, ttl: WakeSide::waiter_ttl(c.backoff_max) }), Some(r)),
        Err(e) => {
            tracing::warn!(
                "cannot subscribe to {channel} ({e}): this process will not be woken by releases (the retry window still applies)"
            );
            (None, None)
        }
    };
    let side = WakeSide { store: store.clone(), keys: rt.keys.clone(), waiter, sent: AtomicU64::new(0) };
    (Some(Arc::new(side)), releases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_keys_map_to_their_owners_waiter_lists() {
        let keys = KeySpace::new("drain");
        let claims = vec![keys.owner_claim("owner-1"), keys.owner_claim("a b{c}")];
        assert_eq!(
            waiter_pairs(&keys, &claims),
            Some(vec![
                (claims[0].clone(), "drain:waiters:{owner-1}".to_owned()),
                (claims[1].clone(), "drain:waiters:{a%20b%7Bc%7D}".to_owned()),
            ])
        );
        assert_eq!(waiter_pairs(&keys, &["custom:claim:x".to_owned()]), None, "a foreign key: plain peek");
        assert_eq!(waiter_pairs(&keys, &[keys.lease("q").lease]), None);
        assert!(WakeSide::waiter_ttl(Duration::from_secs(15)) >= Duration::from_secs(30));
    }
}

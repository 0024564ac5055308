//! Release wake-up for `drain owners` (`PROJECTION_DRAIN_RELEASE_WAKE`): the store's
//! side of `Scheduler::on_release`, through drain-core's `ReleaseWake` port.
//!
//! With the wake active (claim-aware On, release wake On or Shadow), a turn takes the
//! owner's claim with `ReleaseWake::acquire_or_wait` (a lost race registers this
//! process as a waiter in the same round trip), admission's batched peek is
//! `ReleaseWake::peek_and_wait` (a held claim registers the same way, still one round
//! trip for K owners), and the release is `ReleaseWake::release_and_wake`: unless the
//! turn continues at once (`more`), it notifies one waiter. The process subscribes to
//! its own notifications (`ReleaseWake::subscribe`) and the driver feeds what it hears
//! to `Scheduler::on_release`. On Redis the waiters are a list per owner and the
//! notifications pub/sub messages (adapter-redis' `wake` module); the rights they
//! need are probed first. A subscription that cannot be made is logged and the
//! process does not register as a waiter (it still wakes others); nothing fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use adapter_redis::RedisStore;
use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::event::Event;
use drain_core::ports::{
    Acquire, LeaseName, LeaseStore, Observer, OwnerClaim, OwnerClaims, ReleaseWake, Releases, Waiter,
};
use drain_core::{LeaseToken, PortError, Switch};

use crate::compose::Runtime;

/// The wake-up's side for one process.
pub(crate) struct WakeSide {
    pub(crate) wake: Arc<dyn ReleaseWake>,
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
        if let Some(w) = &self.wake
            && let Some(waiter) = &w.waiter
        {
            return w.wake.acquire_or_wait(owner, token, ttl, waiter).await;
        }
        self.leases.acquire(&LeaseName::owner(owner.as_str()), token, ttl).await
    }

    /// Release; wake one waiter unless the holder continues at once (`more`).
    pub(crate) async fn release(&self, owner: &OwnerId, token: &LeaseToken, more: bool) -> Result<(), PortError> {
        match &self.wake {
            Some(w) => {
                let done = w.wake.release_and_wake(owner, token, !more).await?;
                if done.woke {
                    w.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.leases.release(&LeaseName::owner(owner.as_str()), token).await?;
            }
        }
        Ok(())
    }
}

/// Admission's peeks: counted, and registering this process as a waiter on every
/// held claim when the wake is active.
pub(crate) struct Peeks {
    pub(crate) inner: Arc<dyn OwnerClaims>,
    pub(crate) wake: Option<Arc<WakeSide>>,
    /// Owners peeked.
    pub(crate) owners: AtomicU64,
    /// Peek round trips (batches).
    pub(crate) batches: AtomicU64,
}

impl Peeks {
    pub(crate) fn new(inner: Arc<dyn OwnerClaims>, wake: Option<Arc<WakeSide>>) -> Self {
        Peeks { inner, wake, owners: AtomicU64::new(0), batches: AtomicU64::new(0) }
    }
}

#[async_trait]
impl OwnerClaims for Peeks {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.owners.fetch_add(owners.len() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = &self.wake
            && let Some(waiter) = &w.waiter
        {
            return w.wake.peek_and_wait(owners, waiter).await;
        }
        self.inner.peek_owners(owners).await
    }
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

/// The wake-up's side and this process's release subscription, when the wake acts
/// (claim-aware On, release wake On or Shadow); see this module.
pub(crate) async fn wake_side(rt: &Runtime, store: &RedisStore) -> (Option<Arc<WakeSide>>, Option<Releases>) {
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
    let wake: Arc<dyn ReleaseWake> = Arc::new(store.clone());
    let (waiter, releases) = match wake.subscribe(&c.instance_id).await {
        Ok(r) => (Some(Waiter { instance: c.instance_id.clone(), ttl: WakeSide::waiter_ttl(c.backoff_max) }), Some(r)),
        Err(e) => {
            tracing::warn!(
                instance = %c.instance_id,
                "cannot subscribe to release notifications ({e}): this process will not be woken by releases (the retry window still applies)"
            );
            (None, None)
        }
    };
    let side = WakeSide { wake, waiter, sent: AtomicU64::new(0) };
    (Some(Arc::new(side)), releases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_outlives_the_retry_window() {
        assert_eq!(WakeSide::waiter_ttl(Duration::from_secs(15)), Duration::from_secs(30));
        assert_eq!(WakeSide::waiter_ttl(Duration::from_secs(40)), Duration::from_secs(80));
    }
}

//! Release wake-up for `drain owners` (`PROJECTION_DRAIN_RELEASE_WAKE`): drain-core's
//! `OwnerTurns` and admission driver use the store's `ReleaseWake` by themselves (the
//! driver subscribes, its peeks and the turns' lost races register this process as a
//! waiter, a release wakes one). What stays here is the decision: the switches, and on
//! Redis the rights the wake-up needs, probed first (a user without them runs without
//! it, and a warning says so; on PostgreSQL `grant_sql` grants them with the rest).

use adapter_redis::RedisStore;

use crate::compose::Runtime;

/// Whether the switches let the release wake-up act: claim-aware On and release
/// wake not Off.
pub(crate) fn switches_allow_wake(rt: &Runtime) -> bool {
    crate::compose::switches_allow_wake(&rt.config)
}

/// Whether the release wake-up may act for this process on Redis: the switches, and
/// a Redis user that may run its commands (a user without them, an ACL from before
/// the wake-up, would fail every turn's claim: run without it, and say so).
pub(crate) async fn wake_allowed(rt: &Runtime, store: &RedisStore) -> bool {
    let c = &rt.config;
    if !switches_allow_wake(rt) {
        return false;
    }
    let probe = format!("drain-owners.{}", c.instance_id);
    let rights = store
        .missing_wake_rights(&rt.keys.owner_waiters(&probe), &rt.keys.wake_channel(&format!("{probe}.probe")))
        .await;
    match rights {
        Ok(missing) if missing.is_empty() => true,
        Ok(missing) => {
            tracing::warn!(
                "release wake-up off: the Redis user may not run {} (docs/operations.md)",
                missing.join(" ")
            );
            false
        }
        Err(e) => {
            tracing::warn!("release wake-up off: its rights could not be checked ({e})");
            false
        }
    }
}

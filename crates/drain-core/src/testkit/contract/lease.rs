use std::time::Duration;

use super::{ContractEnv, token};
use crate::ports::{Acquire, LeaseStore, Release, Renew};

fn fence_of(a: &Acquire, what: &str) -> u64 {
    match a {
        Acquire::Acquired { fence } => *fence,
        Acquire::Held { holder, .. } => panic!("{what}: expected Acquired, got Held by {holder}"),
    }
}

/// The [`LeaseStore`] contract: acquire/held, fencing, compare-and-delete release,
/// compare-and-expire renewal, expiry then a foreign re-acquire, peeks.
///
/// # Panics
/// On the first broken rule, naming it.
pub async fn lease_store<S: LeaseStore + ?Sized>(store: &S, env: &ContractEnv<'_>) {
    let long = Duration::from_secs(60);
    let key = env.keys.lease("contract-q");
    let a = token("alpha", 1);
    let b = token("beta", 2);
    let c = token("gamma", 3);

    // Acquire, then another holder sees Held with our identity.
    let f1 = fence_of(&store.acquire(&key, &a, long).await.expect("acquire a"), "first acquire");
    match store.acquire(&key, &b, long).await.expect("acquire b") {
        Acquire::Held { holder, remaining } => {
            assert_eq!(holder, "alpha", "Held MUST name the holder's instance");
            if let Some(r) = remaining {
                assert!(r <= long && r > Duration::from_secs(50), "remaining {r:?} MUST be the holder's TTL left");
            }
        }
        other => panic!("acquire of a held lease MUST return Held, got {other:?}"),
    }
    let peeked = store.peek(&key.lease).await.expect("peek").expect("lease present");
    assert_eq!(peeked.value, a.as_str(), "the lease key MUST hold the holder's token");

    // Renew: ours yes, a stranger's no.
    assert_eq!(store.renew(&key, &a, long).await.expect("renew a"), Renew::Renewed);
    assert_eq!(store.renew(&key, &b, long).await.expect("renew b"), Renew::Lost, "renew by a non-holder MUST be Lost");

    // Release: a stranger cannot, the holder can, once.
    assert_eq!(store.release(&key, &b).await.expect("release b"), Release::NotOwner);
    assert_eq!(
        store.peek(&key.lease).await.expect("peek").map(|h| h.value).as_deref(),
        Some(a.as_str()),
        "a foreign release MUST leave the lease intact"
    );
    assert_eq!(store.release(&key, &a).await.expect("release a"), Release::Released);
    assert_eq!(store.peek(&key.lease).await.expect("peek"), None, "release MUST delete the lease");
    assert_eq!(store.release(&key, &a).await.expect("release again"), Release::NotOwner);
    assert_eq!(store.renew(&key, &a, long).await.expect("renew released"), Renew::Lost);

    // Fences strictly increase across holders.
    let f2 = fence_of(&store.acquire(&key, &b, env.short_ttl).await.expect("acquire b"), "acquire after release");
    assert!(f2 > f1, "fence MUST increase across holders: {f1} then {f2}");

    // Expiry, then a foreign re-acquire: the old holder can neither release nor renew.
    env.wait(env.short_ttl * 3).await;
    assert_eq!(store.peek(&key.lease).await.expect("peek"), None, "an expired lease MUST be gone");
    let f3 = fence_of(&store.acquire(&key, &c, long).await.expect("acquire c"), "acquire after expiry");
    assert!(f3 > f2, "fence MUST increase across expiry: {f2} then {f3}");
    assert_eq!(store.release(&key, &b).await.expect("stale release"), Release::NotOwner);
    assert_eq!(store.renew(&key, &b, long).await.expect("stale renew"), Renew::Lost);
    assert_eq!(
        store.peek(&key.lease).await.expect("peek").map(|h| h.value).as_deref(),
        Some(c.as_str()),
        "a stale holder MUST NOT disturb the new lease"
    );

    // Renewal really extends: renew with a long TTL, wait past the short one.
    let key2 = env.keys.lease("contract-renew");
    fence_of(&store.acquire(&key2, &a, env.short_ttl).await.expect("acquire"), "acquire key2");
    assert_eq!(store.renew(&key2, &a, long).await.expect("renew"), Renew::Renewed);
    env.wait(env.short_ttl * 3).await;
    assert_eq!(store.renew(&key2, &a, long).await.expect("renew"), Renew::Renewed, "renew MUST extend the TTL");

    // Queues are independent, and hostile names work.
    let odd = env.keys.lease("we{ird}:name with spaces");
    fence_of(&store.acquire(&odd, &a, long).await.expect("acquire odd"), "acquire hostile name");
    assert_eq!(store.release(&odd, &a).await.expect("release odd"), Release::Released);

    // Peeks: order kept, absent keys None, empty input no call.
    assert_eq!(store.peek_many(&[]).await.expect("peek_many empty"), Vec::new());
    let keys = vec![key.lease.clone(), env.keys.lease("absent").lease, key2.lease.clone(), key.fence.clone()];
    let got = store.peek_many(&keys).await.expect("peek_many");
    assert_eq!(got.len(), keys.len(), "peek_many MUST return one entry per key");
    assert_eq!(got[0].as_ref().map(|h| h.value.as_str()), Some(c.as_str()));
    assert_eq!(got[1], None);
    assert_eq!(got[2].as_ref().map(|h| h.value.as_str()), Some(a.as_str()));
    assert_eq!(got[3].as_ref().map(|h| h.value.clone()), Some(f3.to_string()), "the fence key holds the counter");
    assert!(got[2].as_ref().and_then(|h| h.remaining).is_some(), "a lease MUST report its TTL");

    // Clean up what is left.
    assert_eq!(store.release(&key, &c).await.expect("cleanup"), Release::Released);
    assert_eq!(store.release(&key2, &a).await.expect("cleanup"), Release::Released);
}

//! Lease and claim behaviour on a real redis-server beyond the shared contract:
//! real expiry, fences, `SCRIPT FLUSH`, foreign types, `SCAN`.

mod support;

use std::time::Duration;

use adapter_redis::RedisStore;
use drain_core::ErrorKind;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimState, ClaimStore, LeaseName, LeaseStore, MessageId, OwnerClaim, OwnerClaims, Release, Renew,
};
use test_servers::{RedisCluster, RedisServer, Reply};

use support::{config, connect_prefixed, delta, token};

fn fence(a: Acquire) -> u64 {
    match a {
        Acquire::Acquired { fence } => fence,
        Acquire::Busy { holder, .. } => panic!("expected Acquired, held by {holder}"),
    }
}

#[tokio::test]
async fn expiry_then_foreign_reacquire_leaves_the_new_lease_alone() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "b").await;
    let lease = LeaseName::queue("q");
    let (me, other) = (token("me", 1), token("other", 2));

    let f1 = fence(store.acquire(&lease, &me, Duration::from_millis(150)).await.expect("acquire"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let f2 = fence(store.acquire(&lease, &other, Duration::from_secs(30)).await.expect("foreign acquire"));
    assert!(f2 > f1, "fences {f1} then {f2}");

    assert_eq!(store.release(&lease, &me).await.expect("stale release"), Release::NotOwner);
    assert_eq!(store.renew(&lease, &me, Duration::from_secs(30)).await.expect("stale renew"), Renew::Lost);
    let held = store.peek(&lease).await.expect("peek").expect("the foreign lease survives");
    assert_eq!((held.holder.as_str(), held.fence), ("other", f2));
    assert!(held.remaining > Duration::from_secs(25), "its TTL untouched: {held:?}");
    match store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire") {
        Acquire::Busy { holder, remaining } => {
            assert_eq!(holder, "other");
            assert!(remaining <= Duration::from_secs(30));
        }
        a => panic!("expected Busy, got {a:?}"),
    }
}

#[tokio::test]
async fn renew_of_a_lost_lease_is_lost_and_changes_nothing() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "b").await;
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    fence(store.acquire(&lease, &me, Duration::from_millis(100)).await.expect("acquire"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.renew(&lease, &me, Duration::from_secs(30)).await.expect("renew"), Renew::Lost);
    assert_eq!(store.peek(&lease).await.expect("peek"), None, "a lost renew must not resurrect the lease");
}

#[tokio::test]
async fn fences_strictly_increase_across_holders_and_expiry() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "b").await;
    let lease = LeaseName::queue("fenced");
    let fence_key = store.keys().lease(&lease).fence;
    let mut last = 0;
    for round in 0..6u64 {
        let t = token(&format!("holder-{}", round % 3), round);
        let f = fence(store.acquire(&lease, &t, Duration::from_millis(250)).await.expect("acquire"));
        assert!(f > last, "round {round}: fence {f} after {last}");
        last = f;
        if round % 2 == 0 {
            assert_eq!(store.release(&lease, &t).await.expect("release"), Release::Released);
        } else {
            tokio::time::sleep(Duration::from_millis(500)).await; // let it expire
        }
    }
    // A Busy answer never moves the fence.
    let t = token("holder-x", 99);
    let last = fence(store.acquire(&lease, &t, Duration::from_secs(30)).await.expect("acquire"));
    let before = redis.command(&["GET", &fence_key]).expect("GET");
    assert!(matches!(store.acquire(&lease, &token("y", 1), Duration::from_secs(1)).await, Ok(Acquire::Busy { .. })));
    assert_eq!(redis.command(&["GET", &fence_key]).expect("GET"), before);
    assert_eq!(store.peek(&lease).await.expect("peek").expect("held").fence, last, "peek reads the holder's fence");
}

#[tokio::test]
async fn script_flush_mid_run_is_recovered_in_the_same_call() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "b").await;
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    fence(store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire"));

    assert_eq!(redis.command(&["SCRIPT", "FLUSH"]).expect("flush"), Reply::Simple("OK".into()));
    let before = redis.command_calls().expect("stats");
    assert_eq!(store.release(&lease, &me).await.expect("release after flush"), Release::Released);
    let after = redis.command_calls().expect("stats");
    // EVALSHA answered NOSCRIPT (a rejected call), then EVAL ran and re-cached it.
    assert_eq!(delta(&before, &after).get("eval"), Some(&1), "{:?}", delta(&before, &after));

    let before = redis.command_calls().expect("stats");
    fence(store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire"));
    assert_eq!(store.release(&lease, &me).await.expect("release"), Release::Released);
    let d = delta(&before, &redis.command_calls().expect("stats"));
    assert_eq!(d.get("eval"), Some(&1), "acquire's script was flushed too: one EVAL fallback");
    // Acquire's EVALSHA (answered NOSCRIPT) and release's, which is cached again.
    assert_eq!(d.get("evalsha"), Some(&2), "{d:?}");

    // Claims too, mid-batch.
    redis.command(&["SCRIPT", "FLUSH"]).expect("flush");
    let msgs: Vec<MessageId> = (0..4).map(|i| MessageId::from(format!("m{i}"))).collect();
    let got = store.claim_batch("q", &msgs, &me, Duration::from_secs(30)).await.expect("claim after flush");
    assert_eq!(got, vec![ClaimState::Claimed; 4]);
}

#[tokio::test]
async fn a_foreign_type_is_a_permanent_wrong_type_and_claims_nothing() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "b").await;
    let keys = store.keys().clone();
    let lease = LeaseName::queue("q");
    let lease_keys = keys.lease(&lease);
    let me = token("me", 1);

    redis.command(&["HSET", &lease_keys.lease, "f", "v"]).expect("hset");
    let e = store.acquire(&lease, &me, Duration::from_secs(5)).await.expect_err("WRONGTYPE");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    assert!(!e.is_temporary());
    assert!(e.message.contains("DRAIN_KEY_PREFIX"), "{e}");
    assert_eq!(redis.command(&["EXISTS", &lease_keys.fence]).expect("exists"), Reply::Int(0), "no fence minted");
    let e = store.peek(&lease).await.expect_err("peek of a hash");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");

    // A fence key that is not a counter fails before the lease is written, and a
    // peek of a lease whose fence is not a counter fails too.
    let l2 = LeaseName::queue("q2");
    let l2_keys = keys.lease(&l2);
    redis.command(&["SET", &l2_keys.fence, "not-a-number"]).expect("set");
    let e = store.acquire(&l2, &me, Duration::from_secs(5)).await.expect_err("bad fence");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    assert!(e.message.contains(&l2_keys.fence), "names the fence key: {e}");
    assert_eq!(redis.command(&["EXISTS", &l2_keys.lease]).expect("exists"), Reply::Int(0), "no lease left behind");
    redis.command(&["SET", &l2_keys.lease, "x:1", "PX", "5000"]).expect("set");
    let e = store.peek(&l2).await.expect_err("bad fence");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");

    let msgs: Vec<MessageId> = (0..3).map(|i| MessageId::from(format!("m{i}"))).collect();
    let msg_keys: Vec<String> = msgs.iter().map(|m| keys.message_claim("q", m)).collect();
    redis.command(&["LPUSH", &msg_keys[2], "x"]).expect("lpush");
    let e = store.claim_batch("q", &msgs, &me, Duration::from_secs(5)).await.expect_err("WRONGTYPE");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    for m in &msg_keys[..2] {
        assert_eq!(redis.command(&["EXISTS", m]).expect("exists"), Reply::Int(0), "nothing half-claimed");
    }
    redis.command(&["LPUSH", &keys.owner_claim("o"), "x"]).expect("lpush");
    let e = store.peek_owners(&[OwnerId::from("o")]).await.expect_err("peek of a list");
    assert_eq!(e.kind, ErrorKind::WrongType, "a claim key that holds a list: {e}");
}

/// A lease key written by hand without a TTL holds until someone deletes it: the
/// tick skips, it does not fail open.
#[tokio::test]
async fn a_lease_without_a_ttl_is_held_for_good() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "b").await;
    let lease = LeaseName::queue("paused");
    redis.command(&["SET", &store.keys().lease(&lease).lease, "maintenance:by-hand"]).expect("set");
    match store.acquire(&lease, &token("me", 1), Duration::from_secs(5)).await.expect("acquire") {
        Acquire::Busy { holder, remaining } => assert_eq!((holder.as_str(), remaining), ("maintenance", Duration::MAX)),
        a => panic!("expected Busy, got {a:?}"),
    }
    let held = store.peek(&lease).await.expect("peek").expect("held");
    assert_eq!((held.holder.as_str(), held.remaining, held.fence), ("maintenance", Duration::MAX, 0));
}

#[tokio::test]
async fn scan_lists_leases_fences_and_claims_without_keys() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "scan*me").await;
    let keys = store.keys().clone();
    let me = token("me", 1);
    for q in ["a", "b{x}", "c"] {
        fence(store.acquire(&LeaseName::queue(q), &me, Duration::from_secs(60)).await.expect("acquire"));
    }
    let msgs: Vec<MessageId> = (0..1500).map(|i| MessageId::from(format!("m{i}"))).collect();
    store.claim_batch("a", &msgs, &me, Duration::from_secs(60)).await.expect("claim");
    redis.command(&["HSET", "scan*me:hash", "f", "v"]).expect("a hash is skipped");
    redis.command(&["SET", "other:lease:{a}", "x"]).expect("another prefix is skipped");
    redis.command(&["SET", "scanXme:lease:{a}", "x"]).expect("the * in the prefix is literal");

    let before = redis.command_calls().expect("stats");
    let found = store.scan().await.expect("scan");
    let d = delta(&before, &redis.command_calls().expect("stats"));
    assert_eq!(found.len(), 3 + 3 + 1500, "3 leases, 3 fences, 1500 claims");
    assert!(found.windows(2).all(|w| w[0].0 < w[1].0), "sorted by key");
    let lease = found.iter().find(|(k, _)| *k == keys.lease(&LeaseName::queue("b{x}")).lease).expect("lease listed");
    assert_eq!(lease.1.value, me.as_str());
    assert!(lease.1.remaining.is_some_and(|r| r > Duration::from_secs(50)));
    let fence_key = found.iter().find(|(k, _)| *k == keys.lease(&LeaseName::queue("a")).fence).expect("fence listed");
    // A fence counter lives for good; its value is the first acquire's fence, the
    // server's clock in microseconds.
    assert!(fence_key.1.value.parse::<u64>().is_ok_and(|f| f > 1_700_000_000_000_000), "{:?}", fence_key.1);
    assert_eq!(fence_key.1.remaining, None);
    assert_eq!(d.get("keys"), None, "never KEYS");
    assert!(d.get("scan").is_some_and(|&n| n >= 2), "paged SCAN: {d:?}");
}

#[tokio::test]
async fn cluster_scan_covers_every_primary() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect(config(&cluster.urls().join(",")).cluster(true).key_prefix("cs"))
        .await
        .expect("connect to the private cluster");
    let me = token("me", 1);
    let queues: Vec<String> = (0..20).map(|i| format!("q{i}")).collect();
    for q in &queues {
        fence(store.acquire(&LeaseName::queue(q.as_str()), &me, Duration::from_secs(60)).await.expect("acquire"));
    }
    let found = store.scan().await.expect("scan");
    assert_eq!(found.len(), 40, "20 leases and 20 fences across the nodes");
    for node in cluster.nodes() {
        assert!(node.command_calls().expect("stats").get("scan").is_some_and(|&n| n >= 1), "every primary scanned");
    }
}

/// Claims an embedder's own system keeps, under keys of its own, peeked through
/// `KeyedClaims`: held with the value's holder and the key's TTL, free when absent,
/// "never ending" without a TTL, in one round trip.
#[tokio::test]
async fn keyed_claims_peek_an_embedder_s_own_claim_keys() {
    let redis = RedisServer::start();
    let (store, observer) = support::observed(connect_prefixed(&redis.url(), "b").await);
    redis.command(&["SET", "app:lock:{a}", "worker-1:0123", "PX", "5000"]).expect("set");
    redis.command(&["SET", "app:lock:{c}", "by-hand"]).expect("set");
    let claims = adapter_redis::KeyedClaims::new(store, |o: &OwnerId| format!("app:lock:{{{o}}}"));
    let owners = [OwnerId::from("a"), OwnerId::from("b"), OwnerId::from("c")];
    let got = claims.peek_owners(&owners).await.expect("peek");
    assert!(
        matches!(&got[0], OwnerClaim::Busy { holder, remaining } if holder == "worker-1" && *remaining <= Duration::from_secs(5) && *remaining > Duration::from_secs(3)),
        "{got:?}"
    );
    assert_eq!(got[1], OwnerClaim::Free);
    assert_eq!(got[2], OwnerClaim::Busy { holder: "by-hand".into(), remaining: Duration::MAX });
    assert_eq!(support::round_trips(&observer), 1, "one pipeline");
}

//! Lease and claim behaviour on a real redis-server beyond the shared contract:
//! real expiry, fences, `SCRIPT FLUSH`, foreign types, `SCAN`.

mod support;

use std::time::Duration;

use drain_core::ports::{Acquire, ClaimState, ClaimStore, LeaseStore, Release, Renew};
use drain_core::{ErrorKind, KeySpace};
use test_servers::{RedisCluster, RedisServer, Reply};

use support::{connect, connect_cluster, delta, token};

fn fence(a: Acquire) -> u64 {
    match a {
        Acquire::Acquired { fence } => fence,
        Acquire::Held { holder, .. } => panic!("expected Acquired, held by {holder}"),
    }
}

#[tokio::test]
async fn expiry_then_foreign_reacquire_leaves_the_new_lease_alone() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let lease = KeySpace::new("b").lease("q");
    let (me, other) = (token("me", 1), token("other", 2));

    let f1 = fence(store.acquire(&lease, &me, Duration::from_millis(150)).await.expect("acquire"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let f2 = fence(store.acquire(&lease, &other, Duration::from_secs(30)).await.expect("foreign acquire"));
    assert!(f2 > f1, "fences {f1} then {f2}");

    assert_eq!(store.release(&lease, &me).await.expect("stale release"), Release::NotOwner);
    assert_eq!(store.renew(&lease, &me, Duration::from_secs(30)).await.expect("stale renew"), Renew::Lost);
    let held = store.peek(&lease.lease).await.expect("peek").expect("the foreign lease survives");
    assert_eq!(held.value, other.as_str());
    assert!(held.remaining.is_some_and(|r| r > Duration::from_secs(25)), "its TTL untouched: {held:?}");
    match store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire") {
        Acquire::Held { holder, remaining } => {
            assert_eq!(holder, "other");
            assert!(remaining.is_some_and(|r| r <= Duration::from_secs(30)));
        }
        a => panic!("expected Held, got {a:?}"),
    }
}

#[tokio::test]
async fn renew_of_a_lost_lease_is_lost_and_changes_nothing() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let lease = KeySpace::new("b").lease("q");
    let me = token("me", 1);
    fence(store.acquire(&lease, &me, Duration::from_millis(100)).await.expect("acquire"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.renew(&lease, &me, Duration::from_secs(30)).await.expect("renew"), Renew::Lost);
    assert_eq!(store.peek(&lease.lease).await.expect("peek"), None, "a lost renew MUST NOT resurrect the lease");
}

#[tokio::test]
async fn fences_strictly_increase_across_holders_and_expiry() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let lease = KeySpace::new("b").lease("fenced");
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
    // A Held answer never moves the fence.
    let t = token("holder-x", 99);
    fence(store.acquire(&lease, &t, Duration::from_secs(30)).await.expect("acquire"));
    let before = store.peek(&lease.fence).await.expect("peek").expect("fence").value;
    assert!(matches!(store.acquire(&lease, &token("y", 1), Duration::from_secs(1)).await, Ok(Acquire::Held { .. })));
    assert_eq!(store.peek(&lease.fence).await.expect("peek").expect("fence").value, before);
}

#[tokio::test]
async fn script_flush_mid_run_is_recovered_in_the_same_call() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let keys = KeySpace::new("b");
    let lease = keys.lease("q");
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
    let msgs: Vec<String> = (0..4).map(|i| keys.message_claim("q", &format!("m{i}"))).collect();
    let got = store.claim_batch(&msgs, &me, Duration::from_secs(30)).await.expect("claim after flush");
    assert_eq!(got, vec![ClaimState::Claimed; 4]);
}

#[tokio::test]
async fn a_foreign_type_is_a_permanent_wrong_type_and_claims_nothing() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let keys = KeySpace::new("b");
    let lease = keys.lease("q");
    let me = token("me", 1);

    redis.command(&["HSET", &lease.lease, "f", "v"]).expect("hset");
    let e = store.acquire(&lease, &me, Duration::from_secs(5)).await.expect_err("WRONGTYPE");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    assert!(!e.is_temporary());
    assert!(e.message.contains("DRAIN_KEY_PREFIX"), "{e}");
    assert_eq!(redis.command(&["EXISTS", &lease.fence]).expect("exists"), Reply::Int(0), "no fence minted");

    // A fence key that is not a counter fails before the lease is written.
    let l2 = keys.lease("q2");
    redis.command(&["SET", &l2.fence, "not-a-number"]).expect("set");
    let e = store.acquire(&l2, &me, Duration::from_secs(5)).await.expect_err("bad fence");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    assert_eq!(redis.command(&["EXISTS", &l2.lease]).expect("exists"), Reply::Int(0), "no lease left behind");

    let msgs: Vec<String> = (0..3).map(|i| keys.message_claim("q", &format!("m{i}"))).collect();
    redis.command(&["LPUSH", &msgs[2], "x"]).expect("lpush");
    let e = store.claim_batch(&msgs, &me, Duration::from_secs(5)).await.expect_err("WRONGTYPE");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    for m in &msgs[..2] {
        assert_eq!(redis.command(&["EXISTS", m]).expect("exists"), Reply::Int(0), "nothing half-claimed");
    }
    let e = store.peek_many(&msgs).await.expect_err("peek of a list");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
}

#[tokio::test]
async fn scan_lists_leases_fences_and_claims_without_keys() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let keys = KeySpace::new("scan*me");
    let me = token("me", 1);
    for q in ["a", "b{x}", "c"] {
        fence(store.acquire(&keys.lease(q), &me, Duration::from_secs(60)).await.expect("acquire"));
    }
    let msgs: Vec<String> = (0..1500).map(|i| keys.message_claim("a", &format!("m{i}"))).collect();
    store.claim_batch(&msgs, &me, Duration::from_secs(60)).await.expect("claim");
    redis.command(&["HSET", "scan*me:hash", "f", "v"]).expect("a hash is skipped");
    redis.command(&["SET", "other:lease:{a}", "x"]).expect("another prefix is skipped");
    redis.command(&["SET", "scanXme:lease:{a}", "x"]).expect("the * in the prefix is literal");

    let before = redis.command_calls().expect("stats");
    let found = store.scan(&keys.scan_pattern()).await.expect("scan");
    let d = delta(&before, &redis.command_calls().expect("stats"));
    assert_eq!(found.len(), 3 + 3 + 1500, "3 leases, 3 fences, 1500 claims");
    assert!(found.windows(2).all(|w| w[0].0 < w[1].0), "sorted by key");
    let lease = found.iter().find(|(k, _)| *k == keys.lease("b{x}").lease).expect("lease listed");
    assert_eq!(lease.1.value, me.as_str());
    assert!(lease.1.remaining.is_some_and(|r| r > Duration::from_secs(50)));
    let fence_key = found.iter().find(|(k, _)| *k == keys.lease("a").fence).expect("fence listed");
    assert_eq!((fence_key.1.value.as_str(), fence_key.1.remaining), ("1", None));
    assert_eq!(d.get("keys"), None, "never KEYS");
    assert!(d.get("scan").is_some_and(|&n| n >= 2), "paged SCAN: {d:?}");
}

#[tokio::test]
async fn cluster_scan_covers_every_primary() {
    let Some(cluster) = RedisCluster::start(3) else { return };
    let store = connect_cluster(&cluster.urls()).await;
    let keys = KeySpace::new("cs");
    let me = token("me", 1);
    let queues: Vec<String> = (0..20).map(|i| format!("q{i}")).collect();
    for q in &queues {
        fence(store.acquire(&keys.lease(q), &me, Duration::from_secs(60)).await.expect("acquire"));
    }
    let found = store.scan(&keys.scan_pattern()).await.expect("scan");
    assert_eq!(found.len(), 40, "20 leases and 20 fences across the nodes");
    for node in cluster.nodes() {
        assert!(node.command_calls().expect("stats").get("scan").is_some_and(|&n| n >= 1), "every primary scanned");
    }
}

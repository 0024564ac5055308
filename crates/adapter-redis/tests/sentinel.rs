//! A primary behind Redis Sentinel (`redis+sentinel://`): private servers, a primary,
//! a replica and one sentinel (quorum 1, the primary down after 500 ms). The
//! primary is SIGKILLed; the sentinel promotes the replica, and the same store
//! follows it by itself: the lease replicated before the kill is still held, its
//! holder releases it there, and the next acquire hands out a larger fence.

mod support;

use std::time::{Duration, Instant};

use adapter_redis::{RedisConfig, RedisStore};
use drain_core::ports::{Acquire, LeaseName, LeaseStore, Release};
use test_servers::{RedisServer, Reply};

use support::token;

/// The longest the sentinel and the store together may take to be back on the
/// promoted replica: within one lease TTL of the kill.
const TTL: Duration = Duration::from_secs(30);

fn within(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + bound;
    while !cond() {
        assert!(Instant::now() < end, "{what} within {bound:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn role(server: &RedisServer) -> String {
    server
        .info("replication")
        .unwrap_or_default()
        .into_iter()
        .find(|(k, _)| k == "role")
        .map(|(_, v)| v)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_behind_sentinel_follows_a_failover_to_the_replica() {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let sentinel = RedisServer::sentinel("drain-primary", primary.port());
    within(
        "the sentinel sees the replica",
        Duration::from_secs(15),
        || matches!(sentinel.command(&["SENTINEL", "REPLICAS", "drain-primary"]), Ok(Reply::Array(Some(r))) if !r.is_empty()),
    );

    let url = format!("redis+sentinel://127.0.0.1:{}/drain-primary", sentinel.port());
    let config = RedisConfig::new(url).timeouts(Duration::from_millis(500), Duration::from_millis(500));
    let store = RedisStore::connect(config).await.expect("connect through the sentinel");
    let lease = LeaseName::queue("requests");
    let (first, holder) = (token("a", 1), token("b", 2));
    let Acquire::Acquired { fence: f1 } = store.acquire(&lease, &first, TTL).await.expect("acquire") else {
        panic!("free")
    };
    assert_eq!(store.release(&lease, &first).await.expect("release"), Release::Released);
    let Acquire::Acquired { fence: f2 } = store.acquire(&lease, &holder, TTL).await.expect("acquire") else {
        panic!("free")
    };
    assert!(f2 > f1);
    // Our replica has the lease, fence and all (an acquire is one atomic script). Not
    // `WAIT 1`: any replica counts there, and a test server elsewhere that replicated
    // from a dead server whose port this primary reuses is one.
    let fence = f2.to_string().into_bytes();
    within("the replica has the second fence", Duration::from_secs(10), || {
        replica.command(&["GET", "drain:fence:{requests}"]).ok() == Some(Reply::Bulk(Some(fence.clone())))
    });

    let killed = Instant::now();
    primary.kill();
    within("the sentinel promotes the replica", TTL, || role(&replica) == "master");
    // The store's next calls fail while the primary is gone, then land on the
    // promoted replica: the replicated lease is held there.
    let other = token("c", 3);
    let held = loop {
        match store.acquire(&lease, &other, TTL).await {
            Ok(answer) => break answer,
            Err(e) => {
                assert!(killed.elapsed() < TTL, "the store did not follow within one TTL: {e}");
                assert!(e.is_temporary(), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(matches!(&held, Acquire::Busy { holder: h, .. } if h == "b"), "{held:?}");
    assert_eq!(store.release(&lease, &holder).await.expect("release"), Release::Released);
    let Acquire::Acquired { fence: f3 } = store.acquire(&lease, &other, TTL).await.expect("acquire") else {
        panic!("released")
    };
    assert!(f3 > f2, "fence {f3} after {f2}");
    eprintln!("followed the failover in {:?}", killed.elapsed());
}

#[tokio::test]
async fn a_sentinel_url_without_a_primary_name_or_with_no_sentinel_is_a_config_error() {
    for url in ["redis+sentinel://127.0.0.1:26379", "redis+sentinel:///drain", "redis+sentinel://h:1/name/x"] {
        let e = RedisStore::connect(RedisConfig::new(url)).await.expect_err("refused");
        assert_eq!(e.kind, drain_core::ErrorKind::Config, "{url}: {e}");
    }
}

//! Fences across a failover that loses the store's latest writes and across a restart
//! that loses everything (docs/reliability.md, "Fences across a failover").
//!
//! Redis: a primary with a replica behind one address (a loopback proxy standing for
//! the managed endpoint). The replica stops receiving (as a lagging one does), one more
//! holder takes the lease on the primary, the primary is SIGKILLed and the address
//! moves to the replica. A Redis Cluster: a master's replica, back from a snapshot that
//! lacks the last fence, takes the slots over. PostgreSQL: a copy of the data directory
//! stands for an asynchronous standby that stopped receiving; the server comes back on
//! it. Each time the next acquire is answered at once (the lost lease is gone with the
//! data) with a fence larger than every fence handed out before, the lost one included.
//! Before fences were floored at the server's clock, the Redis run handed out the lost
//! fence a second time and the empty restart started again at 1.
//!
//! The `done` claims written after the replica stopped are lost with it: the test
//! counts them, as docs/reliability.md says what covers them.

use std::net::SocketAddr;
use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use adapter_redis::{RedisConfig, RedisStore};
use drain_core::LeaseToken;
use drain_core::ports::{Acquire, ClaimState, ClaimStore, LeaseName, LeaseStore, MessageId, SettleAction, Settlement};
use drain_core::testkit::TestRng;
use drain_e2e::proxy::Proxy;
use drain_e2e::{RedisServer, answered, eventually, postgres::postgres};
use test_servers::{RedisCluster, Reply};

const TTL: Duration = Duration::from_secs(30);
/// A store may take 20 s to answer again after its address moved: 200 attempts
/// 100 ms apart.
const ATTEMPTS: u32 = 200;
const PAUSE: Duration = Duration::from_millis(100);

fn token(instance: &str, seed: u64) -> LeaseToken {
    LeaseToken::generate(instance, &mut TestRng::new(seed))
}

/// Take `lease` for a fresh holder; with `release`, give it back.
async fn take(store: &(impl LeaseStore + ?Sized), lease: &LeaseName, seed: u64, release: bool) -> u64 {
    let me = token("holder", seed);
    match answered(ATTEMPTS, PAUSE, || store.acquire(lease, &me, TTL)).await {
        Acquire::Acquired { fence } => {
            if release {
                store.release(lease, &me).await.expect("release");
            }
            fence
        }
        held => panic!("the lease should be free at once: {held:?}"),
    }
}

/// Claim and mark done `ids` of queue `q`, as a tick that submitted them does.
async fn settle_done(store: &impl ClaimStore, q: &str, ids: &[MessageId], seed: u64) {
    let me = token("tick", seed);
    let states = store.claim_batch(q, ids, &me, TTL).await.expect("claim");
    assert!(states.iter().all(|s| *s == ClaimState::Claimed), "{states:?}");
    let settle: Vec<Settlement> =
        ids.iter().map(|id| Settlement { id: id.clone(), action: SettleAction::Done }).collect();
    store.settle_batch(q, &settle, &me, TTL).await.expect("settle");
}

/// How many of `ids` a redelivery could claim again: their `done` claim is gone.
async fn claimable(store: &impl ClaimStore, q: &str, ids: &[MessageId]) -> usize {
    let me = token("redelivery", 99);
    let states = answered(ATTEMPTS, PAUSE, || store.claim_batch(q, ids, &me, TTL)).await;
    states.iter().filter(|s| **s == ClaimState::Claimed).count()
}

fn ids(range: std::ops::Range<u32>) -> Vec<MessageId> {
    range.map(|i| MessageId::from(format!("m-{i}").as_str())).collect()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_failover_that_loses_the_last_fence_and_an_empty_restart_never_repeat_a_fence() {
    let primary = RedisServer::start();
    // Made a replica by command, not by flag, so that its restart below comes back
    // as a primary.
    let mut replica = RedisServer::start();
    replica.replicate_from(&primary);
    let proxy = Proxy::start(addr(primary.port()));
    let config = RedisConfig::new(format!("redis://127.0.0.1:{}", proxy.port()))
        .timeouts(Duration::from_secs(2), Duration::from_secs(2));
    let store = RedisStore::connect(config).await.expect("connect through the proxy");
    let lease = LeaseName::queue("requests");

    let mut fences = Vec::new();
    for seed in 1..=3 {
        fences.push(take(&store, &lease, seed, true).await);
    }
    settle_done(&store, "requests", &ids(0..10), 1).await;
    let last = fences[2].to_string();
    let replicated = eventually(Duration::from_secs(10), || {
        replica.command(&["GET", "drain:fence:{requests}"]).ok() == Some(Reply::Bulk(Some(last.clone().into_bytes())))
            && replica.command(&["EXISTS", "drain:msg:{requests}:m-9"]).ok() == Some(Reply::Int(1))
    });
    assert!(replicated, "the replica has the third fence and the done claims");

    // The replica stops receiving; the primary hands out one more fence (its holder
    // keeps the lease) and records ten more done claims.
    assert_eq!(replica.command(&["REPLICAOF", "NO", "ONE"]).expect("detach"), Reply::Simple("OK".into()));
    let lost = take(&store, &lease, 4, false).await;
    settle_done(&store, "requests", &ids(10..20), 2).await;
    fences.push(lost);

    // The primary dies; the address moves to the replica.
    drop(primary);
    proxy.retarget(addr(replica.port()));
    let after_failover = take(&store, &lease, 5, true).await;
    assert!(
        after_failover > lost,
        "fence {after_failover} after the failover, {lost} handed out before it: {fences:?}"
    );
    fences.push(after_failover);
    assert_eq!(claimable(&store, "requests", &ids(0..10)).await, 0, "replicated done claims survive");
    let lost_claims = claimable(&store, "requests", &ids(10..20)).await;
    assert_eq!(lost_claims, 10, "the done claims written after the replica stopped are lost with the primary");

    // The new primary restarts with nothing (no persistence).
    replica.restart();
    let after_restart = take(&store, &lease, 6, true).await;
    assert!(after_restart > after_failover, "fence {after_restart} after an empty restart: {fences:?}");
    fences.push(after_restart);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "every fence larger than the last: {fences:?}");
}

/// A Redis Cluster node fails over to its replica, which lacks the last fence: the
/// replica's data is a snapshot taken after the third fence (it is restarted from
/// it after the fourth, as a replica that had not received the fourth would be), the
/// master is SIGKILLed and the replica takes its slots over (`CLUSTER FAILOVER
/// TAKEOVER`). The cluster client finds the new owner by itself, and the next fence
/// is above the lost one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_to_a_replica_that_lost_the_last_fence_never_hands_it_out_again() {
    let mut cluster = RedisCluster::start(3);
    let seeds = cluster.urls().join(",");
    let config = RedisConfig::new(seeds).cluster(true).timeouts(Duration::from_secs(2), Duration::from_secs(2));
    let store = RedisStore::connect(config).await.expect("connect to the cluster");
    let lease = LeaseName::queue("requests");
    let fence_key = "drain:fence:{requests}";

    let mut fences = Vec::new();
    for seed in 1..=3 {
        fences.push(take(&store, &lease, seed, true).await);
    }
    let owner = (0..cluster.nodes().len())
        .find(|&i| cluster.nodes()[i].command(&["EXISTS", fence_key]).ok() == Some(Reply::Int(1)))
        .expect("a node holds the fence");
    let replica = cluster.add_replica(owner);
    assert_eq!(cluster.nodes()[replica].command(&["SAVE"]).expect("save"), Reply::Simple("OK".into()));

    let lost = take(&store, &lease, 4, false).await;
    fences.push(lost);
    cluster.nodes_mut()[owner].kill();
    // Back from the snapshot: the replica never had the fourth fence.
    cluster.nodes_mut()[replica].restart();
    let takeover = cluster.nodes()[replica].command(&["CLUSTER", "FAILOVER", "TAKEOVER"]).expect("takeover");
    assert_eq!(takeover, Reply::Simple("OK".into()));
    let promoted = eventually(Duration::from_secs(20), || {
        cluster.nodes()[replica].info("replication").is_ok_and(|i| i.iter().any(|(k, v)| k == "role" && v == "master"))
    });
    assert!(promoted, "the replica took the slots over");
    let kept = cluster.nodes()[replica].command(&["GET", fence_key]).expect("get");
    let third = fences[2].to_string().into_bytes();
    assert_eq!(kept, Reply::Bulk(Some(third)), "the new master has the third fence, not the lost fourth");

    let after = take(&store, &lease, 5, true).await;
    assert!(after > lost, "fence {after} after the cluster failover, {lost} handed out before it: {fences:?}");
    fences.push(after);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "every fence larger than the last: {fences:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_standby_that_lost_the_last_fence_never_hands_it_out_again() {
    let mut pg = postgres();
    let config = PostgresConfig::new(pg.url()).timeouts(Duration::from_secs(5), Duration::from_secs(5));
    let store = PostgresStore::connect(config).await.expect("connect");
    let lease = LeaseName::job("nightly");

    let mut fences = Vec::new();
    for seed in 1..=3 {
        fences.push(take(&store, &lease, seed, true).await);
    }
    pg.copy_data();
    let lost = take(&store, &lease, 4, false).await;
    fences.push(lost);

    pg.revert_to_copy();
    let after = take(&store, &lease, 5, true).await;
    assert!(after > lost, "fence {after} after the standby took over, {lost} handed out before: {fences:?}");
    fences.push(after);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "every fence larger than the last: {fences:?}");
}

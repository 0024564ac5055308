//! drain-core's shared contract suites against a private redis-server and a private
//! 3-master Redis Cluster.

mod support;

use drain_core::testkit::contract;
use test_servers::{RedisCluster, RedisServer};

use support::{TokioClock, connect, connect_cluster, env};

#[tokio::test]
async fn standalone_passes_the_lease_contract() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let clock = TokioClock::new();
    contract::lease_store(&store, &env(&clock, "contract")).await;
}

#[tokio::test]
async fn standalone_passes_the_claim_contract() {
    let Some(redis) = RedisServer::start() else { return };
    let store = connect(&redis.url()).await;
    let clock = TokioClock::new();
    contract::claim_store(&store, &env(&clock, "contract")).await;
}

/// One cluster for both suites (forming one takes a few seconds). Both run at once,
/// on different prefixes, and no node may have answered `CROSSSLOT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_passes_the_lease_and_claim_contracts() {
    let Some(cluster) = RedisCluster::start(3) else { return };
    let store = connect_cluster(&cluster.urls()).await;
    let clock = TokioClock::new();
    let lease_env = env(&clock, "lease-contract");
    let claim_env = env(&clock, "claim-contract");
    tokio::join!(contract::lease_store(&store, &lease_env), contract::claim_store(&store, &claim_env));

    for node in cluster.nodes() {
        let errors = node.info("errorstats").expect("INFO errorstats");
        assert!(
            errors.iter().all(|(k, _)| k != "errorstat_CROSSSLOT"),
            "node {} answered CROSSSLOT: {errors:?}",
            node.port()
        );
    }
    // The keys really were spread: every node served drain commands.
    for node in cluster.nodes() {
        let calls = node.command_calls().expect("commandstats");
        assert!(
            calls.get("evalsha").copied().unwrap_or(0) + calls.get("get").copied().unwrap_or(0) > 0,
            "node {} served nothing: {calls:?}",
            node.port()
        );
    }
}

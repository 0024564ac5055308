//! drain-core's contract suites (leases, claims, owner peeks, the release wake-up,
//! drain stamps, fenced writes, concurrency and the error rules included) against a
//! private redis-server and a private 3-master Redis Cluster, each through three
//! stores as a fleet's processes would have them.

mod support;

use adapter_redis::RedisStore;
use drain_core::testkit::contract::{self, Checked};
use test_servers::{RedisCluster, RedisServer};

use support::{TokioClock, cluster_fleet, env, fleet, frozen};

/// Nothing skipped: the outage hook checks the error rules too.
fn all_checked(what: &str, checked: Checked) {
    assert!(checked.skipped.is_empty(), "{what}: skipped {:?}", checked.skipped);
}

/// A test that runs suites through three stores on a private server, the outage
/// hook on, nothing skipped.
macro_rules! suites {
    ($name:ident: $($what:literal => $suite:path),+) => {
        #[tokio::test]
        async fn $name() {
            let redis = RedisServer::start();
            let stores = fleet(&redis.url()).await;
            let all: Vec<&RedisStore> = stores.iter().collect();
            let clock = TokioClock::new();
            let outage = frozen(redis.freezer(), &clock);
            let env = env(&clock, "").outage(&outage).instances(&all);
            $(all_checked($what, $suite(all[0], &env).await.unwrap_or_else(|v| panic!("{v}")));)+
        }
    };
}

suites!(standalone_passes_the_lease_contract: "lease" => contract::lease_store);
suites!(standalone_passes_the_claim_contract: "claim" => contract::claim_store);
suites!(standalone_passes_the_fence_marks_contract: "fence" => contract::fence_marks);
suites!(standalone_passes_the_owner_claims_and_release_wake_contracts: "owners" => contract::owner_claims, "wake" => contract::release_wake);
suites!(standalone_passes_the_drain_stamps_contract: "stamps" => contract::drain_stamps);
suites!(standalone_passes_the_fenced_writes_contract: "writes" => contract::fenced_writes);

/// One cluster for every suite (forming one takes a few seconds). They run at once
/// on one store under different names (the outage, which freezes every node, after
/// them), and no node may have answered `CROSSSLOT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_passes_every_store_contract() {
    let cluster = RedisCluster::start(3);
    let stores = cluster_fleet(&cluster.urls()).await;
    let all: Vec<&RedisStore> = stores.iter().collect();
    let store = all[0];
    let clock = TokioClock::new();
    let envs = [
        env(&clock, "l-"),
        env(&clock, "c-"),
        env(&clock, "o-"),
        env(&clock, "w-"),
        env(&clock, "f-"),
        env(&clock, "m-"),
        env(&clock, "v-"),
    ]
    .map(|e| e.instances(&all));
    let (lease, claim, owners, wake, fence, stamps, writes) = tokio::join!(
        contract::lease_store(store, &envs[0]),
        contract::claim_store(store, &envs[1]),
        contract::owner_claims(store, &envs[2]),
        contract::release_wake(store, &envs[3]),
        contract::fence_marks(store, &envs[4]),
        contract::drain_stamps(store, &envs[5]),
        contract::fenced_writes(store, &envs[6]),
    );
    let all_suites = [
        ("lease", lease),
        ("claim", claim),
        ("owners", owners),
        ("wake", wake),
        ("fence", fence),
        ("stamps", stamps),
        ("writes", writes),
    ];
    for (what, r) in all_suites {
        r.unwrap_or_else(|v| panic!("{what}: {v}"));
    }
    // The error rules, one suite at a time, with every node frozen.
    let outage = frozen(cluster.freezer(), &clock);
    let env = env(&clock, "e-").concurrency(2, 1).outage(&outage).instances(&all);
    all_checked("lease", contract::lease_store(store, &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("claim", contract::claim_store(store, &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("owners", contract::owner_claims(store, &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("wake", contract::release_wake(store, &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("fence", contract::fence_marks(store, &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("stamps", contract::drain_stamps(store, &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("writes", contract::fenced_writes(store, &env).await.unwrap_or_else(|v| panic!("{v}")));

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

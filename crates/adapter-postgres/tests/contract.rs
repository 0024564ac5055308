//! drain-core's contract suites (leases, claims, owner peeks, the release wake-up,
//! drain stamps, fenced writes through `FencedTable`, concurrency and the error rules
//! included) against a private PostgreSQL, through three stores as a fleet's
//! processes would have them.

mod support;

use std::time::Duration;

use adapter_postgres::{FencedTable, PostgresStore};
use drain_core::testkit::contract::{self, Checked, ContractEnv};

use support::{TokioClock, env, fleet, frozen, server};

/// Nothing skipped: the outage hook checks the error rules too.
fn all_checked(what: &str, checked: Checked) {
    assert!(checked.skipped.is_empty(), "{what}: skipped {:?}", checked.skipped);
}

/// A test that runs suites through three stores on a private server, the outage
/// hook on, nothing skipped.
macro_rules! suites {
    ($name:ident: $($what:literal => $suite:path),+) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let pg = server();
            let stores = fleet(&pg.url()).await;
            let all: Vec<&PostgresStore> = stores.iter().collect();
            let clock = TokioClock::new();
            let outage = frozen(pg.freezer(), &clock);
            let env = env(&clock, "").outage(&outage).instances(&all);
            $(all_checked($what, $suite(all[0], &env).await.unwrap_or_else(|v| panic!("{v}")));)+
        }
    };
}

suites!(passes_the_lease_contract: "lease" => contract::lease_store);
suites!(passes_the_claim_contract: "claim" => contract::claim_store);
suites!(passes_the_fence_marks_contract: "fence" => contract::fence_marks);
suites!(passes_the_owner_claims_and_release_wake_contracts: "owners" => contract::owner_claims, "wake" => contract::release_wake);
suites!(passes_the_drain_stamps_contract: "stamps" => contract::drain_stamps);

/// `PostgresStore::fenced`, as `FencedTable` writes through it, keeps the fenced
/// writes' contract: three instances, each with a connection of its own, the server
/// frozen for the error rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_table_passes_the_fenced_writes_contract() {
    let pg = server();
    let mut tables = Vec::new();
    for store in fleet(&pg.url()).await {
        tables.push(FencedTable::create(store, "fenced_values").await.expect("the values' table"));
    }
    let all: Vec<&FencedTable> = tables.iter().collect();
    let clock = TokioClock::new();
    let outage = frozen(pg.freezer(), &clock);
    let env = ContractEnv::new(&clock).short_ttl(Duration::from_millis(300)).outage(&outage).instances(&all);
    all_checked("writes", contract::fenced_writes(all[0], &env).await.unwrap_or_else(|v| panic!("{v}")));
}

/// Every suite at once on one server under different names: the functions keep
/// their promises while other callers work on the same tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_suite_at_once_on_one_store() {
    let pg = server();
    let stores = fleet(&pg.url()).await;
    let all: Vec<&PostgresStore> = stores.iter().collect();
    let store = all[0];
    let clock = TokioClock::new();
    let envs = [env(&clock, "l-"), env(&clock, "c-"), env(&clock, "o-"), env(&clock, "w-"), env(&clock, "f-")]
        .map(|e| e.instances(&all));
    let (lease, claim, owners, wake, fence) = tokio::join!(
        contract::lease_store(store, &envs[0]),
        contract::claim_store(store, &envs[1]),
        contract::owner_claims(store, &envs[2]),
        contract::release_wake(store, &envs[3]),
        contract::fence_marks(store, &envs[4]),
    );
    for (what, r) in [("lease", lease), ("claim", claim), ("owners", owners), ("wake", wake), ("fence", fence)] {
        r.unwrap_or_else(|v| panic!("{what}: {v}"));
    }
}

/// The outage recipe for a server others use: the stores under test connect through
/// a proxy, and the outage holds the proxy's traffic (their connections alone
/// frozen) instead of freezing the server. The error rules pass as with SIGSTOP, and
/// the server answers another client meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_error_rules_pass_behind_a_held_proxy_on_a_server_that_keeps_serving() {
    let pg = server();
    let direct = pg.url();
    let port: u16 =
        direct.rsplit(':').next().and_then(|p| p.split('/').next()).and_then(|p| p.parse().ok()).expect("port");
    let proxy = test_servers::proxy::Proxy::start(([127, 0, 0, 1], port).into());
    let url = direct.replace(&format!(":{port}/"), &format!(":{}/", proxy.port()));
    // Longer timeouts than the other suites': a call that timed out behind the held
    // proxy leaves a backend the next call must end first, and that wait is half the
    // timeout (250 ms at 500 ms was too short on a loaded machine).
    let config =
        || adapter_postgres::PostgresConfig::new(&url).timeouts(Duration::from_secs(2), Duration::from_secs(2));
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(PostgresStore::connect(config()).await.expect("connect through the proxy"));
    }
    let all: Vec<&PostgresStore> = stores.iter().collect();
    let clock = TokioClock::new();
    let others = pg.sql_handle();
    let outage = drain_core::testkit::OutageBy::new(
        || {
            proxy.hold();
            // The server itself still answers a client that does not go through it.
            let answered = others.sql("SELECT 1", Duration::from_secs(5));
            assert!(answered.is_ok(), "the shared server answers others during the outage: {answered:?}");
        },
        || proxy.release(),
        &clock,
        Duration::from_millis(100),
    );
    let env = env(&clock, "proxied-").outage(&outage).instances(&all);
    all_checked("lease", contract::lease_store(all[0], &env).await.unwrap_or_else(|v| panic!("{v}")));
    all_checked("stamps", contract::drain_stamps(all[0], &env).await.unwrap_or_else(|v| panic!("{v}")));
}

//! drain-core's contract suites (leases, claims, owner peeks, the release wake-up,
//! concurrency and the error rules included) against a private PostgreSQL, through
//! three stores as a fleet's processes would have them.

mod support;

use adapter_postgres::PostgresStore;
use drain_core::testkit::contract::{self, Checked};

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
suites!(passes_the_drain_marks_contract: "marks" => contract::drain_stamps);

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

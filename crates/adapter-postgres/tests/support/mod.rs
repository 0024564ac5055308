//! Shared test helpers: a private PostgreSQL with pg_stat_statements, stores on it,
//! an outage that freezes the server, statement counts from pg_stat_statements.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use drain_core::LeaseToken;
use drain_core::testkit::OutageBy;
use drain_core::testkit::contract::{ContractEnv, Outage};
use test_servers::{Freezer, PostgresServer};

/// Real time for the contract suites: the shared clock on Tokio.
pub use drain_runtime::TokioClock;

/// A private server with pg_stat_statements created in database `postgres`.
pub fn server() -> PostgresServer {
    let pg = PostgresServer::start();
    pg.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").expect("create pg_stat_statements");
    pg
}

/// The contract environment: short TTL 300 ms on a real clock, names under `names`.
pub fn env<'a>(clock: &'a TokioClock, names: &'a str) -> ContractEnv<'a, PostgresStore> {
    ContractEnv::new(clock).names(names).short_ttl(Duration::from_millis(300))
}

/// An outage for the contract suites: the private server and its backends frozen with SIGSTOP, so every
/// call waits out its timeout; after the thaw, 100 ms for the server to work
/// through what queued up.
pub fn frozen(freezer: Freezer, clock: &TokioClock) -> impl Outage + '_ {
    let thaw = freezer.clone();
    OutageBy::new(move || freezer.freeze(), move || thaw.thaw(), clock, Duration::from_millis(100))
}

/// Short timeouts, for the tests that make the server fail (`behaviour.rs`,
/// `contract.rs`): they stay fast.
pub fn short_config(url: &str) -> PostgresConfig {
    PostgresConfig::new(url).timeouts(Duration::from_millis(500), Duration::from_millis(500))
}

/// The default timeouts, for tests that time nothing out: on a loaded machine a
/// connection can take longer than [`short_config`]'s 500 ms.
pub fn config(url: &str) -> PostgresConfig {
    PostgresConfig::new(url)
}

/// Connect with [`config`]'s default timeouts.
pub async fn connect(url: &str) -> PostgresStore {
    connect_with(config(url)).await
}

/// Connect with [`short_config`]'s short timeouts.
pub async fn connect_short(url: &str) -> PostgresStore {
    connect_with(short_config(url)).await
}

/// Connecting also creates or upgrades the schema, which a loaded machine can take
/// longer than a short timeout for: a temporary failure is tried again (the schema's
/// steps are idempotent), a few times.
async fn connect_with(config: PostgresConfig) -> PostgresStore {
    let mut attempt = 0;
    loop {
        match PostgresStore::connect(config.clone()).await {
            Ok(store) => return store,
            Err(e) if e.is_temporary() && attempt < 5 => attempt += 1,
            Err(e) => panic!("connect to the private PostgreSQL: {e:?}"),
        }
    }
}

/// Three stores on one server, each with connections of its own, as three processes
/// of a fleet: the contract suites spread their concurrent callers over them.
pub async fn fleet(url: &str) -> Vec<PostgresStore> {
    vec![connect_short(url).await, connect_short(url).await, connect_short(url).await]
}

/// A token from a fixed seed.
pub fn token(instance: &str, seed: u64) -> LeaseToken {
    LeaseToken::generate(instance, &mut drain_core::testkit::TestRng::new(seed))
}

/// Calls per statement of drain's schema `schema` from pg_stat_statements, keyed by
/// the function called (`acquire`, `claim_batch`, …; `other` for anything else).
/// Left out: these reads themselves, and the question a new connection asks once
/// (which backend it is), which is its setup, not an operation's.
pub fn calls_in(pg: &PostgresServer, schema: &str) -> BTreeMap<String, u64> {
    let rows = pg
        .sql(
            "SELECT query, calls FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat_statements%' \
             AND query NOT ILIKE '%pid = pg_backend_pid()%'",
        )
        .expect("read pg_stat_statements");
    let mut out = BTreeMap::new();
    for row in rows {
        let (Some(query), Some(calls)) = (&row[0], &row[1]) else { continue };
        let calls: u64 = calls.parse().expect("calls is a number");
        let marker = format!("{schema}.");
        let name = query
            .find(&marker)
            .map(|at| query[at + marker.len()..].split('(').next().unwrap_or("").to_owned())
            .unwrap_or_else(|| "other".to_owned());
        *out.entry(name).or_insert(0) += calls;
    }
    out
}

/// Forget every statement count.
pub fn reset_stats(pg: &PostgresServer) {
    pg.sql("SELECT pg_stat_statements_reset()").expect("reset pg_stat_statements");
}

/// Store round trips recorded by an observer.
pub fn round_trips(observer: &drain_core::testkit::RecordingObserver) -> usize {
    observer.count(|e| matches!(e, drain_core::Event::StoreOp { .. }))
}

/// A store with a recording observer.
pub fn observed(store: PostgresStore) -> (PostgresStore, Arc<drain_core::testkit::RecordingObserver>) {
    let observer = Arc::new(drain_core::testkit::RecordingObserver::new());
    (store.with_observer(observer.clone()), observer)
}

/// A count map from pairs, for assertions.
pub fn calls(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

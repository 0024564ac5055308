//! Shared test helpers: the contract environment on the shared real-time clock, an
//! outage that freezes the private servers, store construction, command counting
//! from `INFO commandstats`.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use drain_core::LeaseToken;
use drain_core::testkit::OutageBy;
use drain_core::testkit::contract::{ContractEnv, Outage};
use test_servers::Freezer;

/// Real time for the contract suites: the shared clock on Tokio.
pub use drain_runtime::TokioClock;

/// The contract environment: short TTL 300 ms on a real clock, names under `names`.
pub fn env<'a>(clock: &'a TokioClock, names: &'a str) -> ContractEnv<'a, RedisStore> {
    ContractEnv::new(clock).names(names).short_ttl(Duration::from_millis(300))
}

/// An outage for the contract suites: the private server (or every node of a
/// private Cluster) frozen with SIGSTOP, so every
/// call waits out its timeout; after the thaw, 100 ms for the server to work
/// through what queued up.
pub fn frozen(freezer: Freezer, clock: &TokioClock) -> impl Outage + '_ {
    let thaw = freezer.clone();
    OutageBy::new(move || freezer.freeze(), move || thaw.thaw(), clock, Duration::from_millis(100))
}

/// Short timeouts so failure tests stay fast.
pub fn config(url: &str) -> RedisConfig {
    RedisConfig::new(url).timeouts(Duration::from_millis(500), Duration::from_millis(500))
}

pub async fn connect(url: &str) -> RedisStore {
    RedisStore::connect(config(url)).await.expect("connect to the private redis-server")
}

/// A store under its own key prefix.
pub async fn connect_prefixed(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect(config(url).key_prefix(prefix)).await.expect("connect to the private redis-server")
}

pub async fn connect_cluster(urls: &[String]) -> RedisStore {
    RedisStore::connect(config(&urls.join(",")).cluster(true)).await.expect("connect to the private cluster")
}

/// Three stores on one server, each with connections of its own, as three processes
/// of a fleet: the contract suites spread their concurrent callers over them.
pub async fn fleet(url: &str) -> Vec<RedisStore> {
    vec![connect(url).await, connect(url).await, connect(url).await]
}

/// [`fleet`] on a Cluster.
pub async fn cluster_fleet(urls: &[String]) -> Vec<RedisStore> {
    vec![connect_cluster(urls).await, connect_cluster(urls).await, connect_cluster(urls).await]
}

/// A token from a fixed seed.
pub fn token(instance: &str, seed: u64) -> LeaseToken {
    LeaseToken::generate(instance, &mut drain_core::testkit::TestRng::new(seed))
}

/// `after - before` per command, without the `INFO` calls that read the stats and
/// the connection setup of the harness itself.
pub fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .filter_map(|(k, &v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// A command-count map from pairs, for assertions.
pub fn calls(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// Store round trips recorded by an observer.
pub fn round_trips(observer: &drain_core::testkit::RecordingObserver) -> usize {
    observer.count(|e| matches!(e, drain_core::Event::StoreOp { .. }))
}

/// A store with a recording observer.
pub fn observed(store: RedisStore) -> (RedisStore, Arc<drain_core::testkit::RecordingObserver>) {
    let observer = Arc::new(drain_core::testkit::RecordingObserver::new());
    (store.with_observer(observer.clone()), observer)
}

/// CRC16/XMODEM of the hash tag, mod 16384: the Redis Cluster slot.
pub fn slot(key: &str) -> u16 {
    let tag = adapter_redis::keys::hash_tag(key);
    let mut crc: u16 = 0;
    for &b in tag.as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

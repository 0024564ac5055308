//! Lease cycles per second (acquire + release, as `crates/adapter-redis/benches/lease_cycle.rs`
//! counts a cycle) with 1 and 16 concurrent tasks, for:
//!
//! * `adapter` — [`PostgresStore`] as shipped: one call of `drain.acquire(…)` and
//!   one of `drain.release(…)`, prepared statements, round robin over its default
//!   four tokio-postgres clients;
//! * `hand_written` — a bare tokio-postgres loop doing the same: four clients
//!   connected the same way, the same two statements prepared on each, each call
//!   on the next client round robin, with the same parameters; no timeouts, no
//!   reconnects, no error mapping: the floor of what this client allows;
//! * `hand_written_timed` — the same loop with each call under a Tokio timeout, as
//!   the adapter bounds every call: what the timers cost;
//! * `redis_adapter` — `RedisStore` on a private redis-server, for scale.
//!
//! Each task cycles on a lease of its own. The machine is shared, so each
//! (client, tasks) pair is measured in many rounds, and within a round the clients
//! alternate in short slices (a 10 ms warm-up, then a timed slice), each round in
//! another order (rotated, and reversed every other round, so that over 2n rounds
//! of n clients each client follows each other one equally often within a pass:
//! the slice after the Redis one meets backends that sat idle; `round_order` in
//! `crates/bench-support`), so that all of them meet the same noise; the median
//! round is reported, and each ratio is the median of the per-round ratios, with
//! its spread: the interquartile range of those ratios over their median (and
//! their full range). A PostgreSQL cycle (two write transactions) takes ten times
//! a Redis one, so the slices are longer than the Redis bench's, for enough cycles
//! per slice: `ci` length (the default): 5 rounds of 3 slices of 30 ms; `--full`:
//! 21 rounds of 6 slices of 80 ms (about a minute and a half in all). The goal:
//! the adapter at ≥ 0.9x the hand-written loop at 1 and 16 tasks.
//!
//! Then the server's own count (`pg_stat_statements`) of drain's statements is
//! checked against the cycles the clients counted: one `acquire` and one `release`
//! call per cycle, nothing else.
//!
//! Writes `<target>/bench/postgres.json` and prints a table. Runs on a
//! current-thread Tokio runtime (one client core; the servers get the other).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use adapter_redis::{RedisConfig, RedisStore};
use bench_support::lease::{self, LeaseClient, Length, Report};
use drain_core::LeaseToken;
use drain_core::ports::{Acquire, LeaseName, LeaseStore, Release};
use drain_core::testkit::TestRng;
use serde_json::{Value, json};
use test_servers::{PostgresServer, RedisServer};

const WARMUP: Duration = Duration::from_millis(10);
const TASKS: [usize; 2] = [1, 16];
const TTL: Duration = Duration::from_secs(30);
/// The prefix every client's rows carry (the adapter's default).
const PREFIX: &str = adapter_postgres::DEFAULT_KEY_PREFIX;
const CI: Length = Length { name: "ci", rounds: 5, slices: 3, run: Duration::from_millis(30) };
const FULL: Length = Length { name: "full", rounds: 21, slices: 6, run: Duration::from_millis(80) };

/// The hand-written loop's clients: each with the adapter's two statements
/// prepared, used round robin per call.
struct Hand {
    conns: Vec<(tokio_postgres::Client, tokio_postgres::Statement, tokio_postgres::Statement)>,
    next: AtomicUsize,
}

impl Hand {
    async fn connect(url: &str, n: usize) -> Hand {
        let schema = adapter_postgres::DEFAULT_SCHEMA;
        let mut conns = Vec::new();
        for _ in 0..n {
            let mut cfg: tokio_postgres::Config = url.parse().expect("the URL parses");
            cfg.application_name("hand_written");
            let (client, connection) = cfg.connect(tokio_postgres::NoTls).await.expect("connect");
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let acquire = client
                .prepare(&format!(
                    "SELECT acquired, fence, holder, remaining_us FROM {schema}.acquire($1, $2, $3, $4, $5, $6)"
                ))
                .await
                .expect("prepare acquire");
            let release =
                client.prepare(&format!("SELECT {schema}.release($1, $2, $3, $4)")).await.expect("prepare release");
            conns.push((client, acquire, release));
        }
        Hand { conns, next: AtomicUsize::new(0) }
    }

    fn pick(&self) -> &(tokio_postgres::Client, tokio_postgres::Statement, tokio_postgres::Statement) {
        &self.conns[self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()]
    }
}

#[derive(Clone)]
enum Client {
    Adapter(PostgresStore),
    HandWritten(Arc<Hand>),
    /// The hand-written loop with each call under a timeout, as the adapter bounds
    /// each call: what the timers cost.
    HandTimed(Arc<Hand>),
    Redis(RedisStore),
}

impl LeaseClient for Client {
    type Task = Task;

    fn name(&self) -> &'static str {
        match self {
            Client::Adapter(_) => "adapter",
            Client::HandWritten(_) => "hand_written",
            Client::HandTimed(_) => "hand_written_timed",
            Client::Redis(_) => "redis_adapter",
        }
    }

    fn task(&self, n: usize) -> Task {
        Task::new(self.name(), n)
    }

    async fn cycle(&mut self, task: &Task) {
        match self {
            Client::Adapter(store) => lease_cycle(store, task).await,
            Client::Redis(store) => lease_cycle(store, task).await,
            Client::HandTimed(hand) => {
                let (kind, name) = (task.key.kind().as_str(), task.key.name());
                let (token, holder) = (task.token.as_str(), task.token.holder());
                let ttl = i64::try_from(TTL.as_micros()).unwrap_or(i64::MAX);
                let d = Duration::from_secs(1);
                let (client, acquire, _) = hand.pick();
                let row =
                    tokio::time::timeout(d, client.query(acquire, &[&PREFIX, &kind, &name, &token, &holder, &ttl]))
                        .await
                        .expect("in time")
                        .expect("acquire");
                assert!(row[0].get::<_, bool>(0), "acquired");
                let (client, _, release) = hand.pick();
                let row = tokio::time::timeout(d, client.query(release, &[&PREFIX, &kind, &name, &token]))
                    .await
                    .expect("in time")
                    .expect("release");
                assert!(row[0].get::<_, bool>(0), "released");
            }
            Client::HandWritten(hand) => {
                let (kind, name) = (task.key.kind().as_str(), task.key.name());
                let (token, holder) = (task.token.as_str(), task.token.holder());
                let ttl = i64::try_from(TTL.as_micros()).unwrap_or(i64::MAX);
                let (client, acquire, _) = hand.pick();
                let row =
                    client.query_one(acquire, &[&PREFIX, &kind, &name, &token, &holder, &ttl]).await.expect("acquire");
                assert!(row.get::<_, bool>(0), "acquired");
                let (client, _, release) = hand.pick();
                let row = client.query_one(release, &[&PREFIX, &kind, &name, &token]).await.expect("release");
                assert!(row.get::<_, bool>(0), "released");
            }
        }
    }
}

async fn lease_cycle(store: &dyn LeaseStore, task: &Task) {
    let a = store.acquire(&task.key, &task.token, TTL).await.expect("acquire");
    assert!(matches!(a, Acquire::Acquired { .. }), "{a:?}");
    assert_eq!(store.release(&task.key, &task.token).await.expect("release"), Release::Released);
}

/// One task's lease and token.
struct Task {
    key: LeaseName,
    token: LeaseToken,
}

impl Task {
    fn new(client: &str, n: usize) -> Self {
        let key = LeaseName::queue(format!("{client}-{n}"));
        let token = LeaseToken::generate("bench", &mut TestRng::new(n as u64));
        Task { key, token }
    }
}

/// Calls of drain's `acquire` and `release` since the last reset, from
/// pg_stat_statements; every other statement of the schema counted apart.
fn statement_calls(pg: &PostgresServer) -> (u64, u64, u64) {
    let rows = pg
        .sql("SELECT query, calls FROM pg_stat_statements WHERE query LIKE '%drain.%' AND query NOT LIKE '%pg_stat%'")
        .expect("read pg_stat_statements");
    let (mut acquire, mut release, mut other) = (0, 0, 0);
    for row in rows {
        let (Some(query), Some(calls)) = (&row[0], &row[1]) else { continue };
        let calls: u64 = calls.parse().expect("calls is a number");
        if query.contains("drain.acquire(") {
            acquire += calls;
        } else if query.contains("drain.release(") {
            release += calls;
        } else {
            other += calls;
        }
    }
    (acquire, release, other)
}

fn main() {
    let len = Length::from_args(CI, FULL);
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    if !test_servers::postgres_installed() {
        write(&json!({"bench": "postgres_lease_cycle", "skipped": "PostgreSQL is not installed"}));
        return;
    }
    if !test_servers::redis_installed() {
        write(&json!({"bench": "postgres_lease_cycle", "skipped": "redis-server is not installed"}));
        return;
    }
    let (pg, redis) = (PostgresServer::start(), RedisServer::start());
    pg.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").expect("pg_stat_statements");
    let version = pg
        .sql("SHOW server_version")
        .ok()
        .and_then(|rows| rows.into_iter().next())
        .and_then(|row| row.into_iter().next().flatten())
        .unwrap_or_default();
    let connections = adapter_postgres::DEFAULT_CONNECTIONS;
    let (rounds, total_cycles) = rt.block_on(async {
        let store = PostgresStore::connect(PostgresConfig::new(pg.url())).await.expect("connect");
        let hand = Hand::connect(&pg.url(), connections).await;
        let redis_store = RedisStore::connect(RedisConfig::new(redis.url())).await.expect("connect to redis");
        let hand = Arc::new(hand);
        // `cargo bench --bench postgres -- adapter hand_written` runs only those clients.
        let clients = lease::chosen([
            Client::Adapter(store),
            Client::HandWritten(hand.clone()),
            Client::HandTimed(hand),
            Client::Redis(redis_store),
        ]);
        pg.sql("SELECT pg_stat_statements_reset()").expect("reset pg_stat_statements");
        let rounds = lease::run(&clients, &TASKS, WARMUP, &len, None).await;
        // The cycles PostgreSQL served: every client's but the Redis one's.
        let on_postgres = clients.iter().zip(&rounds.cycles).filter(|(c, _)| !matches!(c, Client::Redis(_)));
        let total_cycles: usize = on_postgres.map(|(_, n)| n).sum();
        (rounds, total_cycles)
    });
    let (acquires, releases, other) = statement_calls(&pg);
    let per_cycle = u64::try_from(total_cycles).unwrap_or(u64::MAX);
    assert_eq!(
        (acquires, releases, other),
        (per_cycle, per_cycle, 0),
        "one acquire and one release call per cycle on the server, nothing else"
    );

    let results = rounds.medians();
    lease::print_table(&results, 16);
    let ratios = rounds.ratios(&TASKS, "adapter", &["hand_written", "hand_written_timed", "redis_adapter"]);
    let server = format!("postgresql {version}");
    let report = Report { bench: "postgres_lease_cycle", build, server: &server, warmup: WARMUP, length: &len };
    let mut json = report.json(&results, &ratios);
    json.insert("connections".to_owned(), json!(connections));
    json.insert("goal".to_owned(), json!("adapter >= 0.9x hand_written at 1 and 16 tasks"));
    let calls = json!({"acquire": acquires, "release": releases, "other": other, "cycles": total_cycles});
    json.insert("statement_calls".to_owned(), calls);
    write(&Value::Object(json));
}

fn write(json: &Value) {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    bench_support::write(env!("CARGO_TARGET_TMPDIR"), "postgres", json);
}

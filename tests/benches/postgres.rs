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
//! another order (rotated, and reversed every other round, so that each client
//! follows each other one equally often), so that all of them meet the same noise; the
//! median round is reported, and each ratio is the median of the per-round ratios,
//! with its spread: the interquartile range of those ratios over their median (and
//! their full range). A PostgreSQL cycle (two write transactions) takes ten times a
//! Redis one, so the slices are longer than the Redis bench's, for enough cycles per
//! slice: `ci` length (the default): 5 rounds of 3 slices of 30 ms; `--full`: 21
//! rounds of 6 slices of 80 ms (about a minute and a half in all). The goal: the adapter at
//! ≥ 0.9x the hand-written loop at 1 and 16 tasks.
//!
//! Then the server's own count (`pg_stat_statements`) of drain's statements is
//! checked against the cycles the clients counted: one `acquire` and one `release`
//! call per cycle, nothing else.
//!
//! Writes `<target>/bench/postgres.json` and prints a table. Runs on a
//! current-thread Tokio runtime (one client core; the servers get the other).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use adapter_postgres::{PostgresConfig, PostgresStore};
use adapter_redis::{RedisConfig, RedisStore};
use drain_core::LeaseToken;
use drain_core::ports::{Acquire, LeaseName, LeaseStore, Release};
use drain_core::testkit::TestRng;
use test_servers::{PostgresServer, RedisServer};

const WARMUP: Duration = Duration::from_millis(10);
const TASKS: [usize; 2] = [1, 16];
const TTL: Duration = Duration::from_secs(30);
/// The prefix every client's rows carry (the adapter's default).
const PREFIX: &str = adapter_postgres::DEFAULT_KEY_PREFIX;

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

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Adapter(_) => "adapter",
            Client::HandWritten(_) => "hand_written",
            Client::HandTimed(_) => "hand_written_timed",
            Client::Redis(_) => "redis_adapter",
        }
    }

    async fn cycle(&self, task: &Task) {
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

/// How long the bench runs: `ci` (the default) or `full` (`--full`).
struct Length {
    name: &'static str,
    rounds: usize,
    /// Slices per client per round.
    slices: usize,
    /// Timed length of one slice.
    run: Duration,
}

impl Length {
    fn from_args() -> Length {
        if std::env::args().any(|a| a == "--full") {
            Length { name: "full", rounds: 21, slices: 6, run: Duration::from_millis(80) }
        } else {
            Length { name: "ci", rounds: 5, slices: 3, run: Duration::from_millis(30) }
        }
    }
}

struct Measured {
    client: &'static str,
    tasks: usize,
    cycles: usize,
    per_sec: f64,
    p50_us: u64,
    p99_us: u64,
}

/// One slice: `tasks` tasks cycling for `run` after a short warm-up; the latency of
/// each cycle that started after the warm-up, in µs, and how many cycles ran in all.
async fn slice(client: &Client, tasks: usize, run: Duration) -> (Vec<u64>, usize) {
    let start = Instant::now();
    let warm_until = start + WARMUP;
    let stop = warm_until + run;
    let handles: Vec<_> = (0..tasks)
        .map(|n| {
            let client = client.clone();
            let task = Task::new(client.name(), n);
            tokio::spawn(async move {
                let (mut latencies, mut cycles) = (Vec::new(), 0);
                loop {
                    let t0 = Instant::now();
                    if t0 >= stop {
                        break;
                    }
                    client.cycle(&task).await;
                    cycles += 1;
                    if t0 >= warm_until {
                        latencies.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                }
                (latencies, cycles)
            })
        })
        .collect();
    let (mut all, mut cycles) = (Vec::new(), 0);
    for h in handles {
        let (l, c) = h.await.expect("bench task");
        all.extend(l);
        cycles += c;
    }
    (all, cycles)
}

/// A round's figures for one client from its slices' latencies (`run` timed in all).
fn measured(client: &Client, tasks: usize, mut all: Vec<u64>, run: Duration) -> Measured {
    all.sort_unstable();
    let pct =
        |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or(0);
    Measured {
        client: client.name(),
        tasks,
        cycles: all.len(),
        per_sec: all.len() as f64 / run.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

fn write(json: &str) {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("bench").join("postgres.json");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("create target/bench");
    std::fs::write(&path, json).expect("write the bench JSON");
    println!("wrote {}", path.display());
}

/// Median, spread (interquartile range over the median) and full range of `v`.
fn spread(v: &[f64]) -> (f64, f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let median = at(0.5);
    (median, (at(0.75) - at(0.25)) / median, v[0], v[v.len() - 1])
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

/// The order of the clients' slices in round `round`: rotated by the round, and
/// reversed in odd rounds, so that each client follows each other one equally often
/// (the slice after another server's runs on a PostgreSQL whose backends sat idle:
/// with a fixed cyclic order one client always met that).
fn order(round: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).map(|k| (k + round / 2) % n).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

fn main() {
    let len = Length::from_args();
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let Some(pg) = PostgresServer::start() else {
        write("{\"bench\":\"postgres_lease_cycle\",\"skipped\":\"PostgreSQL is not installed\"}\n");
        return;
    };
    let Some(redis) = RedisServer::start() else {
        write("{\"bench\":\"postgres_lease_cycle\",\"skipped\":\"redis-server is not installed\"}\n");
        return;
    };
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
        let clients = [
            Client::Adapter(store),
            Client::HandWritten(hand.clone()),
            Client::HandTimed(hand),
            Client::Redis(redis_store),
        ];
        // `cargo bench --bench postgres -- adapter hand_written` runs only those clients.
        let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
        let clients: Vec<Client> =
            clients.into_iter().filter(|c| only.is_empty() || only.iter().any(|o| o == c.name())).collect();
        pg.sql("SELECT pg_stat_statements_reset()").expect("reset pg_stat_statements");
        let mut total_cycles = 0;
        let mut rounds: Vec<Vec<Measured>> = (0..clients.len() * TASKS.len()).map(|_| Vec::new()).collect();
        for round in 0..len.rounds {
            for (t, tasks) in TASKS.into_iter().enumerate() {
                let mut lat: Vec<Vec<u64>> = vec![Vec::new(); clients.len()];
                for _ in 0..len.slices {
                    for c in order(round, clients.len()) {
                        let (l, cycles) = slice(&clients[c], tasks, len.run).await;
                        lat[c].extend(l);
                        if !matches!(clients[c], Client::Redis(_)) {
                            total_cycles += cycles;
                        }
                    }
                }
                for (c, l) in lat.into_iter().enumerate() {
                    let timed = len.run * u32::try_from(len.slices).unwrap_or(1);
                    rounds[t * clients.len() + c].push(measured(&clients[c], tasks, l, timed));
                }
            }
        }
        (rounds, total_cycles)
    });
    let (acquires, releases, other) = statement_calls(&pg);
    let per_cycle = u64::try_from(total_cycles).unwrap_or(u64::MAX);
    assert_eq!(
        (acquires, releases, other),
        (per_cycle, per_cycle, 0),
        "one acquire and one release call per cycle on the server, nothing else"
    );

    let per_round = |client: &str, tasks: usize| -> Option<&Vec<Measured>> {
        rounds.iter().find(|r| r.first().is_some_and(|m| m.client == client && m.tasks == tasks))
    };
    // The median round of each pair.
    let results: Vec<&Measured> = rounds
        .iter()
        .map(|r| {
            let mut sorted: Vec<&Measured> = r.iter().collect();
            sorted.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
            sorted[sorted.len() / 2]
        })
        .collect();
    println!("{:<16} {:>5} {:>12} {:>9} {:>9}", "client", "tasks", "cycles/s", "p50 µs", "p99 µs");
    for r in &results {
        println!("{:<16} {:>5} {:>12.0} {:>9} {:>9}", r.client, r.tasks, r.per_sec, r.p50_us, r.p99_us);
    }
    let mut json = format!(
        "{{\"bench\":\"postgres_lease_cycle\",\"length\":\"{}\",\"build\":\"{build}\",\"server\":\"postgresql {version}\",\"connections\":{connections},\"runtime\":\"tokio current_thread\",\"warmup_ms\":{},\"run_ms\":{},\"slices_per_round\":{},\"rounds\":{},\"statistic\":\"median round; ratios: median of per-round ratios, spread = interquartile range / median\",\"goal\":\"adapter >= 0.9x hand_written at 1 and 16 tasks\",\"statement_calls\":{{\"acquire\":{acquires},\"release\":{releases},\"other\":{other},\"cycles\":{total_cycles}}},\"results\":[",
        len.name,
        WARMUP.as_millis(),
        len.run.as_millis(),
        len.slices,
        len.rounds
    );
    for (i, r) in results.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            json,
            "{sep}{{\"client\":\"{}\",\"tasks\":{},\"cycles\":{},\"cycles_per_sec\":{:.0},\"p50_us\":{},\"p99_us\":{}}}",
            r.client, r.tasks, r.cycles, r.per_sec, r.p50_us, r.p99_us
        );
    }
    let (mut ratios, mut spreads) = (Vec::new(), Vec::new());
    for tasks in TASKS {
        let Some(adapter) = per_round("adapter", tasks) else { continue };
        for other in ["hand_written", "hand_written_timed", "redis_adapter"] {
            let Some(base) = per_round(other, tasks) else { continue };
            let each: Vec<f64> = adapter.iter().zip(base).map(|(a, b)| a.per_sec / b.per_sec.max(1.0)).collect();
            let (ratio, iqr, lo, hi) = spread(&each);
            ratios.push(format!("\"adapter_vs_{other}_{tasks}_tasks\":{ratio:.3}"));
            spreads.push(format!(
                "\"adapter_vs_{other}_{tasks}_tasks\":{{\"iqr_over_median\":{iqr:.3},\"min\":{lo:.3},\"max\":{hi:.3}}}"
            ));
            println!(
                "adapter / {other} at {tasks} task(s): {ratio:.3}x (spread {:.1} %, range {lo:.3}-{hi:.3})",
                iqr * 100.0
            );
        }
    }
    json.push_str("],\"ratios\":{");
    json.push_str(&ratios.join(","));
    json.push_str("},\"ratio_spread\":{");
    json.push_str(&spreads.join(","));
    json.push_str("}}\n");
    write(&json);
}

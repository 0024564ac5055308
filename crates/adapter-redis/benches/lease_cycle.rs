//! Lease cycles per second (acquire + release) against one private redis-server, with
//! 1 and 16 concurrent tasks, for:
//!
//! * `adapter` — [`RedisStore`] as shipped: `EVALSHA acquire` + `EVALSHA release` on
//!   one shared multiplexed connection;
//! * `hand_written` — a bare redis-rs loop sending the same two `EVALSHA`s on a
//!   `MultiplexedConnection`: the floor of what Redis allows through this client;
//! * `hand_written_manager` — the same bare loop on redis-rs' reconnecting
//!   `ConnectionManager` (what the adapter uses), to attribute its cost;
//! * `rslock` — rslock 0.10 `lock` + `unlock` (no fence) on the same server.
//!
//! The machine is shared, so each (client, tasks) pair is measured in many rounds,
//! and within a round the clients alternate in short slices (a 5 ms warm-up, then
//! a timed slice), each round in another order, as `tests/benches/postgres.rs`
//! orders its clients (rotated, and reversed every other round, so that over 2n
//! rounds of n clients each client follows each other one equally often within a
//! pass: `round_order` in `crates/bench-support`), so that all of them meet the
//! same noise; the median round is reported, and each ratio is the median of the
//! per-round ratios, with its spread: the interquartile range of those ratios over
//! their median (and their full range). `ci` length (the default): 5 rounds of 3
//! slices of 20 ms; `--full`: 24 rounds (a multiple of 2n for the four clients) of
//! 24 slices of 20 ms (on a noisy machine 24 short slices kept the spreads of the
//! per-round ratios under 10 %, where 12 of 30 ms did not). `hand_written /
//! rslock` is reported too: what the fence costs, the adapter's code aside.
//!
//! Each slice's CPU time, the bench process's and the redis-server's (from
//! `schedstat`, `crates/bench-support/src/cpu.rs`), is charged to its client:
//! `cpu_per_cycle` in the JSON, client and server µs per cycle, warm-ups included.
//!
//! Then each store operation runs 100 times and its Redis commands and round trips
//! per operation are read from `INFO commandstats` and the store's events
//! (`support/commands.rs`).
//!
//! Writes `<target>/bench/redis.json` and prints a table. Runs on a
//! current-thread Tokio runtime (one client core; the server gets the other): about
//! 10 s in all at the `ci` length, 2.5 minutes at `--full`.

use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use bench_support::lease::{self, LeaseClient, Length, Report};
use drain_core::LeaseToken;
use drain_core::ports::LeaseName;
use drain_core::ports::{Acquire, LeaseStore, Release};
use drain_core::testkit::TestRng;
use redis::aio::ConnectionLike;
use serde_json::{Value, json};
use test_servers::{RedisServer, Reply};

#[path = "support/commands.rs"]
mod commands;

const WARMUP: Duration = Duration::from_millis(5);
const TASKS: [usize; 2] = [1, 16];
const TTL: Duration = Duration::from_secs(30);
const CI: Length = Length { name: "ci", rounds: 5, slices: 3, run: Duration::from_millis(20) };
const FULL: Length = Length { name: "full", rounds: 24, slices: 24, run: Duration::from_millis(20) };

#[derive(Clone)]
enum Client {
    Adapter(RedisStore),
    HandWritten(redis::aio::MultiplexedConnection),
    Manager(redis::aio::ConnectionManager),
    Rslock(rslock::LockManager),
}

impl LeaseClient for Client {
    type Task = Task;

    fn name(&self) -> &'static str {
        match self {
            Client::Adapter(_) => "adapter",
            Client::HandWritten(_) => "hand_written",
            Client::Manager(_) => "hand_written_manager",
            Client::Rslock(_) => "rslock",
        }
    }

    fn task(&self, n: usize) -> Task {
        Task::new(self.name(), n)
    }

    async fn cycle(&mut self, task: &Task) {
        match self {
            Client::Adapter(store) => {
                let a = store.acquire(&task.key, &task.token, TTL).await.expect("acquire");
                assert!(matches!(a, Acquire::Acquired { .. }), "{a:?}");
                assert_eq!(store.release(&task.key, &task.token).await.expect("release"), Release::Released);
            }
            Client::HandWritten(conn) => {
                let v = conn.req_packed_command(&task.acquire).await.expect("acquire");
                assert!(matches!(&v, redis::Value::Int(fence) if *fence > 0), "{v:?}");
                let v = conn.req_packed_command(&task.release).await.expect("release");
                assert_eq!(v, redis::Value::Int(1));
            }
            Client::Manager(conn) => {
                let v = conn.req_packed_command(&task.acquire).await.expect("acquire");
                assert!(matches!(&v, redis::Value::Int(fence) if *fence > 0), "{v:?}");
                let v = conn.req_packed_command(&task.release).await.expect("release");
                assert_eq!(v, redis::Value::Int(1));
            }
            Client::Rslock(lm) => {
                let lock = lm.lock(task.keys.lease.as_str(), TTL).await.expect("rslock lock");
                lm.unlock(&lock).await;
            }
        }
    }
}

/// One task's lease, its keys, token and prepared commands.
struct Task {
    key: LeaseName,
    keys: adapter_redis::LeaseKeys,
    token: LeaseToken,
    acquire: redis::Cmd,
    release: redis::Cmd,
}

impl Task {
    fn new(client: &str, n: usize) -> Self {
        let key = LeaseName::queue(format!("{client}-{n}"));
        let keys = adapter_redis::KeySpace::new(adapter_redis::DEFAULT_KEY_PREFIX).lease(&key);
        let token = LeaseToken::generate("bench", &mut TestRng::new(n as u64));
        // The adapter's acquire script: the fence half, then the acquire.
        let source = concat!(include_str!("../src/scripts/take_fence.lua"), include_str!("../src/scripts/acquire.lua"));
        let acquire_sha = redis::Script::new(source).get_hash().to_owned();
        let release_sha = redis::Script::new(include_str!("../src/scripts/release.lua")).get_hash().to_owned();
        let mut acquire = redis::cmd("EVALSHA");
        acquire
            .arg(acquire_sha)
            .arg(2)
            .arg(&keys.lease)
            .arg(&keys.fence)
            .arg(token.as_str())
            .arg(TTL.as_millis() as u64);
        let mut release = redis::cmd("EVALSHA");
        release.arg(release_sha).arg(1).arg(&keys.lease).arg(token.as_str());
        Task { key, keys, token, acquire, release }
    }
}

fn main() {
    let len = Length::from_args(CI, FULL);
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    if !test_servers::redis_installed() {
        write(&json!({"bench": "redis_lease_cycle", "skipped": "redis-server is not installed"}));
        return;
    }
    let redis = RedisServer::start();
    let version = match redis.command(&["INFO", "server"]) {
        Ok(Reply::Bulk(Some(text))) => String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:").map(|v| v.trim().to_owned()))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let (rounds, per_op) = rt.block_on(async {
        let store = RedisStore::connect(RedisConfig::new(redis.url())).await.expect("connect");
        let per_op = commands::measure(&redis, &store).await;
        let conn = redis::Client::open(redis.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let manager = redis::aio::ConnectionManager::new(redis::Client::open(redis.url()).expect("client"))
            .await
            .expect("manager");
        let rslock = rslock::LockManager::new(vec![redis.url()]);
        // `cargo bench --bench lease_cycle -- adapter rslock` runs only those clients.
        let clients = lease::chosen([
            Client::Adapter(store),
            Client::HandWritten(conn),
            Client::Manager(manager),
            Client::Rslock(rslock),
        ]);
        (lease::run(&clients, &TASKS, WARMUP, &len, redis.pid()).await, per_op)
    });
    let results = rounds.medians();

    println!("{:<18} {:>12} {:>12} {:>10}", "operation", "commands/op", "round trips", "specified");
    for r in &per_op {
        println!("{:<18} {:>12.2} {:>12.2} {:>10}", r.op, r.commands, r.round_trips, r.specified);
    }
    lease::print_table(&results, 26);
    let others = ["hand_written", "hand_written_manager", "rslock"];
    let mut ratios = rounds.ratios(&TASKS, "adapter", &others);
    // What the fence costs: the same two scripts as the adapter's, hand-written,
    // against rslock's plain `SET NX PX` acquire.
    ratios.extend(rounds.ratios(&TASKS, "hand_written", &["rslock"]));
    print_cpu(&rounds);
    let server = format!("redis {version}");
    let report = Report { bench: "redis_lease_cycle", build, server: &server, warmup: WARMUP, length: &len };
    let mut json = report.json(&results, &ratios);
    json.insert("commands".to_owned(), commands::json(&per_op));
    json.insert("cpu_per_cycle".to_owned(), Value::Object(rounds.cpu_json()));
    write(&Value::Object(json));
}

/// Client and server CPU per cycle of each pair, warm-ups included.
fn print_cpu(rounds: &lease::Rounds) {
    println!("{:<26} {:>5} {:>16} {:>16}", "client", "tasks", "client µs/cycle", "server µs/cycle");
    for (r, cpu) in rounds.pairs.iter().zip(&rounds.cpu) {
        let Some(first) = r.first() else { continue };
        let (client, server) = cpu.per_cycle_us();
        println!("{:<26} {:>5} {:>16.2} {:>16.2}", first.client, first.tasks, client, server);
    }
}

fn write(json: &Value) {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    bench_support::write(env!("CARGO_TARGET_TMPDIR"), "redis", json);
}

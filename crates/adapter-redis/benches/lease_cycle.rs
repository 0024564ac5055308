//! Lease cycles per second (acquire + release) against one private redis-server, with
//! 1 and 16 concurrent tasks, for:
//!
//! * `adapter` — [`RedisStore`] as shipped: `EVALSHA acquire` + `EVALSHA release` on
//!   one shared multiplexed connection;
//! * `adapter_scripts_via_pool` — the same two `EVALSHA`s, each on a connection
//!   checked out of deadpool-redis (`pool.get()` sends `UNWATCH` + `PING` to recycle):
//!   the design the adapter does not use on its hot path;
//! * `hand_written` — a bare redis-rs loop sending the same two `EVALSHA`s on a
//!   `MultiplexedConnection`: the floor of what Redis allows through this client;
//! * `hand_written_manager` — the same bare loop on redis-rs' reconnecting
//!   `ConnectionManager` (what the adapter uses), to attribute its cost;
//! * `rslock` — rslock 0.10 `lock` + `unlock` (no fence) on the same server.
//!
//! The machine is shared, so each (client, tasks) pair is measured in three
//! interleaved rounds of 0.5 s and the median round is reported.
//!
//! Then each store operation runs 100 times and its Redis commands and round trips
//! per operation are read from `INFO commandstats` and the store's events
//! (`support/commands.rs`).
//!
//! Writes `<target>/bench/redis.json` and prints a table. Runs on a
//! current-thread Tokio runtime (one client core; the server gets the other) for
//! about 25 s in all.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use adapter_redis::{RedisConfig, RedisStore};
use drain_core::LeaseToken;
use drain_core::ports::LeaseName;
use drain_core::ports::{Acquire, LeaseStore, Release};
use drain_core::testkit::TestRng;
use redis::aio::ConnectionLike;
use test_servers::{RedisServer, Reply};

#[path = "support/commands.rs"]
mod commands;

const WARMUP: Duration = Duration::from_millis(100);
const RUN: Duration = Duration::from_millis(500);
const ROUNDS: usize = 3;
const TASKS: [usize; 2] = [1, 16];
const TTL: Duration = Duration::from_secs(30);

#[derive(Clone)]
enum Client {
    Adapter(RedisStore),
    Pool(deadpool_redis::Pool),
    HandWritten(redis::aio::MultiplexedConnection),
    Manager(redis::aio::ConnectionManager),
    Rslock(rslock::LockManager),
}

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Adapter(_) => "adapter",
            Client::Pool(_) => "adapter_scripts_via_pool",
            Client::HandWritten(_) => "hand_written",
            Client::Manager(_) => "hand_written_manager",
            Client::Rslock(_) => "rslock",
        }
    }

    async fn cycle(&mut self, task: &Task) {
        match self {
            Client::Adapter(store) => {
                let a = store.acquire(&task.key, &task.token, TTL).await.expect("acquire");
                assert!(matches!(a, Acquire::Acquired { .. }), "{a:?}");
                assert_eq!(store.release(&task.key, &task.token).await.expect("release"), Release::Released);
            }
            Client::Pool(pool) => {
                let mut c = pool.get().await.expect("pool.get");
                let v = c.req_packed_command(&task.acquire).await.expect("acquire");
                assert!(matches!(&v, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1))), "{v:?}");
                drop(c);
                let mut c = pool.get().await.expect("pool.get");
                let v = c.req_packed_command(&task.release).await.expect("release");
                assert_eq!(v, redis::Value::Int(1));
            }
            Client::HandWritten(conn) => {
                let v = conn.req_packed_command(&task.acquire).await.expect("acquire");
                assert!(matches!(&v, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1))), "{v:?}");
                let v = conn.req_packed_command(&task.release).await.expect("release");
                assert_eq!(v, redis::Value::Int(1));
            }
            Client::Manager(conn) => {
                let v = conn.req_packed_command(&task.acquire).await.expect("acquire");
                assert!(matches!(&v, redis::Value::Array(a) if a.first() == Some(&redis::Value::Int(1))), "{v:?}");
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
        let acquire_sha = redis::Script::new(include_str!("../src/scripts/acquire.lua")).get_hash().to_owned();
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

struct Measured {
    client: &'static str,
    tasks: usize,
    cycles: usize,
    per_sec: f64,
    p50_us: u64,
    p99_us: u64,
}

async fn measure(client: &Client, tasks: usize) -> Measured {
    let start = Instant::now();
    let warm_until = start + WARMUP;
    let stop = warm_until + RUN;
    let handles: Vec<_> = (0..tasks)
        .map(|n| {
            let mut client = client.clone();
            let task = Task::new(client.name(), n);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let t0 = Instant::now();
                    if t0 >= stop {
                        break;
                    }
                    client.cycle(&task).await;
                    if t0 >= warm_until {
                        latencies.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                }
                latencies
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.expect("bench task"));
    }
    all.sort_unstable();
    let pct =
        |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or(0);
    Measured {
        client: client.name(),
        tasks,
        cycles: all.len(),
        per_sec: all.len() as f64 / RUN.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

fn out_path() -> std::path::PathBuf {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("bench").join("redis.json")
}

fn write(json: &str) {
    let path = out_path();
    std::fs::create_dir_all(path.parent().expect("parent")).expect("create target/bench");
    std::fs::write(&path, json).expect("write the bench JSON");
    println!("wrote {}", path.display());
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let Some(redis) = RedisServer::start() else {
        write("{\"bench\":\"redis_lease_cycle\",\"skipped\":\"redis-server is not installed\"}\n");
        return;
    };
    let version = match redis.command(&["INFO", "server"]) {
        Ok(Reply::Bulk(Some(text))) => String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:").map(|v| v.trim().to_owned()))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let (results, per_op) = rt.block_on(async {
        let store = RedisStore::connect(RedisConfig::new(redis.url())).await.expect("connect");
        let per_op = commands::measure(&redis, &store).await;
        let manager = deadpool_redis::Manager::new(redis.url()).expect("deadpool manager");
        let pool = deadpool_redis::Pool::builder(manager)
            .max_size(16)
            .runtime(deadpool_redis::Runtime::Tokio1)
            .build()
            .expect("pool");
        let conn = redis::Client::open(redis.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let manager = redis::aio::ConnectionManager::new(redis::Client::open(redis.url()).expect("client"))
            .await
            .expect("manager");
        let rslock = rslock::LockManager::new(vec![redis.url()]);
        let clients = [
            Client::Adapter(store),
            Client::Pool(pool),
            Client::HandWritten(conn),
            Client::Manager(manager),
            Client::Rslock(rslock),
        ];
        // `cargo bench --bench lease_cycle -- adapter rslock` runs only those clients.
        let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
        let clients: Vec<Client> =
            clients.into_iter().filter(|c| only.is_empty() || only.iter().any(|o| o == c.name())).collect();
        let mut rounds: Vec<Vec<Measured>> = (0..clients.len() * TASKS.len()).map(|_| Vec::new()).collect();
        for _ in 0..ROUNDS {
            for (t, tasks) in TASKS.into_iter().enumerate() {
                for (c, client) in clients.iter().enumerate() {
                    rounds[t * clients.len() + c].push(measure(client, tasks).await);
                }
            }
        }
        // The median round of each pair.
        let results = rounds
            .into_iter()
            .map(|mut r| {
                r.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
                r.swap_remove(r.len() / 2)
            })
            .collect::<Vec<_>>();
        (results, per_op)
    });

    println!("{:<18} {:>12} {:>12} {:>10}", "operation", "commands/op", "round trips", "specified");
    for r in &per_op {
        println!("{:<18} {:>12.2} {:>12.2} {:>10}", r.op, r.commands, r.round_trips, r.specified);
    }

    println!("{:<26} {:>5} {:>12} {:>9} {:>9}", "client", "tasks", "cycles/s", "p50 µs", "p99 µs");
    for r in &results {
        println!("{:<26} {:>5} {:>12.0} {:>9} {:>9}", r.client, r.tasks, r.per_sec, r.p50_us, r.p99_us);
    }
    let rate = |client: &str, tasks: usize| {
        results.iter().find(|r| r.client == client && r.tasks == tasks).map_or(0.0, |r| r.per_sec)
    };
    let mut json = format!(
        "{{\"bench\":\"redis_lease_cycle\",\"server\":\"redis {version}\",\"runtime\":\"tokio current_thread\",\"warmup_ms\":{},\"run_ms\":{},\"rounds\":{ROUNDS},\"statistic\":\"median round\",\"results\":[",
        WARMUP.as_millis(),
        RUN.as_millis()
    );
    for (i, r) in results.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            json,
            "{sep}{{\"client\":\"{}\",\"tasks\":{},\"cycles\":{},\"cycles_per_sec\":{:.0},\"p50_us\":{},\"p99_us\":{}}}",
            r.client, r.tasks, r.cycles, r.per_sec, r.p50_us, r.p99_us
        );
    }
    json.push_str("],\"ratios\":{");
    let mut ratios = Vec::new();
    for tasks in TASKS {
        let adapter = rate("adapter", tasks);
        for other in ["hand_written", "hand_written_manager", "rslock", "adapter_scripts_via_pool"] {
            let base = rate(other, tasks);
            let ratio = if base > 0.0 { adapter / base } else { 0.0 };
            ratios.push(format!("\"adapter_vs_{other}_{tasks}_tasks\":{ratio:.3}"));
            println!("adapter / {other} at {tasks} task(s): {ratio:.2}x");
        }
    }
    json.push_str(&ratios.join(","));
    json.push_str("},\"commands\":");
    json.push_str(&commands::json(&per_op));
    json.push_str("}\n");
    write(&json);
}

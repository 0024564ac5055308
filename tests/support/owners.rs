//! Owner drains with `drain owners` on a private redis-server or PostgreSQL: seed the
//! backlogs, run several processes at once, and check that every item was processed
//! exactly once. Shared by the end-to-end tests (`owners_redis.rs`,
//! `owners_postgres.rs`, which assert counts) and the benchmark (`benches/owners.rs`,
//! which reports drain times, wasted turns and item latencies).

use std::time::{Duration, Instant};

use test_servers::{PostgresServer, RedisServer, Reply};

use crate::{drain, output};

/// Where the owner drains run.
#[derive(Debug, Clone, Copy)]
pub enum Store<'a> {
    /// A private redis-server (`DRAIN_REDIS_URL`).
    Redis(&'a RedisServer),
    /// A private PostgreSQL and the URL the processes connect with (`DRAIN_STORE_URL`:
    /// the superuser's, or a role granted only `grant_sql`).
    Postgres(&'a PostgresServer, &'a str),
}

impl Store<'_> {
    /// The store's variable and URL for a `drain` process.
    fn url(&self) -> (&'static str, String) {
        match self {
            Store::Redis(server) => ("DRAIN_REDIS_URL", server.url()),
            Store::Postgres(_, url) => ("DRAIN_STORE_URL", (*url).to_owned()),
        }
    }

    /// `drain <args>` on this store.
    #[must_use]
    pub fn drain(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = drain();
        let (var, url) = self.url();
        cmd.args(args).env(var, url);
        cmd
    }

    /// One count from drain's backlog tables (PostgreSQL).
    fn count(pg: &PostgresServer, query: &str) -> i64 {
        let rows = pg.sql(query).unwrap_or_else(|e| panic!("{query}: {e}"));
        rows.first().and_then(|r| r[0].as_deref()).and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Items waiting in the backlogs.
    #[must_use]
    pub fn backlog(&self) -> i64 {
        match self {
            Store::Redis(server) => backlog(server),
            Store::Postgres(pg, _) => Self::count(pg, "SELECT count(*) FROM drain.backlog_items WHERE NOT in_flight"),
        }
    }

    /// Items taken by a turn and not recorded yet.
    #[must_use]
    pub fn in_flight(&self) -> i64 {
        match self {
            Store::Redis(server) => in_flight(server),
            Store::Postgres(pg, _) => Self::count(pg, "SELECT count(*) FROM drain.backlog_items WHERE in_flight"),
        }
    }

    /// `(items recorded, items recorded more than once)`.
    #[must_use]
    pub fn recorded(&self) -> (i64, i64) {
        match self {
            Store::Redis(server) => recorded(server),
            Store::Postgres(pg, _) => (
                Self::count(pg, "SELECT count(*) FROM drain.backlog_processed"),
                Self::count(pg, "SELECT count(*) FROM drain.backlog_processed WHERE times <> 1"),
            ),
        }
    }

    /// Seed `items` items over `owners` owners (a fresh store).
    pub fn seed(&self, owners: u32, items: u64) {
        let seed =
            self.drain(&["owners", "--owners", &owners.to_string(), "--seed", &items.to_string(), "--seed-only"]);
        let out = output(seed, LIMIT);
        assert!(out.status.success(), "seeding failed: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(self.backlog(), items as i64, "seeded");
    }
}

/// The longest any one `drain` command may take.
pub const LIMIT: Duration = Duration::from_secs(60);

/// One workload: `processes` × `drain owners` over `owners` backlogs of `items` items.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// `drain owners` processes run at once.
    pub processes: usize,
    /// Owner backlogs.
    pub owners: u32,
    /// Items spread over them.
    pub items: u64,
}

/// The workload: 4 processes, 200 owners, 20,000 items.
pub const FLEET: Workload = Workload { processes: 4, owners: 200, items: 20_000 };

/// What one run found, summed over the processes (`drain_ms`: the slowest one).
#[derive(Debug, Clone, Default)]
pub struct OwnerRun {
    /// Items the processes say they processed.
    pub processed: u64,
    /// Turns that lost the owner's claim race.
    pub claim_busy: u64,
    /// Turns that worked items.
    pub productive: u64,
    /// Turns that took the claim and found the backlog empty.
    pub done: u64,
    /// Turns run.
    pub turns: u64,
    /// Owners peeked.
    pub peeks: u64,
    /// Release notifications published to a waiter.
    pub wakes_sent: u64,
    /// Release notifications received.
    pub releases_heard: u64,
    /// Notifications that ended a claim wait.
    pub release_wakes: u64,
    /// Requests dropped as served by a later drain (drain stamps).
    pub skipped_served: u64,
    /// Drain time of the slowest process (its own clock, quantised by the pass).
    pub drain_ms: u64,
    /// From spawning the processes to the last item any of them recorded.
    pub fleet_ms: u64,
    /// Wall time of the whole run.
    pub wall: Duration,
    /// Per item, milliseconds from the fleet's start (the first pass of any process)
    /// to the record of its batch, sorted.
    pub latencies_ms: Vec<u64>,
}

impl OwnerRun {
    /// Claim-busy and empty turns per turn that worked items.
    #[must_use]
    pub fn wasted_per_useful(&self) -> f64 {
        (self.claim_busy + self.done) as f64 / self.productive.max(1) as f64
    }

    /// The item latency at quantile `q` (nearest rank), milliseconds.
    #[must_use]
    pub fn latency_ms(&self, q: f64) -> u64 {
        let n = self.latencies_ms.len();
        if n == 0 {
            return 0;
        }
        let rank = (q * n as f64).ceil() as usize;
        self.latencies_ms[rank.clamp(1, n) - 1]
    }

    /// The figures on one line, for test output.
    #[must_use]
    pub fn figures(&self, name: &str) -> String {
        format!(
            "{name}: claim_busy={} empty={} useful={} wasted/useful={:.3} p50={}ms p99={}ms turns={} peeks={} wakes_sent={} releases_heard={} release_wakes={} skipped_served={} drain_ms={} fleet_ms={} wall_ms={}",
            self.claim_busy,
            self.done,
            self.productive,
            self.wasted_per_useful(),
            self.latency_ms(0.5),
            self.latency_ms(0.99),
            self.turns,
            self.peeks,
            self.wakes_sent,
            self.releases_heard,
            self.release_wakes,
            self.skipped_served,
            self.drain_ms,
            self.fleet_ms,
            self.wall.as_millis()
        )
    }
}

/// Seed `items` items over `owners` owners on `server` (fresh).
pub fn seed(server: &RedisServer, owners: u32, items: u64) {
    Store::Redis(server).seed(owners, items);
}

/// Items per turn at most.
pub const BATCH: u32 = 20;
/// Work per item, microseconds.
pub const ITEM_DELAY_US: u64 = 2000;
/// Milliseconds between two passes over the backlogs.
pub const PASS_MS: u64 = 100;
/// Turn slots per process.
pub const SLOTS: usize = 64;

/// The command of one process: turns of [`BATCH`] items at [`ITEM_DELAY_US`] each
/// (40 ms holding the owner's claim), [`SLOTS`] turn slots (each process is ready to
/// work on every owner, as a fleet re-requesting the same owners is), a pass every
/// [`PASS_MS`], the batches' record times in the report; `env` on top.
fn owners_cmd(store: &Store<'_>, w: Workload, env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = store.drain(&["owners", "--owners", &w.owners.to_string(), "--item-times"]);
    cmd.args(["--batch", &BATCH.to_string(), "--item-delay-us", &ITEM_DELAY_US.to_string()])
        .args(["--pass-ms", &PASS_MS.to_string()])
        .env("DRAIN_LOG", "info")
        .env("DRAIN_WORKER_CONCURRENCY", SLOTS.to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn unix_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

fn int(reply: Reply) -> i64 {
    match reply {
        Reply::Int(n) => n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

const BACKLOG: &str =
    "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('LLEN', k) end return n";

/// Items left in the backlogs.
pub fn backlog(server: &RedisServer) -> i64 {
    int(server.command(&["EVAL", BACKLOG, "0", "drain:backlog:*"]).expect("count the backlogs"))
}

/// Items taken by a turn and not recorded yet (the owners' in-flight lists).
pub fn in_flight(server: &RedisServer) -> i64 {
    int(server.command(&["EVAL", BACKLOG, "0", "drain:inflight:*"]).expect("count the in-flight lists"))
}

/// `(items recorded, items recorded more than once)` over every owner's processed
/// hash `drain:processed:{<owner>}` (and the one `drain:processed` hash older builds
/// used, so a test run against one counts what it recorded).
pub fn recorded(server: &RedisServer) -> (i64, i64) {
    const SCRIPT: &str = "local n, twice = 0, 0 \
        for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
          for _, v in ipairs(redis.call('HVALS', k)) do n = n + 1 if v ~= '1' then twice = twice + 1 end end \
        end return {n, twice}";
    match server.command(&["EVAL", SCRIPT, "0", "drain:processed*"]).expect("count the processed hashes") {
        Reply::Array(Some(v)) if v.len() == 2 => {
            let mut v = v.into_iter().map(int);
            (v.next().unwrap_or(0), v.next().unwrap_or(0))
        }
        other => panic!("unexpected reply {other:?}"),
    }
}

/// Seed `store` (fresh), run the processes at once with `env`, and assert that every
/// item was processed exactly once and every process finished cleanly.
///
/// # Panics
/// On a failed process, a lost or doubled item, or a hung process (after [`LIMIT`]).
#[must_use]
pub fn run_owners(store: &Store<'_>, w: Workload, env: &[(&str, &str)]) -> OwnerRun {
    store.seed(w.owners, w.items);

    let start = Instant::now();
    let spawned_unix_ms = unix_ms();
    let outputs: Vec<std::process::Output> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.processes).map(|_| s.spawn(|| output(owners_cmd(store, w, env), LIMIT))).collect();
        handles.into_iter().map(|h| h.join().expect("a drain owners process")).collect()
    });
    let mut total = OwnerRun { wall: start.elapsed(), ..OwnerRun::default() };
    let mut batches: Vec<(u64, u64)> = Vec::new();
    let mut fleet_start = u64::MAX;
    for out in &outputs {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "drain owners failed: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        for (setting, field) in [
            ("PROJECTION_DRAIN_CLAIM_AWARE", "claim_aware"),
            ("PROJECTION_DRAIN_RELEASE_WAKE", "release_wake"),
            ("PROJECTION_DRAIN_SKIP_SERVED", "skip_served"),
        ] {
            if let Some((_, v)) = env.iter().find(|(k, _)| *k == setting) {
                assert_eq!(report[field], *v, "{setting}: {report}");
            }
        }
        assert_eq!(report["complete"], true, "stopped before the backlogs emptied: {report}");
        assert_eq!(report["failed"], 0, "{report}\n{stderr}");
        let field = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("{k} in {report}"));
        total.processed += field("processed");
        total.claim_busy += field("claim_busy");
        total.productive += field("productive");
        total.done += field("done");
        total.turns += field("turns");
        total.peeks += field("peeks");
        total.wakes_sent += field("wakes_sent");
        total.releases_heard += field("releases_heard");
        total.release_wakes += field("release_wakes");
        total.skipped_served += field("skipped_served");
        total.drain_ms = total.drain_ms.max(field("drain_ms"));
        total.fleet_ms = total.fleet_ms.max(field("last_item_unix_ms").saturating_sub(spawned_unix_ms));
        fleet_start = fleet_start.min(field("started_unix_ms"));
        for pair in report["recorded_at"].as_array().into_iter().flatten() {
            let (at, n) = (pair[0].as_u64().unwrap_or(0), pair[1].as_u64().unwrap_or(0));
            batches.push((at, n));
        }
    }
    assert_eq!(total.processed, w.items, "the processes' own counts add up to every item");
    let counted: u64 = batches.iter().map(|&(_, n)| n).sum();
    assert_eq!(counted, w.items, "the record times cover every item");
    for (at, n) in batches {
        let latency = at.saturating_sub(fleet_start);
        total.latencies_ms.extend(std::iter::repeat_n(latency, usize::try_from(n).unwrap_or(0)));
    }
    total.latencies_ms.sort_unstable();

    // The store's own count: one record per item, each exactly once.
    let (processed, twice) = store.recorded();
    assert_eq!(processed, w.items as i64, "every item processed");
    assert_eq!(twice, 0, "no item twice");
    assert_eq!(store.backlog(), 0, "backlogs empty");
    assert_eq!(store.in_flight(), 0, "nothing left in flight");
    total
}

//! Owner drains with `drain owners` on a private redis-server: seed the backlogs, run
//! several processes at once, and check that every item was processed exactly once.
//! Shared by the end-to-end test (`owners_redis.rs`, which asserts counts) and the
//! benchmark (`benches/owners.rs`, which reports drain times).

use std::time::{Duration, Instant};

use test_servers::{RedisServer, Reply};

use crate::{drain, output};

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
    /// Drain time of the slowest process (its own clock, quantised by the pass).
    pub drain_ms: u64,
    /// From spawning the processes to the last item any of them recorded.
    pub fleet_ms: u64,
    /// Wall time of the whole run.
    pub wall: Duration,
}

impl OwnerRun {
    /// The figures on one line, for test output.
    #[must_use]
    pub fn figures(&self, name: &str) -> String {
        format!(
            "{name}: claim_busy={} turns={} peeks={} wakes_sent={} releases_heard={} release_wakes={} drain_ms={} fleet_ms={} wall_ms={}",
            self.claim_busy,
            self.turns,
            self.peeks,
            self.wakes_sent,
            self.releases_heard,
            self.release_wakes,
            self.drain_ms,
            self.fleet_ms,
            self.wall.as_millis()
        )
    }
}

/// Seed `items` items over `owners` owners on `server` (fresh).
pub fn seed(server: &RedisServer, owners: u32, items: u64) {
    let mut seed = drain();
    seed.args(["owners", "--owners", &owners.to_string(), "--seed", &items.to_string(), "--seed-only"])
        .env("DRAIN_REDIS_URL", server.url());
    let out = output(seed, LIMIT);
    assert!(out.status.success(), "seeding failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(backlog(server), items as i64, "seeded");
}

/// The command of one process: turns of 20 items at 2 ms each (40 ms holding the
/// owner's claim), 64 turn slots (each process is ready to work on every owner, as a
/// fleet re-requesting the same owners is), a pass every 100 ms; `env` on top.
fn owners_cmd(server: &RedisServer, w: Workload, env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = drain();
    cmd.args(["owners", "--owners", &w.owners.to_string()])
        .args(["--batch", "20", "--item-delay-us", "2000", "--pass-ms", "100"])
        .env("DRAIN_REDIS_URL", server.url())
        .env("DRAIN_LOG", "info")
        .env("DRAIN_WORKER_CONCURRENCY", "64");
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

/// Seed `server` (fresh), run the processes at once with `env`, and assert that every
/// item was processed exactly once and every process finished cleanly.
///
/// # Panics
/// On a failed process, a lost or doubled item, or a hung process (after [`LIMIT`]).
#[must_use]
pub fn run_owners(server: &RedisServer, w: Workload, env: &[(&str, &str)]) -> OwnerRun {
    seed(server, w.owners, w.items);

    let start = Instant::now();
    let spawned_unix_ms = unix_ms();
    let outputs: Vec<std::process::Output> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.processes).map(|_| s.spawn(|| output(owners_cmd(server, w, env), LIMIT))).collect();
        handles.into_iter().map(|h| h.join().expect("a drain owners process")).collect()
    });
    let mut total = OwnerRun { wall: start.elapsed(), ..OwnerRun::default() };
    for out in &outputs {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "drain owners failed: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        for (setting, field) in
            [("PROJECTION_DRAIN_CLAIM_AWARE", "claim_aware"), ("PROJECTION_DRAIN_RELEASE_WAKE", "release_wake")]
        {
            if let Some((_, v)) = env.iter().find(|(k, _)| *k == setting) {
                assert_eq!(report[field], *v, "{setting}: {report}");
            }
        }
        assert_eq!(report["complete"], true, "stopped before the backlogs emptied: {report}");
        assert_eq!(report["failed"], 0, "{report}\n{stderr}");
        let field = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("{k} in {report}"));
        total.processed += field("processed");
        total.claim_busy += field("claim_busy");
        total.turns += field("turns");
        total.peeks += field("peeks");
        total.wakes_sent += field("wakes_sent");
        total.releases_heard += field("releases_heard");
        total.release_wakes += field("release_wakes");
        total.drain_ms = total.drain_ms.max(field("drain_ms"));
        total.fleet_ms = total.fleet_ms.max(field("last_item_unix_ms").saturating_sub(spawned_unix_ms));
    }
    assert_eq!(total.processed, w.items, "the processes' own counts add up to every item");

    // The processed hashes: one field per item, every field exactly 1.
    let (processed, twice) = recorded(server);
    assert_eq!(processed, w.items as i64, "every item processed");
    assert_eq!(twice, 0, "no item twice");
    assert_eq!(backlog(server), 0, "backlogs empty");
    assert_eq!(in_flight(server), 0, "nothing left in flight");
    total
}

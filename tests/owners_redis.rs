//! `drain owners` on a private redis-server (issue 7, item 3): four processes drain
//! 200 owner backlogs holding 20,000 items, once with claim-aware admission on and
//! once off, each on a fresh server. Every item is processed exactly once in both
//! runs, and claim-aware admission removes at least 90 % of the claim-busy turns.
//! The drain times are printed (a benchmark figure, see docs/performance.md), never
//! asserted.

use std::time::{Duration, Instant};

use drain_e2e::{RedisServer, drain, output, redis};
use test_servers::Reply;

/// The longest any one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);
const PROCESSES: usize = 4;
const OWNERS: &str = "200";
const ITEMS: u64 = 20_000;

/// The workload of every run: turns of 20 items at 2 ms each (40 ms holding the
/// owner's claim), 64 turn slots per process (each process is ready to work on every
/// owner, as a fleet re-requesting the same owners is), a pass every 100 ms.
fn owners_cmd(server: &RedisServer, claim_aware: &str) -> std::process::Command {
    let mut cmd = drain();
    cmd.args(["owners", "--owners", OWNERS, "--batch", "20", "--item-delay-us", "2000", "--pass-ms", "100"])
        .env("DRAIN_REDIS_URL", server.url())
        .env("DRAIN_LOG", "info")
        .env("DRAIN_WORKER_CONCURRENCY", "64")
        .env("PROJECTION_DRAIN_CLAIM_AWARE", claim_aware);
    cmd
}

fn int(reply: Reply) -> i64 {
    match reply {
        Reply::Int(n) => n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

/// What one run found.
struct Run {
    claim_busy: u64,
    turns: u64,
    peeks: u64,
    drain_ms: u64,
    wall: Duration,
}

/// Seed a fresh server, run the four processes at once, and check every item was
/// processed exactly once.
fn run(claim_aware: &str) -> Option<Run> {
    let server = redis()?;
    let mut seed = drain();
    seed.args(["owners", "--owners", OWNERS, "--seed", &ITEMS.to_string(), "--seed-only"])
        .env("DRAIN_REDIS_URL", server.url());
    let out = output(seed, LIMIT);
    assert!(out.status.success(), "seeding failed: {}", String::from_utf8_lossy(&out.stderr));
    let backlog =
        "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('LLEN', k) end return n";
    assert_eq!(int(server.command(&["EVAL", backlog, "0", "drain:backlog:*"]).unwrap()), ITEMS as i64);

    let start = Instant::now();
    let outputs: Vec<std::process::Output> = std::thread::scope(|s| {
        let handles: Vec<_> =
            (0..PROCESSES).map(|_| s.spawn(|| output(owners_cmd(&server, claim_aware), LIMIT))).collect();
        handles.into_iter().map(|h| h.join().expect("a drain owners process")).collect()
    });
    let wall = start.elapsed();

    let mut total = Run { claim_busy: 0, turns: 0, peeks: 0, drain_ms: 0, wall };
    let mut processed = 0;
    for out in &outputs {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "drain owners failed: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        assert_eq!(report["claim_aware"], claim_aware);
        assert_eq!(report["complete"], true, "stopped before the backlogs emptied: {report}");
        assert_eq!(report["failed"], 0, "{report}\n{stderr}");
        let field = |k: &str| report[k].as_u64().unwrap_or_else(|| panic!("{k} in {report}"));
        processed += field("processed");
        total.claim_busy += field("claim_busy");
        total.turns += field("turns");
        total.peeks += field("peeks");
        total.drain_ms = total.drain_ms.max(field("drain_ms"));
    }
    assert_eq!(processed, ITEMS, "the processes' own counts add up to every item");

    // The processed hash: one field per item, every field exactly 1.
    assert_eq!(int(server.command(&["HLEN", "drain:processed"]).unwrap()), ITEMS as i64, "every item processed");
    let not_once =
        "local n = 0 for _, v in ipairs(redis.call('HVALS', KEYS[1])) do if v ~= '1' then n = n + 1 end end return n";
    assert_eq!(int(server.command(&["EVAL", not_once, "1", "drain:processed"]).unwrap()), 0, "no item twice");
    assert_eq!(int(server.command(&["EVAL", backlog, "0", "drain:backlog:*"]).unwrap()), 0, "backlogs empty");
    Some(total)
}

#[test]
fn four_processes_drain_every_item_once_and_claim_aware_cuts_claim_busy_turns() {
    let Some(on) = run("on") else { return };
    let Some(off) = run("off") else { return };
    eprintln!(
        "drain owners, 4 processes, 200 owners, 20000 items: \
         on: claim_busy={} turns={} peeks={} drain_ms={} wall_ms={}; \
         off: claim_busy={} turns={} peeks={} drain_ms={} wall_ms={}",
        on.claim_busy,
        on.turns,
        on.peeks,
        on.drain_ms,
        on.wall.as_millis(),
        off.claim_busy,
        off.turns,
        off.peeks,
        off.drain_ms,
        off.wall.as_millis(),
    );
    assert_eq!(off.peeks, 0, "off never peeks");
    assert!(off.claim_busy > 0, "the off run contended (otherwise the comparison says nothing)");
    assert!(
        on.claim_busy * 10 <= off.claim_busy,
        "claim-aware must cut claim-busy turns by at least 90 %: on {} vs off {}",
        on.claim_busy,
        off.claim_busy
    );
}

//! Owner drain times on real Redis: four `drain owners` processes
//! drain 200 owner backlogs holding 20,000 items, with claim-aware admission off, on,
//! and on with the release wake, in interleaved
//! rounds on a fresh private redis-server each. Every run checks that each item was
//! processed exactly once; the drain time (from spawning the four processes to the
//! last item any of them recorded), the claim-busy turns and the peeks are reported,
//! median of the rounds.
//!
//! Writes `<target>/bench/owners.json` and prints a table. The `drain` binary is the
//! debug build the tests use (see `drain_e2e::drain_bin`), so times are debug-build
//! times; what matters is the ratio between the policies.

use bench_support::stats::{median_by, rounded};
use drain_e2e::RedisServer;
use drain_e2e::owners::{FLEET, OwnerRun, run_owners};
use serde_json::{Map, Value, json};

/// Rounds: 7 at `--full`, 3 at the `ci` length.
fn rounds() -> (usize, &'static str) {
    if bench_support::full() { (7, "full") } else { (3, "ci") }
}

/// The policies compared: name and settings.
const POLICIES: [(&str, [(&str, &str); 2]); 3] = [
    ("off", [("PROJECTION_DRAIN_CLAIM_AWARE", "off"), ("PROJECTION_DRAIN_RELEASE_WAKE", "off")]),
    ("claim_aware", [("PROJECTION_DRAIN_CLAIM_AWARE", "on"), ("PROJECTION_DRAIN_RELEASE_WAKE", "off")]),
    ("claim_aware_wake", [("PROJECTION_DRAIN_CLAIM_AWARE", "on"), ("PROJECTION_DRAIN_RELEASE_WAKE", "on")]),
];

/// The median of `runs`' figure `f`.
fn median(runs: &[OwnerRun], f: fn(&OwnerRun) -> u64) -> u64 {
    let v: Vec<u64> = runs.iter().map(f).collect();
    median_by(&v, Ord::cmp).copied().unwrap_or(0)
}

fn main() {
    if RedisServer::start().is_none() {
        write(&json!({"bench": "owners", "skipped": "redis-server is not installed"}));
        return;
    }
    let policies = POLICIES;
    let (rounds, length) = rounds();
    let mut runs: Vec<Vec<OwnerRun>> = vec![Vec::new(); policies.len()];
    for _ in 0..rounds {
        for (i, (_, env)) in policies.iter().enumerate() {
            let server = RedisServer::start().expect("a private redis-server");
            runs[i].push(run_owners(&server, FLEET, env));
        }
    }

    println!("{:<18} {:>10} {:>11} {:>8} {:>7} {:>8}", "policy", "drain ms", "claim busy", "turns", "peeks", "wakes");
    let mut drain_ms = Vec::new();
    let mut by_policy = Map::new();
    for (i, (name, _)) in policies.iter().enumerate() {
        let r = &runs[i];
        let (ms, busy, turns, peeks, wakes) = (
            median(r, |x| x.fleet_ms),
            median(r, |x| x.claim_busy),
            median(r, |x| x.turns),
            median(r, |x| x.peeks),
            median(r, |x| x.release_wakes),
        );
        drain_ms.push(ms);
        println!("{name:<18} {ms:>10} {busy:>11} {turns:>8} {peeks:>7} {wakes:>8}");
        let all: Vec<u64> = r.iter().map(|x| x.fleet_ms).collect();
        by_policy.insert(
            (*name).to_owned(),
            json!({
                "drain_ms": ms,
                "drain_ms_all": all,
                "claim_busy_turns": busy,
                "turns": turns,
                "peeks": peeks,
                "release_wakes": wakes,
            }),
        );
    }
    let base = drain_ms[0].max(1) as f64;
    let mut ratios = Map::new();
    for ((name, _), ms) in policies.iter().zip(&drain_ms).skip(1) {
        let ratio = *ms as f64 / base;
        println!("drain time {name} / off: {ratio:.2}x (goal: within 1.10x)");
        ratios.insert(format!("drain_time_{name}_vs_off"), json!(rounded(ratio, 3)));
    }
    let w = FLEET;
    write(&json!({
        "bench": "owners",
        "length": length,
        "processes": w.processes,
        "owners": w.owners,
        "items": w.items,
        "rounds": rounds,
        "statistic": "median round",
        "drain_ms": "spawn of the processes to the last item recorded",
        "build": "debug",
        "policies": by_policy,
        "ratios": ratios,
    }));
}

fn write(json: &Value) {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    bench_support::write(env!("CARGO_TARGET_TMPDIR"), "owners", json);
}

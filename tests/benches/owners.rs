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

use std::fmt::Write as _;
use std::path::Path;

use drain_e2e::RedisServer;
use drain_e2e::owners::{FLEET, OwnerRun, run_owners};

const ROUNDS: usize = 7;

/// The policies compared: name and settings.
const POLICIES: [(&str, [(&str, &str); 2]); 3] = [
    ("off", [("PROJECTION_DRAIN_CLAIM_AWARE", "off"), ("PROJECTION_DRAIN_RELEASE_WAKE", "off")]),
    ("claim_aware", [("PROJECTION_DRAIN_CLAIM_AWARE", "on"), ("PROJECTION_DRAIN_RELEASE_WAKE", "off")]),
    ("claim_aware_wake", [("PROJECTION_DRAIN_CLAIM_AWARE", "on"), ("PROJECTION_DRAIN_RELEASE_WAKE", "on")]),
];

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    if RedisServer::start().is_none() {
        write("{\"bench\":\"owners\",\"skipped\":\"redis-server is not installed\"}\n");
        return;
    }
    let policies = POLICIES;
    let mut runs: Vec<Vec<OwnerRun>> = vec![Vec::new(); policies.len()];
    for _ in 0..ROUNDS {
        for (i, (_, env)) in policies.iter().enumerate() {
            let server = RedisServer::start().expect("a private redis-server");
            runs[i].push(run_owners(&server, FLEET, env));
        }
    }

    let w = FLEET;
    let mut json = format!(
        "{{\"bench\":\"owners\",\"processes\":{},\"owners\":{},\"items\":{},\"rounds\":{ROUNDS},\"statistic\":\"median round\",\"drain_ms\":\"spawn of the processes to the last item recorded\",\"build\":\"debug\",\"policies\":{{",
        w.processes, w.owners, w.items
    );
    println!("{:<18} {:>10} {:>11} {:>8} {:>7} {:>8}", "policy", "drain ms", "claim busy", "turns", "peeks", "wakes");
    let mut drain_ms = Vec::new();
    for (i, (name, _)) in policies.iter().enumerate() {
        let r = &runs[i];
        let m = |f: fn(&OwnerRun) -> u64| median(r.iter().map(f).collect());
        let (ms, busy, turns, peeks, wakes) =
            (m(|x| x.fleet_ms), m(|x| x.claim_busy), m(|x| x.turns), m(|x| x.peeks), m(|x| x.release_wakes));
        drain_ms.push(ms);
        println!("{name:<18} {ms:>10} {busy:>11} {turns:>8} {peeks:>7} {wakes:>8}");
        let all: Vec<String> = r.iter().map(|x| x.fleet_ms.to_string()).collect();
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(
            json,
            "{sep}\"{name}\":{{\"drain_ms\":{ms},\"drain_ms_all\":[{}],\"claim_busy_turns\":{busy},\"turns\":{turns},\"peeks\":{peeks},\"release_wakes\":{wakes}}}",
            all.join(",")
        );
    }
    json.push_str("},\"ratios\":{");
    let base = drain_ms[0].max(1) as f64;
    let ratios: Vec<String> = policies
        .iter()
        .zip(&drain_ms)
        .skip(1)
        .map(|((name, _), ms)| {
            let ratio = *ms as f64 / base;
            println!("drain time {name} / off: {ratio:.2}x (goal: within 1.10x)");
            format!("\"drain_time_{name}_vs_off\":{ratio:.3}")
        })
        .collect();
    json.push_str(&ratios.join(","));
    json.push_str("}}\n");
    write(&json);
}

fn write(json: &str) {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("bench").join("owners.json");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("create target/bench");
    std::fs::write(&path, json).expect("write owners.json");
    println!("wrote {}", path.display());
}

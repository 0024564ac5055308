//! Owner admission in numbers: scheduler operations per second, and the wall time of
//! the `drain simulate` `large` scenario (50 instances, 10,000 owners, one hour of
//! virtual time, four policies).
//!
//! Plain `std::time::Instant` timing, no harness: each scheduler cycle runs in three
//! rounds of about half a second and the median round is reported (the machine is
//! shared). The simulator is drain-app's own code, compiled into this bench from its
//! source directory (it depends only on drain-core's public API, its testkit and
//! crates drain-core already uses), so the figure is the one `drain simulate
//! --scenario large` gives, without building the binary.
//!
//! Writes `<target>/bench/scheduler.json` and prints a table. Runs in about 10 s
//! (bench profile) on two cores.

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use drain_core::Time;
use drain_core::admission::{Action, OwnerId, PeekResult, Scheduler, SchedulerConfig, TurnOutcome, Woken};
use drain_core::switch::Switch;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde_json::json;

// Its unit tests (compiled out here) leave imports unused; its report-only items
// are unused by the bench.
#[allow(dead_code, unused_imports, unreachable_pub)]
#[path = "../../drain-app/src/simulate/mod.rs"]
mod simulate;

const ROUND: Duration = Duration::from_millis(500);
const ROUNDS: usize = 3;
const OWNERS: usize = 1024;

type S = Scheduler<SmallRng>;

/// One driver cycle of the scheduler; returns how many scheduler calls it made.
type Cycle = fn(&mut S, &OwnerId, Time) -> u32;

fn drain_events(s: &mut S) -> u32 {
    let mut calls = 1;
    while black_box(s.poll_event()).is_some() {
        calls += 1;
    }
    calls
}

fn launch(s: &mut S, owner: &OwnerId, now: Time) -> u32 {
    match s.poll_action(now) {
        Some(Action::Peek(owners)) => {
            s.on_peek(now, owners.into_iter().map(|o| (o, PeekResult::Free)).collect());
            let launched = s.poll_action(now);
            assert!(matches!(launched, Some(Action::Launch { .. })), "{launched:?}");
            3
        }
        Some(Action::Launch { owner: o, .. }) => {
            assert_eq!(&o, owner);
            1
        }
        None => panic!("nothing to launch"),
    }
}

/// Legacy (switch Off): request, launch, turn done.
fn legacy_turn(s: &mut S, owner: &OwnerId, now: Time) -> u32 {
    let _ = s.request(now, owner.clone());
    let calls = launch(s, owner, now);
    s.on_turn(now, owner, TurnOutcome::Done).expect("running");
    2 + calls + drain_events(s)
}

/// Claim-aware (On): request, batched peek (free), launch, turn done.
fn claim_aware_turn(s: &mut S, owner: &OwnerId, now: Time) -> u32 {
    legacy_turn(s, owner, now)
}

/// Claim-aware with release wake-up: a lost race arms the jittered claim timer, a
/// release notification wakes it, the owner is peeked and runs.
fn claim_busy_then_wake(s: &mut S, owner: &OwnerId, now: Time) -> u32 {
    let _ = s.request(now, owner.clone());
    let mut calls = launch(s, owner, now);
    s.on_turn(now, owner, TurnOutcome::ClaimBusy).expect("running");
    assert_eq!(s.on_release(now, owner), Woken::Queued);
    calls += launch(s, owner, now);
    s.on_turn(now, owner, TurnOutcome::Done).expect("running");
    4 + calls + drain_events(s)
}

/// Median over rounds of (cycles per second, scheduler calls per second).
fn measure(config: &SchedulerConfig, cycle: Cycle) -> (f64, f64) {
    let owners: Vec<OwnerId> = (0..OWNERS).map(|i| OwnerId::from(format!("owner-{i}"))).collect();
    let mut s = Scheduler::new(config.clone(), SmallRng::seed_from_u64(1));
    let mut rounds = Vec::with_capacity(ROUNDS);
    let mut i = 0usize;
    let mut now = Time::ZERO;
    // Warm-up.
    for o in &owners {
        cycle(&mut s, o, now);
    }
    for _ in 0..ROUNDS {
        let (mut cycles, mut calls) = (0u64, 0u64);
        let started = Instant::now();
        while started.elapsed() < ROUND {
            for _ in 0..256 {
                calls += u64::from(cycle(&mut s, &owners[i % OWNERS], now));
                i += 1;
                cycles += 1;
            }
            now += Duration::from_millis(1);
        }
        let secs = started.elapsed().as_secs_f64();
        rounds.push((cycles as f64 / secs, calls as f64 / secs));
    }
    rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
    rounds[ROUNDS / 2]
}

fn main() {
    let cfg = |claim_aware| SchedulerConfig { claim_aware, workers: 4, ..SchedulerConfig::default() };
    let cases: [(&str, &str, SchedulerConfig, Cycle); 3] = [
        ("legacy_turn", "request + launch + on_turn(Done), switch off", cfg(Switch::Off), legacy_turn),
        (
            "claim_aware_turn",
            "request + peek + on_peek(Free) + launch + on_turn(Done)",
            cfg(Switch::On),
            claim_aware_turn,
        ),
        (
            "claim_busy_then_wake",
            "… + on_turn(ClaimBusy) + on_release + peek + launch + on_turn(Done)",
            cfg(Switch::On),
            claim_busy_then_wake,
        ),
    ];
    let mut table = String::new();
    let _ = writeln!(table, "{:<24}{:>16}{:>12}{:>18}  cycle", "scheduler", "cycles/s", "ns/cycle", "calls/s");
    let mut results = Vec::new();
    for (name, what, config, cycle) in cases {
        let (per_s, calls_per_s) = measure(&config, cycle);
        let _ = writeln!(table, "{name:<24}{per_s:>16.0}{:>12.0}{calls_per_s:>18.0}  {what}", 1e9 / per_s);
        results.push(json!({
            "name": name,
            "cycle": what,
            "cycles_per_s": per_s.round(),
            "ns_per_cycle": (1e9 / per_s * 10.0).round() / 10.0,
            "scheduler_calls_per_s": calls_per_s.round(),
        }));
    }

    let sc = simulate::scenario::Scenario::preset("large").expect("the large preset");
    let started = Instant::now();
    let outcome = simulate::simulate(&sc, 1, &simulate::policy::REPORTED);
    let wall = started.elapsed();
    let report = &outcome.report;
    let jobs: serde_json::Map<String, serde_json::Value> =
        outcome.wall.iter().map(|(job, took)| ((*job).to_owned(), json!(round2(took.as_secs_f64())))).collect();
    let busy: serde_json::Map<String, serde_json::Value> =
        report.policies.0.iter().map(|(k, f)| ((*k).to_owned(), json!(f.claim_busy_turns))).collect();
    let _ = writeln!(
        table,
        "\nsimulate --scenario large: {:.2} s wall ({} items, 4 policies and 2 tick runs on threads)",
        wall.as_secs_f64(),
        report.items
    );
    for (job, took) in &outcome.wall {
        let _ = writeln!(table, "  {job:<22}{:>8.2} s", took.as_secs_f64());
    }
    let out = json!({
        "bench": "scheduler",
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "threads_available": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "scheduler": results,
        "simulate_large": {
            "scenario": sc.name,
            "seed": 1,
            "wall_s": round2(wall.as_secs_f64()),
            "job_wall_s": jobs,
            "items": report.items,
            "claim_busy_turns": busy,
        },
    });
    print!("{table}");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../bench");
    let path = dir.join("scheduler.json");
    let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, format!("{out:#}\n")));
    match written {
        Ok(()) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

//! Owner admission in numbers: scheduler operations per second, and the wall time of
//! the `drain simulate` `large` scenario (50 instances, 10,000 owners, one hour of
//! virtual time, four policies).
//!
//! Plain `std::time::Instant` timing, no harness: each scheduler cycle runs in three
//! rounds of about half a second and the median round is reported (the machine is
//! shared). The simulator is the drain-simulate crate, compiled into this bench from
//! its source directory (it depends only on drain-core's public API, its `memory`
//! feature and crates drain-core already uses, and drain-core must not depend on it),
//! so the figure is the one `drain simulate --scenario large` gives, without building
//! the binary.
//!
//! Heap allocations per operation in steady state are counted by a wrapping global
//! allocator (`stats_alloc`), over a separate, untimed pass of each cycle after the
//! warm-up: the admission cycles, and the tick decision (a tick whose lease is held
//! elsewhere: acquire, `Busy`, skip, report) on drain-core's in-memory store.
//!
//! Writes `<target>/bench/scheduler.json` and prints a table. Runs in about 10 s
//! (bench profile) on two cores.
#![allow(clippy::disallowed_methods, reason = "a benchmark reads its arguments, times itself and writes its JSON")]

use std::alloc::System;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use drain_core::admission::{Action, OwnerId, PeekResult, Scheduler, SchedulerConfig, TurnOutcome, Woken};
use drain_core::memory::{ManualClock, MemorySource, MemoryStore};
use drain_core::ports::{Acquire, LeaseName, LeaseStore, NoopObserver};
use drain_core::switch::Switch;
use drain_core::testkit::RecordingSubmitter;
use drain_core::tick::{TickConfig, TickPorts, run_tick};
use drain_core::{LeaseToken, Time};
use rand::SeedableRng;
use rand::rngs::{SmallRng, StdRng};
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Operations per allocation-counting pass.
const COUNTED: u64 = 10_000;

// Its unit tests (compiled out here) leave imports unused; its report-only items
// are unused by the bench.
#[allow(dead_code, unused_imports, unreachable_pub)]
#[path = "../../drain-simulate/src/lib.rs"]
mod simulate;

const ROUNDS: usize = 3;

/// `--full` (`cargo xtask bench --full`): longer rounds and the `large` scenario.
fn full() -> bool {
    std::env::args().any(|a| a == "--full")
}

/// One timed round: 500 ms at `--full`, 100 ms at the `ci` length.
fn round() -> Duration {
    if full() { Duration::from_millis(500) } else { Duration::from_millis(100) }
}
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
        Some(Action::Peek(mut owners)) => {
            s.on_peek(now, owners.drain(..).map(|o| (o, PeekResult::Free)));
            s.recycle(owners);
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

/// Median over rounds of (cycles per second, scheduler calls per second), and heap
/// allocations per cycle in steady state (counted over an untimed pass).
fn measure(config: &SchedulerConfig, cycle: Cycle) -> (f64, f64, f64) {
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
        while started.elapsed() < round() {
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
    let region = Region::new(GLOBAL);
    for _ in 0..COUNTED {
        black_box(cycle(&mut s, &owners[i % OWNERS], now));
        i += 1;
    }
    let allocs = region.change().allocations as f64 / COUNTED as f64;
    let (per_s, calls_per_s) = rounds[ROUNDS / 2];
    (per_s, calls_per_s, allocs)
}

/// Poll a future that never waits (drain-core's in-memory ports) to completion.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("an in-memory port future did not complete");
}

/// The tick decision with the lease held elsewhere: ns per tick (median round) and
/// heap allocations per tick in steady state.
fn tick_skip() -> (f64, f64) {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone());
    let source = MemorySource::new(clock.clone(), Duration::from_secs(60));
    let target = RecordingSubmitter::new(clock.clone());
    let mut cfg = TickConfig::new("requests");
    cfg.singleflight = Switch::On;
    let mut rng = StdRng::seed_from_u64(7);
    let other = LeaseToken::generate("other-host", &mut rng);
    let held = ready(store.acquire(&LeaseName::queue("requests"), &other, Duration::from_secs(86_400)));
    assert!(matches!(held, Ok(Acquire::Acquired { .. })), "{held:?}");
    let ports = TickPorts::new(&source, &target, &*clock, &NoopObserver).leases(&store).claims(&store);
    let token = LeaseToken::generate("bench", &mut rng);
    let tick = || {
        let report = ready(run_tick(&cfg, &ports, &token, &Default::default()));
        assert!(report.is_skipped(), "{report:?}");
        black_box(report);
    };
    for _ in 0..1000 {
        tick();
    }
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (mut ticks, started) = (0u64, Instant::now());
        while started.elapsed() < round() {
            for _ in 0..256 {
                tick();
                ticks += 1;
            }
        }
        rounds.push(started.elapsed().as_secs_f64() * 1e9 / ticks as f64);
    }
    rounds.sort_by(f64::total_cmp);
    let region = Region::new(GLOBAL);
    for _ in 0..COUNTED {
        tick();
    }
    (rounds[ROUNDS / 2], region.change().allocations as f64 / COUNTED as f64)
}

fn main() {
    let cfg = |claim_aware| {
        let mut m = SchedulerConfig::default();
        m.claim_aware = claim_aware;
        m.workers = 4;
        m
    };
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
    let _ = writeln!(
        table,
        "{:<24}{:>16}{:>12}{:>18}{:>14}  cycle",
        "scheduler", "cycles/s", "ns/cycle", "calls/s", "allocs/cycle"
    );
    let mut results = Vec::new();
    for (name, what, config, cycle) in cases {
        let (per_s, calls_per_s, allocs) = measure(&config, cycle);
        let _ =
            writeln!(table, "{name:<24}{per_s:>16.0}{:>12.0}{calls_per_s:>18.0}{allocs:>14.2}  {what}", 1e9 / per_s);
        results.push(json!({
            "name": name,
            "cycle": what,
            "cycles_per_s": per_s.round(),
            "ns_per_cycle": (1e9 / per_s * 10.0).round() / 10.0,
            "scheduler_calls_per_s": calls_per_s.round(),
            "allocs_per_cycle": round2(allocs),
        }));
    }
    // What a driver's own `owner.clone()` into `request` costs: one allocation per
    // cycle is the caller's, not the scheduler's.
    let owner = OwnerId::from("owner-0");
    let region = Region::new(GLOBAL);
    for _ in 0..COUNTED {
        black_box(owner.clone());
    }
    let clone_allocs = region.change().allocations as f64 / COUNTED as f64;
    let (tick_ns, tick_allocs) = tick_skip();
    let _ = writeln!(
        table,
        "{:<24}{:>16.0}{tick_ns:>12.0}{:>18}{tick_allocs:>14.2}  run_tick, lease held elsewhere: acquire (Busy) + skip report",
        "tick_skip_locked",
        1e9 / tick_ns,
        "-"
    );
    let _ = writeln!(table, "(the caller's OwnerId clone into request: {clone_allocs:.2} allocs)");

    // The one-hour `large` scenario takes minutes in a debug build: `--full` only.
    let large =
        if full() { simulate_large(&mut table) } else { json!({"scenario": "large", "skipped": "runs with --full"}) };
    let scenarios = scenario_table(&mut table);
    let out = json!({
        "bench": "scheduler",
        "length": if full() { "full" } else { "ci" },
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "threads_available": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "scheduler": results,
        "owner_clone_allocs": round2(clone_allocs),
        "tick_skip_locked": {
            "what": "run_tick with the lease held elsewhere (in-memory store): acquire -> Busy -> skip",
            "ns_per_tick": (tick_ns * 10.0).round() / 10.0,
            "allocs_per_tick": round2(tick_allocs),
        },
        "simulate_large": large,
        "simulate_scenarios": scenarios,
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

/// The `large` scenario (one hour, 50 instances): its wall time per job.
fn simulate_large(table: &mut String) -> serde_json::Value {
    let sc = simulate::Scenario::preset("large").expect("the large preset");
    let started = Instant::now();
    let progress = simulate::Progress::new(&sc, &simulate::REPORTED);
    let outcome = simulate::simulate(&sc, 1, &simulate::REPORTED, &progress);
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
    json!({
        "scenario": sc.name,
        "seed": 1,
        "wall_s": round2(wall.as_secs_f64()),
        "job_wall_s": jobs,
        "items": report.items,
        "claim_busy_turns": busy,
    })
}

/// The simulator's scenario table: the `default` and `seed-fleet` presets, seed 1,
/// every reported policy (exact figures: the same on any machine).
fn scenario_table(table: &mut String) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for name in ["default", "seed-fleet"] {
        let sc = simulate::Scenario::preset(name).expect("a preset");
        let progress = simulate::Progress::new(&sc, &simulate::REPORTED);
        let report = simulate::simulate(&sc, 1, &simulate::REPORTED, &progress).report;
        let _ = writeln!(
            table,
            "\nsimulate --scenario {name}: {:<18}{:>12}{:>14}{:>9}{:>9}{:>12}",
            "policy", "claim busy", "wasted/useful", "p50 ms", "p99 ms", "items/s"
        );
        let mut rows = serde_json::Map::new();
        for (policy, f) in &report.policies.0 {
            let _ = writeln!(
                table,
                "  {:<42}{:>12}{:>14.3}{:>9}{:>9}{:>12.3}",
                policy,
                f.claim_busy_turns,
                f.wasted_turns_per_useful,
                f.owner_latency_p50_ms,
                f.owner_latency_p99_ms,
                f.throughput_per_s
            );
            rows.insert(
                (*policy).to_owned(),
                json!({
                    "claim_busy_turns": f.claim_busy_turns,
                    "wasted_turns_per_useful": f.wasted_turns_per_useful,
                    "owner_latency_p50_ms": f.owner_latency_p50_ms,
                    "owner_latency_p99_ms": f.owner_latency_p99_ms,
                    "throughput_per_s": f.throughput_per_s,
                    "handoffs": f.handoffs,
                }),
            );
        }
        out.insert(name.to_owned(), serde_json::Value::Object(rows));
    }
    serde_json::Value::Object(out)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

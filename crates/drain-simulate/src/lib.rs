#![doc = include_str!("../README.md")]
//!
//! ## How it works
//!
//! * The workload: the request stream, drawn once from the seed — Zipf-like owner
//!   popularity, rate bursts, several items per arrival, each arrival requested of K
//!   instances after exponential delivery delays, heavy-tailed per-item work.
//! * The owner side: every instance runs drain-core's real
//!   [`Scheduler`](drain_core::admission::Scheduler); the engine only delivers
//!   requests, answers peeks and runs turns against an in-memory claim store with
//!   TTLs, and fires timers and release notifications.
//! * The oracle: a model, not drain-core code — an omniscient dispatcher that never
//!   wastes a turn, the floor for waste and latency.
//! * The tick side: drain-core's real `run_tick` on its in-memory ports (feature
//!   `memory`), beat every 10 s on 4 workers, lease off and on.
//! * The figures: [`Report`] (one JSON object through `serde`, or
//!   [`Report::table`]) and [`chart`] (an SVG document).
//!
//! The same seed gives byte-identical output: every random draw comes from a
//! `SmallRng` seeded from it, time is virtual, and nothing iterates a hash map. Jobs
//! run on threads of their own; only [`Outcome::wall`] reads the wall clock.

mod agenda;
mod claims;
mod engine;
mod oracle;
mod passes;
mod policy;
mod progress;
mod report;
mod scenario;
mod svg;
mod tally;
mod ticks;
mod workload;

use std::time::{Duration, Instant};

use drain_core::Switch;

pub use self::policy::{Policy, REPORTED, candidates};
pub use self::progress::Progress;
pub use self::report::Report;
pub use self::scenario::{BadOverride, Overrides, PRESETS, Scenario, UnknownPreset};

use self::engine::Fleet;
use self::policy::Kind;
use self::progress::Reached;
use self::report::{Figures, Ordered, Ticks};
use self::tally::{Series, Tally};
use self::workload::Workload;

/// A finished simulation: the report and, per policy, its series for the chart.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The figures: serialize it for one JSON object, or print [`Report::table`].
    pub report: Report,
    /// Per policy (report order): the series over time.
    pub(crate) series: Vec<(Policy, Series)>,
    /// Wall time of each job (the two tick runs, then each policy by its key); never
    /// part of the report.
    pub wall: Vec<(&'static str, Duration)>,
}

/// Run one policy on the workload.
fn run_policy(sc: &Scenario, w: &Workload, policy: &Policy, seed: u64, reached: &Reached) -> Tally {
    match policy.kind {
        Kind::Scheduler { claim_aware, wake, backoff_ms, skip_served } => {
            let window = backoff_ms.unwrap_or((sc.backoff_s.0 * 1000, sc.backoff_s.1 * 1000));
            let config = engine::scheduler_config(sc, claim_aware, wake, window, skip_served);
            Fleet::new(sc, w, &config, wake, seed).run(reached)
        }
        Kind::Oracle => oracle::run(sc, w, reached),
    }
}

/// The result of a scoped thread; a panic in it is re-raised here.
fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// `f`'s result and its wall time.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

/// Simulate `sc` with `seed` under each of `policies`, reporting how far each job
/// got to `progress` (made by [`Progress::new`] for the same scenario and policies).
///
/// Every policy and both tick runs run on threads of their own, at once; the result
/// does not depend on how they are scheduled.
pub fn simulate(sc: &Scenario, seed: u64, policies: &[Policy], progress: &Progress) -> Outcome {
    let w = Workload::generate(sc, seed);
    // Every policy and both tick runs are independent: run them on threads and
    // collect the results in order, so the output does not depend on scheduling.
    let (ticks, tallies, wall) = std::thread::scope(|s| {
        let off = s.spawn(|| {
            let out = timed(|| ticks::run(sc, seed, Switch::Off));
            progress.finish_job(0);
            out
        });
        let on = s.spawn(|| {
            let out = timed(|| ticks::run(sc, seed, Switch::On));
            progress.finish_job(1);
            out
        });
        let w = &w;
        let runs: Vec<_> = policies
            .iter()
            .enumerate()
            .map(|(i, p)| {
                s.spawn(move || {
                    let out = timed(|| run_policy(sc, w, p, seed, progress.job(i + 2)));
                    progress.finish_job(i + 2);
                    out
                })
            })
            .collect();
        let ((off, off_wall), (on, on_wall)) = (join(off), join(on));
        let mut wall = vec![("ticks_lease_off", off_wall), ("ticks_lease_on", on_wall)];
        let mut tallies = Vec::with_capacity(runs.len());
        for (run, p) in runs.into_iter().zip(policies) {
            let (tally, took) = join(run);
            tallies.push(tally);
            wall.push((p.key, took));
        }
        (Ticks { lease_off: off, lease_on: on }, tallies, wall)
    });
    let mut figures = Vec::with_capacity(policies.len());
    let mut series = Vec::with_capacity(policies.len());
    for (policy, mut tally) in policies.iter().zip(tallies) {
        series.push((*policy, std::mem::take(&mut tally.series)));
        figures.push((policy.key, Figures::new(policy, tally, sc.duration_s, &ticks)));
    }
    let policies = Ordered(figures);
    let report = Report {
        seed,
        scenario: sc.name,
        config: sc.summary(),
        items: w.items() as u64,
        versus_legacy: Report::versus(&policies),
        p99_versus_oracle: Report::versus_oracle(&policies),
        policies,
        ticks,
    };
    Outcome { report, series, wall }
}

/// The chart of `outcome` as an SVG document: wasted turns and p99 item latency over
/// the first `window_s` seconds (the scenario's [`Scenario::duration_s`]), a line per
/// policy.
pub fn chart(outcome: &Outcome, window_s: u64) -> String {
    let lines: Vec<svg::Line<'_>> = outcome
        .series
        .iter()
        .map(|(p, s)| svg::Line { name: p.key, series: s, dashed: p.kind == Kind::Oracle })
        .collect();
    let r = &outcome.report;
    let title = format!("drain simulate: scenario {} (seed {}), {} items", r.scenario, r.seed, r.items);
    svg::chart(&title, &lines, window_s)
}

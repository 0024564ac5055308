//! `cargo xtask bench`: run the workspace's benchmarks and check that they wrote their
//! results to `target/bench/*.json`.
//!
//! Contract for a bench target: write one JSON file per run into
//! `Path::new(env!("CARGO_TARGET_TMPDIR")).join("../bench")` (that is
//! `<target>/bench/`, known at compile time, so no environment is read at run time).
//! It runs in CI, so it must finish in well under two minutes on two cores.

use std::fs;
use std::time::{Duration, SystemTime};

use crate::metadata::Metadata;
use crate::util::{Failure, GateResult, Outcome, cargo, run};

/// Beyond this, the gate warns: CI runs it on every submission.
const BUDGET: Duration = Duration::from_secs(120);

/// Run the gate.
pub(crate) fn run_gate() -> GateResult {
    let meta = Metadata::load()?;
    // (package, its bench targets). Only bench targets run: `--benches` would also
    // build every library's unit tests in release mode.
    let mut benches: Vec<(&str, Vec<&str>)> = meta
        .members
        .iter()
        .filter_map(|id| meta.packages.get(id))
        .map(|p| {
            let names = p
                .targets
                .iter()
                .filter(|(_, kinds)| kinds.iter().any(|k| k == "bench"))
                .map(|(name, _)| name.as_str())
                .collect();
            (p.name.as_str(), names)
        })
        .filter(|(_, names): &(&str, Vec<&str>)| !names.is_empty())
        .collect();
    benches.sort_unstable();
    if benches.is_empty() {
        return Ok(Outcome::Skipped("no benches yet".to_owned()));
    }

    let started = SystemTime::now();
    // One invocation for every bench target: one feature resolution, so each
    // dependency is compiled once in release, not once per package.
    let mut cmd = cargo();
    cmd.args(["bench", "--workspace", "--all-features"]);
    for (_, names) in &benches {
        for name in names {
            cmd.args(["--bench", name]);
        }
    }
    // The AMQP bench (crates/adapter-servicebus) reads the broker at compile time.
    match crate::services::ensure(&["rabbitmq-server"])? {
        crate::services::Need::Present if std::env::var_os(crate::rabbit::URL_VAR).is_none() => {
            crate::test_gate::amqp_env(&mut cmd)?;
        }
        _ => {}
    }
    run(&mut cmd).map_err(|f| f.fix("fix the failing benchmark above"))?;

    let dir = meta.target_directory.join("bench");
    let fresh: Vec<String> = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter(|e| e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t + Duration::from_secs(1) >= started))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if fresh.is_empty() {
        return Err(Failure::new(format!("the benches ran but wrote no JSON to {} during this run", dir.display()))
            .fix("make each bench write `<target>/bench/<name>.json` (see xtask/src/bench.rs)"));
    }
    let took = started.elapsed().unwrap_or_default();
    if took > BUDGET {
        println!("xtask bench: warning: took {:.0}s, over the {}s budget for CI", took.as_secs_f64(), BUDGET.as_secs());
    }
    let mut shown = fresh.clone();
    // The soak gate writes load.json; show the last one beside this run's figures.
    if !shown.iter().any(|f| f == "load.json") && dir.join("load.json").exists() {
        shown.push("load.json".to_owned());
    }
    shown.sort_unstable();
    print!("{}", crate::bench_summary::render(&dir, &shown));
    println!("xtask bench: results in {}: {}", dir.display(), fresh.join(", "));
    Ok(Outcome::Passed)
}

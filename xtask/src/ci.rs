//! `cargo xtask ci`: every gate in order, stopping at the first failure, then a
//! summary table and one closing line, `xtask-ci: N passed, M failed[, K skipped]`,
//! in the plain form CI log readers recognise. The gates that only compile run
//! beside others when nextest runs the tests (crate::beside): [`BESIDE_TESTS`]
//! beside the test run, [`BESIDE_AFTER`] beside the gates after it; otherwise each
//! in its place. The machine has two cores and the run is bound by them: what
//! compiles beside the tests slows them down, what compiles beside soak and bench
//! (about one core, mostly waiting on servers) does not.

use std::time::{Duration, Instant};

use crate::Gate;
use crate::beside::Lane;
use crate::util::{Failure, GateResult, Outcome};

/// Gates that need no server and only compile and read files, run beside the tests.
const BESIDE_TESTS: [Gate; 2] = [Gate::Clippy, Gate::Doc];
/// The same, run beside the gates after the tests: package's checks of each crate
/// alone (about 100 CPU-s) made the test run about 30 s longer beside it.
const BESIDE_AFTER: [Gate; 1] = [Gate::Package];

/// How one gate ended, for the table.
enum Row {
    Passed,
    Skipped(String),
    Failed,
    NotRun,
}

/// Run every gate.
pub(crate) fn run() -> Result<(), Failure> {
    let started = Instant::now();
    crate::util::not_incremental();
    let mut rows: Vec<(Gate, Row, Option<Duration>)> = Vec::new();
    let mut failure = None;
    let mut ran_beside = false;
    // The test gate right after fmt: the gates beside it start when its tests run.
    let order = [Gate::Fmt, Gate::Test]
        .into_iter()
        .chain(Gate::ALL.into_iter().filter(|g| ![Gate::Fmt, Gate::Test].contains(g)));
    let mut after: Option<Lane> = None;
    for gate in order {
        if ran_beside && (BESIDE_TESTS.contains(&gate) || BESIDE_AFTER.contains(&gate)) {
            continue;
        }
        if failure.is_some() {
            rows.push((gate, Row::NotRun, None));
            continue;
        }
        println!("\n==> xtask {}", gate.name());
        let t = Instant::now();
        if gate != Gate::Test {
            let row = row_of(gate, gate.run(), &mut failure);
            rows.push((gate, row, Some(t.elapsed())));
            continue;
        }
        let mut lane = Ok(None);
        let result =
            crate::test_gate::run_gate_beside(&mut || lane = Lane::start(&BESIDE_TESTS, "the tests").map(Some));
        let result = Gate::Test.report(result);
        let lane = lane.unwrap_or_else(|f| {
            failure.get_or_insert(f);
            None
        });
        rows.push((gate, row_of(gate, result, &mut failure), Some(t.elapsed())));
        if let Some(lane) = lane {
            ran_beside = true;
            finish(lane, &mut rows, &mut failure);
            if failure.is_none() {
                match Lane::start(&BESIDE_AFTER, "the gates after the tests") {
                    Ok(lane) => after = Some(lane),
                    Err(f) => failure = Some(f),
                }
            }
            if after.is_none() {
                rows.extend(BESIDE_AFTER.iter().map(|&g| (g, Row::NotRun, None)));
            }
        }
    }
    if let Some(lane) = after {
        finish(lane, &mut rows, &mut failure);
    }
    rows.sort_by_key(|(gate, ..)| Gate::ALL.iter().position(|g| g == gate));

    if ran_beside {
        println!(
            "\nxtask ci summary ({} ran beside the tests, {} beside the gates after them)",
            names(&BESIDE_TESTS),
            names(&BESIDE_AFTER)
        );
    } else {
        println!("\nxtask ci summary");
    }
    println!("  {:<8} {:<9} {:>8}", "gate", "result", "time");
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (gate, row, took) in &rows {
        let took = took.map_or_else(|| "-".to_owned(), |d| format!("{:.1}s", d.as_secs_f64()));
        let (result, note) = match row {
            Row::Passed => {
                passed += 1;
                ("ok", String::new())
            }
            Row::Skipped(why) => {
                skipped += 1;
                ("skipped", format!("  ({why})"))
            }
            Row::Failed => {
                failed += 1;
                ("FAILED", String::new())
            }
            Row::NotRun => ("not run", String::new()),
        };
        println!("  {:<8} {:<9} {:>8}{note}", gate.name(), result, took);
    }
    println!("  total {:.1}s", started.elapsed().as_secs_f64());
    if let Some(f) = &failure {
        println!("{}", f.what);
    }
    let skipped = if skipped > 0 { format!(", {skipped} skipped") } else { String::new() };
    println!("xtask-ci: {passed} passed, {failed} failed{skipped}");
    failure.map_or(Ok(()), Err)
}

/// Wait for `lane` and add a row for each of its gates.
fn finish(lane: Lane, rows: &mut Vec<(Gate, Row, Option<Duration>)>, failure: &mut Option<Failure>) {
    for (g, ended) in lane.finish() {
        match ended {
            Some((result, took)) => rows.push((g, row_of(g, result, failure), Some(took))),
            None => rows.push((g, Row::NotRun, None)),
        }
    }
}

/// The row of a gate that ended with `result`; the first failure is kept in `failure`.
fn row_of(gate: Gate, result: GateResult, failure: &mut Option<Failure>) -> Row {
    match result {
        Ok(Outcome::Passed) => Row::Passed,
        Ok(Outcome::Skipped(why)) => Row::Skipped(why),
        Err(f) => {
            failure.get_or_insert_with(|| Failure::new(format!("gate `{}` failed: {}", gate.name(), f.what)));
            Row::Failed
        }
    }
}

fn names(gates: &[Gate]) -> String {
    gates.iter().map(|g| g.name()).collect::<Vec<_>>().join(", ")
}

//! `cargo xtask ci`: every gate in order, stopping at the first failure, then a
//! summary table and one closing line, `xtask-ci: N passed, M failed[, K skipped]`,
//! in the plain form CI log readers recognise.

use std::time::{Duration, Instant};

use crate::Gate;
use crate::util::{Failure, Outcome};

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
    let mut rows: Vec<(Gate, Row, Option<Duration>)> = Vec::new();
    let mut failure = None;
    for gate in Gate::ALL {
        if failure.is_some() {
            rows.push((gate, Row::NotRun, None));
            continue;
        }
        println!("\n==> xtask {}", gate.name());
        let t = Instant::now();
        let row = match gate.run() {
            Ok(Outcome::Passed) => Row::Passed,
            Ok(Outcome::Skipped(why)) => Row::Skipped(why),
            Err(f) => {
                failure = Some(Failure::new(format!("gate `{}` failed: {}", gate.name(), f.what)));
                Row::Failed
            }
        };
        rows.push((gate, row, Some(t.elapsed())));
    }

    println!("\nxtask ci summary");
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

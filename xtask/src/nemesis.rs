//! `cargo xtask nemesis [--minutes N]`: the fault run of `tests/nemesis.rs` for N
//! minutes (default [`DEFAULT_MINUTES`]): the `drain-nemesis` program of
//! `tests/nemesis/` (package `drain-e2e`) cycles through every fault on private
//! redis-servers, checks the history, runs the checker's negative control, and writes
//! `<target>/bench/nemesis.json`. `ci` runs the short schedule as a test instead.
//! Built by the test build, like the soak's program.

use std::process::Command;

use crate::services;
use crate::util::{Failure, GateResult, Outcome, length_arg, report, run, test_build};

/// Minutes of faults for `cargo xtask nemesis`.
pub(crate) const DEFAULT_MINUTES: u64 = 5;

/// Parse the gate's arguments: nothing, or `--minutes N` (N ≥ 1).
pub(crate) fn parse_args(args: &[&str]) -> Result<u64, String> {
    length_arg("nemesis", args, ("--minutes", "minutes"), 1, DEFAULT_MINUTES)
}

/// Run the fault program for `minutes` and print its closing line.
pub(crate) fn run_and_report(minutes: u64) -> Result<(), Failure> {
    report("nemesis", run_gate(minutes)).map(|_| ())
}

fn run_gate(minutes: u64) -> GateResult {
    if let services::Need::Missing(why) = services::ensure(&["redis-server"])? {
        return Ok(Outcome::Skipped(why));
    }
    let debug = test_build()?;
    let exe = debug.join(format!("drain-nemesis{}", std::env::consts::EXE_SUFFIX));
    if !exe.is_file() {
        return Err(Failure::new(format!("the test build did not produce {}", exe.display()))
            .fix("check the `drain-nemesis` [[bin]] in tests/Cargo.toml"));
    }
    let out = debug.parent().unwrap_or(&debug).join("bench").join("nemesis.json");
    if let Some(dir) = out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let mut nemesis = Command::new(&exe);
    nemesis.args(["--minutes", &minutes.to_string(), "--out", &out.to_string_lossy()]);
    run(&mut nemesis).map_err(|f| {
        f.fix(format!("read the violations above (the history in {}), then rerun `cargo xtask nemesis`", out.display()))
    })?;
    println!("xtask nemesis: {minutes} min of faults, report in {}", out.display());
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_argument() {
        assert_eq!(parse_args(&[]), Ok(DEFAULT_MINUTES));
        assert_eq!(parse_args(&["--minutes", "30"]), Ok(30));
        assert!(parse_args(&["--minutes", "0"]).is_err());
        assert!(parse_args(&["--seconds", "1"]).is_err());
    }
}

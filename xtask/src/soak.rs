//! `cargo xtask soak [--seconds N]`: the load check. Runs the
//! `drain-load` program of `tests/load/` (package `drain-e2e`): 64 queues x 16
//! instances of the tick path and 10,000 owners through the admission scheduler
//! against one private `redis-server`, for N seconds ([`DEFAULT_SECONDS`]; `ci` runs
//! [`CI_SECONDS`]). The program fails on any error, a message not submitted exactly
//! once, a Redis command the operations do not explain, or resident memory growing
//! after warm-up; it writes `<target>/bench/load.json`. Nothing is timed.
//!
//! It is built by the test build (`cargo test --workspace --all-features --no-run`,
//! a no-op right after the `test` gate: integration tests make cargo build the
//! package's binaries, with the test build's features), never in release: CI has
//! two cores and a time budget.

use std::process::Command;

use crate::services;
use crate::util::{Failure, GateResult, Outcome, length_arg, report, run, test_build};

/// Seconds of load for `cargo xtask soak`.
pub(crate) const DEFAULT_SECONDS: u64 = 60;
/// Seconds of load inside `cargo xtask ci`.
pub(crate) const CI_SECONDS: u64 = 15;

/// Parse the gate's arguments: nothing, or `--seconds N` (N ≥ 2).
pub(crate) fn parse_args(args: &[&str]) -> Result<u64, String> {
    length_arg("soak", args, ("--seconds", "seconds"), 2, DEFAULT_SECONDS)
}

/// Run the gate for `seconds` and print its closing line.
pub(crate) fn run_and_report(seconds: u64) -> Result<(), Failure> {
    report("soak", run_gate(seconds)).map(|_| ())
}

/// Build the load program with the test build and run it for `seconds`.
pub(crate) fn run_gate(seconds: u64) -> GateResult {
    if let services::Need::Missing(why) = services::ensure(&["redis-server"])? {
        return Ok(Outcome::Skipped(why));
    }
    let debug = test_build()?;
    let exe = debug.join(format!("drain-load{}", std::env::consts::EXE_SUFFIX));
    if !exe.is_file() {
        return Err(Failure::new(format!("the test build did not produce {}", exe.display()))
            .fix("check the `drain-load` [[bin]] in tests/Cargo.toml"));
    }
    let out = debug.parent().unwrap_or(&debug).join("bench").join("load.json");
    let mut load = Command::new(&exe);
    load.args(["--seconds", &seconds.to_string(), "--out", &out.to_string_lossy()]);
    run(&mut load).map_err(|f| {
        f.fix(format!("read the failed check above (details in {}), then rerun `cargo xtask soak`", out.display()))
    })?;
    println!("xtask soak: {seconds} s of load, report in {}", out.display());
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_argument() {
        assert_eq!(parse_args(&[]), Ok(DEFAULT_SECONDS));
        assert_eq!(parse_args(&["--seconds", "15"]), Ok(15));
        assert!(parse_args(&["--seconds", "1"]).is_err());
        assert!(parse_args(&["--seconds", "x"]).is_err());
        assert!(parse_args(&["--minutes", "1"]).is_err());
    }
}

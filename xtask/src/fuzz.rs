//! `cargo xtask fuzz [--seconds N]`: run every cargo-fuzz target of `fuzz/` for a
//! bounded time each (default [`DEFAULT_SECONDS`]) on the nightly toolchain.
//!
//! Not part of `ci`: it needs nightly and takes minutes. Run it after touching
//! setting parsing, URL redaction or key encoding (docs/reliability.md). cargo-fuzz
//! is installed (`cargo install cargo-fuzz --locked`) when it is missing. A crash
//! fails the gate and names the input libFuzzer saved under
//! `fuzz/artifacts/<target>/`: turn it into a regular test of the crate it breaks,
//! then fix the code.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::util::{Failure, GateResult, Outcome, display, length_arg, project_root, report, run};

/// Seconds per target when `--seconds` is not given.
pub(crate) const DEFAULT_SECONDS: u64 = 30;

/// Parse the gate's arguments: nothing, or `--seconds N` (N ≥ 1).
pub(crate) fn parse_args(args: &[&str]) -> Result<u64, String> {
    length_arg("fuzz", args, ("--seconds", "seconds"), 1, DEFAULT_SECONDS)
}

/// Run the gate and print its closing line.
pub(crate) fn run_and_report(seconds: u64) -> Result<(), Failure> {
    report("fuzz", run_gate(seconds)).map(|_| ())
}

fn run_gate(seconds: u64) -> GateResult {
    let root = project_root();
    let manifest = root.join("fuzz/Cargo.toml");
    let text =
        fs::read_to_string(&manifest).map_err(|e| Failure::new(format!("cannot read {}: {e}", manifest.display())))?;
    let names = targets(&text);
    if names.is_empty() {
        return Ok(Outcome::Skipped("fuzz/Cargo.toml declares no [[bin]] target".to_owned()));
    }
    ensure_tools()?;
    let mut summary = Vec::new();
    for name in &names {
        let mut cmd = nightly_cargo();
        cmd.current_dir(&root).args(["fuzz", "run", name, "--", &format!("-max_total_time={seconds}")]);
        let (runs, took) = fuzz_one(&mut cmd, name)?;
        summary.push(format!("{name}: {runs} runs in {took} s"));
    }
    for line in &summary {
        println!("xtask fuzz: {line}");
    }
    Ok(Outcome::Passed)
}

/// `cargo +nightly` through the rustup proxy, without the toolchain pin of the
/// process that runs xtask.
fn nightly_cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").env_remove("RUSTUP_TOOLCHAIN").env_remove("RUSTC");
    cmd
}

/// The nightly toolchain must be there; cargo-fuzz is installed when it is not.
fn ensure_tools() -> Result<(), Failure> {
    let works = |args: &[&str]| {
        nightly_cargo().args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if !works(&["--version"]) {
        return Err(Failure::new("the nightly toolchain is not installed (cargo-fuzz needs it)")
            .fix("rustup toolchain install nightly"));
    }
    if !works(&["fuzz", "--version"]) {
        let mut install = Command::new("cargo");
        install.current_dir(project_root()).args(["install", "cargo-fuzz", "--locked"]);
        run(&mut install).map_err(|f| f.fix("cargo install cargo-fuzz --locked"))?;
    }
    Ok(())
}

/// Run one target, echoing libFuzzer's milestones; `(runs, seconds)` from its final
/// `Done N runs in S second(s)` line.
fn fuzz_one(cmd: &mut Command, name: &str) -> Result<(u64, u64), Failure> {
    let line = display(cmd);
    println!("$ {line}");
    let mut child =
        cmd.stderr(Stdio::piped()).spawn().map_err(|e| Failure::new(format!("could not start `{line}`: {e}")))?;
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut done = None;
    // libFuzzer prints `INITED` once the target runs: without it, the target did not
    // build (or start), and there is no input to reproduce.
    let mut started = false;
    if let Some(err) = child.stderr.take() {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if let Some(d) = done_line(&l) {
                done = Some(d);
            }
            started |= l.contains("INITED");
            if milestone(&l) {
                println!("  {l}");
            }
            if tail.len() == 40 {
                tail.pop_front();
            }
            tail.push_back(l);
        }
    }
    let status = child.wait().map_err(|e| Failure::new(format!("`{line}`: {e}")))?;
    match (status.success(), done) {
        (true, Some(done)) => Ok(done),
        (true, None) => Err(Failure::new(format!("`{line}` ended without libFuzzer's `Done` line"))),
        (false, _) => {
            for l in &tail {
                println!("  | {l}");
            }
            if !started {
                return Err(Failure::new(format!("fuzz target `{name}` did not build or start (see above)"))
                    .fix(format!("`cd fuzz && cargo +nightly fuzz build {name}` shows the error; fix the target")));
            }
            Err(Failure::new(format!("fuzz target `{name}` failed; libFuzzer saved the input under fuzz/artifacts/{name}/"))
                .fix(format!(
                    "reproduce with `cargo +nightly fuzz run {name} fuzz/artifacts/{name}/<file>`, add that input as a regular test of the crate it breaks, fix it, rerun `cargo xtask fuzz`"
                )))
        }
    }
}

/// Lines worth showing from libFuzzer's stream.
fn milestone(line: &str) -> bool {
    line.contains("INITED") || line.contains("DONE") || line.starts_with("Done ") || line.contains("panicked")
}

/// `Done 310711 runs in 61 second(s)` -> (310711, 61).
fn done_line(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("Done ")?;
    let (runs, rest) = rest.split_once(" runs in ")?;
    let (secs, _) = rest.split_once(' ')?;
    Some((runs.parse().ok()?, secs.parse().ok()?))
}

/// The `name`s of the `[[bin]]` sections of the fuzz manifest, in order.
fn targets(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin
            && let Some(value) = line.strip_prefix("name").map(str::trim_start).and_then(|l| l.strip_prefix('='))
        {
            out.push(value.trim().trim_matches('"').to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        assert_eq!(parse_args(&[]), Ok(DEFAULT_SECONDS));
        assert_eq!(parse_args(&["--seconds", "60"]), Ok(60));
        for bad in [&["--seconds", "0"][..], &["--seconds", "x"], &["--seconds"], &["60"]] {
            assert!(parse_args(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn manifest_targets() {
        let manifest = "[package]\nname = \"drain-fuzz\"\n\n[[bin]]\nname = \"settings\"\npath = \"a.rs\"\n\n[dependencies]\nname = \"x\"\n\n[[bin]]\nname=\"keys\"\n";
        assert_eq!(targets(manifest), ["settings", "keys"]);
    }

    #[test]
    fn libfuzzer_lines() {
        assert_eq!(done_line("Done 310711 runs in 61 second(s)"), Some((310_711, 61)));
        assert_eq!(done_line("#310711\tDONE   cov: 1"), None);
        assert!(milestone("#2\tINITED cov: 3 ft: 3"));
        assert!(!milestone("#1024\tpulse  cov: 3"));
    }
}

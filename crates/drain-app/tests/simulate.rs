//! `drain simulate` as a reviewer runs it: the built binary, its JSON, its table, its
//! chart, its arguments and its progress bar. The figures themselves are
//! drain-simulate's tests.
#![allow(clippy::disallowed_methods, reason = "a test harness reads its DRAIN_TEST_* and CI variables")]

mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::drain;

fn run(args: &[&str]) -> Output {
    let out = drain().arg("simulate").args(args).output().expect("run drain");
    assert!(out.status.success(), "drain simulate {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn json(args: &[&str]) -> (Vec<u8>, Value) {
    let out = run(&[args, &["--json"]].concat());
    let v = serde_json::from_slice(&out.stdout).expect("one JSON object");
    (out.stdout, v)
}

#[test]
fn the_same_seed_gives_byte_identical_output() {
    let args = ["--scenario", "seed-fleet", "--duration", "120", "--seed", "7"];
    let (first, v) = json(&args);
    let (second, _) = json(&args);
    assert_eq!(first, second, "byte-identical");
    assert_eq!(first.iter().filter(|&&b| b == b'\n').count(), 1, "exactly one line");
    assert_eq!((&v["seed"], &v["scenario"]), (&Value::from(7), &Value::from("seed-fleet")));
    let (other, _) = json(&["--scenario", "seed-fleet", "--duration", "120", "--seed", "8"]);
    assert_ne!(first, other, "another seed, another run");
    let table = |seed: &str| run(&["--duration", "60", "--seed", seed]).stdout;
    assert_eq!(table("3"), table("3"));
}

#[test]
fn every_override_reaches_the_scenario() {
    let (_, v) = json(&[
        "--instances",
        "4",
        "--owners",
        "50",
        "--duration",
        "60",
        "--rate",
        "10",
        "--requested-of",
        "2",
        "--item-ms",
        "20",
    ]);
    let config = &v["config"];
    for (field, expected) in
        [("instances", 4.0), ("owners", 50.0), ("duration_s", 60.0), ("rate_per_s", 10.0), ("requested_of", 2.0)]
    {
        assert_eq!(config[field].as_f64(), Some(expected), "{field}: {config}");
    }
    assert_eq!(config["item_ms"]["median"].as_f64(), Some(20.0), "{config}");
}

#[test]
fn the_table_the_policies_and_the_chart() {
    let dir = std::env::temp_dir().join(format!("drain-simulate-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let svg = dir.join("sim.svg");
    let out = run(&["--duration", "60", "--svg", svg.to_str().expect("utf-8 path")]);
    let table = String::from_utf8(out.stdout).expect("utf-8");
    for text in [
        "claim-busy turns",
        "item latency p99 ms",
        "requests skipped as served",
        "lease off",
        "wasted receives",
        "against legacy",
        "against the oracle",
    ] {
        assert!(table.contains(text), "table shows {text}:\n{table}");
    }
    let chart = std::fs::read_to_string(&svg).expect("chart written");
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    assert_eq!(chart.matches("<path").count(), 10, "two panels x five policies");
    for text in ["legacy", "claim_aware_wake", "oracle", "minutes since start", "milliseconds (log scale)"] {
        assert!(chart.contains(text), "chart shows {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    // The keys in the order the report prints them (the policies' order).
    let keys = |args: &[&str]| {
        let (text, v) = json(&[args, &["--duration", "60"]].concat());
        let text = String::from_utf8(text).expect("utf-8");
        let mut keys: Vec<String> = v["policies"].as_object().expect("policies").keys().cloned().collect();
        keys.sort_by_key(|k| text.find(&format!("\"{k}\":{{\"runs\"")));
        keys
    };
    assert_eq!(keys(&[]), ["legacy", "claim_aware", "claim_aware_wake", "skip_served", "oracle"]);
    assert_eq!(keys(&["--explore"]).len(), 9);
    assert_eq!(keys(&["--policy", "oracle", "--policy", "legacy"]), ["oracle", "legacy"]);
}

#[test]
fn bad_arguments_exit_2_with_a_reason() {
    for (args, reason) in [
        (&["--requested-of", "9"][..], "more than the 8 instances"),
        (&["--policy", "nope"][..], "unknown policy `nope`"),
        (&["--rate=0"][..], "--rate 0"),
        (&["--rate", "100000", "--duration", "3600"][..], "items"),
    ] {
        let out = drain().arg("simulate").args(args).output().expect("run drain");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(reason), "{args:?}: {err}");
    }
    let out = drain().args(["simulate", "--scenario", "huge"]).output().expect("run drain");
    assert_eq!(out.status.code(), Some(2), "clap rejects an unknown preset");
}

/// A run of several seconds: the large scenario's oracle over four hours of arrivals.
const LONG_RUN: [&str; 7] = ["--scenario", "large", "--policy", "oracle", "--duration", "14400", "--seed"];

/// On a terminal (a pseudo-terminal from util-linux' `script`), a run longer than a
/// second shows a progress bar on stderr: virtual time simulated and runs done.
#[test]
fn a_long_run_shows_progress_on_a_terminal() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let transcript = dir.join(format!("simulate-progress-{}.txt", std::process::id()));
    let command = format!("{} simulate {} 3", env!("CARGO_BIN_EXE_drain"), LONG_RUN.join(" "));
    let out = Command::new("script")
        .args(["--quiet", "--return", "--command", &command])
        .arg(&transcript)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux `script` (Debian's bsdutils) runs the command on a pseudo-terminal");
    assert!(out.status.success(), "{out:?}");
    let seen = String::from_utf8_lossy(&std::fs::read(&transcript).expect("transcript")).into_owned();
    let _ = std::fs::remove_file(&transcript);
    assert!(seen.contains("s simulated, ") && seen.contains("runs done"), "a progress bar:\n{seen}");
    assert!(seen.contains("of 14400 s simulated"), "virtual time against the window:\n{seen}");
    assert!(seen.contains("throughput items/s"), "then the table:\n{seen}");
}

/// The same run with stderr in a pipe: no progress output at all.
#[test]
fn no_progress_when_stderr_is_not_a_terminal() {
    let out = run(&[&LONG_RUN[..], &["3"]].concat());
    assert!(out.stderr.is_empty(), "nothing on stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("throughput items/s"), "the table on stdout");
}

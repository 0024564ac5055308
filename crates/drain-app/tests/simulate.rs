//! `drain simulate` as a reviewer runs it: the built binary, its JSON, its table and
//! its chart. Every assertion is on counts and ratios of virtual time, never on
//! wall time.
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

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_f64().unwrap_or_else(|| panic!("{} is not a number: {at}", path.join(".")))
}

const FIELDS: [&str; 10] = [
    "claim_busy_turns",
    "useful_turns",
    "peeks",
    "wasted_turns_per_useful",
    "owner_latency_p50_ms",
    "owner_latency_p99_ms",
    "throughput_per_s",
    "handoffs",
    "timers",
    "empty_turns",
];

/// The bar on the default scenario (8 instances, 200 owners, 40 items/s, each
/// arrival requested of 3): claim-aware cuts claim-busy turns by at least 90 % at
/// throughput of at least 0.95x legacy; the release wake-up keeps that cut with p99
/// latency within 1.2x legacy; the oracle wastes nothing.
#[test]
fn default_scenario_cuts_contention_without_slowing_the_work() {
    let (_, v) = json(&[]);
    assert_eq!((&v["seed"], &v["scenario"]), (&Value::from(1), &Value::from("default")));
    assert_eq!(num(&v, &["config", "instances"]), 8.0);
    assert_eq!(num(&v, &["config", "owners"]), 200.0);
    assert_eq!(num(&v, &["config", "requested_of"]), 3.0);
    let policies = v["policies"].as_object().expect("policies");
    for key in ["legacy", "claim_aware", "claim_aware_wake", "skip_served", "oracle"] {
        let p = &policies[key];
        for field in FIELDS {
            assert!(p[field].is_number(), "{key}.{field}");
        }
        for lease in ["lease_off", "lease_on"] {
            for field in ["overlapping_drains", "wasted_receives"] {
                assert!(p["ticks"][lease][field].is_number(), "{key}.ticks.{lease}.{field}");
            }
        }
    }
    let get = |policy: &str, field: &str| num(&v, &["policies", policy, field]);

    let legacy_busy = get("legacy", "claim_busy_turns");
    assert!(legacy_busy > 10_000.0, "legacy spins on held claims: {legacy_busy}");
    assert_eq!(get("legacy", "peeks"), 0.0, "legacy never peeks");

    for policy in ["claim_aware", "claim_aware_wake"] {
        let cut = 1.0 - get(policy, "claim_busy_turns") / legacy_busy;
        assert!(cut >= 0.90, "{policy} cuts claim-busy turns by {:.1} %", cut * 100.0);
        let throughput = get(policy, "throughput_per_s") / get("legacy", "throughput_per_s");
        assert!(throughput >= 0.95, "{policy} throughput {throughput:.3}x legacy");
        assert!(get(policy, "peeks") > 0.0, "{policy} peeks before initial launches");
        assert!(
            get(policy, "wasted_turns_per_useful") < get("legacy", "wasted_turns_per_useful"),
            "{policy} wastes less per useful turn"
        );
        assert_eq!(get(policy, "items_unfinished"), 0.0, "{policy} leaves nothing behind");
    }
    // The first claim-aware policy's 5-15 s backoff costs p99 latency (requests absorbed by pending
    // timers); the release wake-up takes it back to within 1.2x legacy.
    let p99 = |policy| get(policy, "owner_latency_p99_ms") / get("legacy", "owner_latency_p99_ms");
    assert!(p99("claim_aware") > 1.2, "the first claim-aware policy pays in p99: {:.2}x", p99("claim_aware"));
    assert!(p99("claim_aware_wake") <= 1.2, "wake-up p99 {:.2}x legacy", p99("claim_aware_wake"));
    assert!(get("claim_aware_wake", "release_wakes") > 0.0);
    assert!(
        get("claim_aware_wake", "requests_absorbed_by_backoff") * 5.0
            < get("claim_aware", "requests_absorbed_by_backoff")
    );
    assert_eq!(get("legacy", "release_wakes") + get("claim_aware", "release_wakes"), 0.0);

    // The oracle is a model that never wastes a turn.
    for field in ["claim_busy_turns", "empty_turns", "peeks", "wasted_turns_per_useful"] {
        assert_eq!(get("oracle", field), 0.0, "oracle {field}");
    }
    assert!(get("oracle", "owner_latency_p99_ms") <= get("claim_aware", "owner_latency_p99_ms"));

    // Ticks: overlapping drains race without the lease and never with it.
    let tick = |lease: &str, field: &str| num(&v, &["ticks", lease, field]);
    assert!(tick("lease_off", "overlapping_drains") > 0.0 && tick("lease_off", "wasted_receives") > 0.0);
    assert_eq!((tick("lease_on", "overlapping_drains"), tick("lease_on", "wasted_receives")), (0.0, 0.0));
    assert!(tick("lease_on", "skipped_locked") > 0.0);
    assert_eq!(tick("lease_on", "submitted"), tick("lease_on", "messages"));
    assert_eq!(v["ticks"], v["policies"]["legacy"]["ticks"], "the tick side is policy-independent");
}

/// The bar for skipping served requests (drain marks), in the default scenario and
/// the seeds' own situation, seeds 1 to 5: at most 0.5 wasted turns per useful turn,
/// p99 item latency within 1.05x the oracle's, throughput 1.000x legacy's, nothing
/// left behind; and the requests it skipped are what removed the empty turns.
#[test]
fn skipping_served_requests_comes_within_reach_of_the_oracle() {
    for scenario in ["default", "seed-fleet"] {
        for seed in ["1", "2", "3", "4", "5"] {
            let (_, v) = json(&["--scenario", scenario, "--seed", seed]);
            within_reach(&v, &format!("{scenario} seed {seed}"));
            let get = |policy: &str, field: &str| num(&v, &["policies", policy, field]);
            assert!(get("skip_served", "requests_skipped_as_served") > get("skip_served", "useful_turns"));
            for policy in ["legacy", "claim_aware", "claim_aware_wake", "oracle"] {
                assert_eq!(get(policy, "requests_skipped_as_served"), 0.0, "{policy} never skips");
            }
            assert!(get("claim_aware_wake", "wasted_turns_per_useful") > 2.0, "today's default wastes: {scenario}");
            let throughput = get("skip_served", "throughput_per_s") / get("legacy", "throughput_per_s");
            assert!(throughput >= 0.9995, "{scenario} seed {seed}: throughput {throughput:.4}x legacy's");
        }
    }
}

/// The same bar at scale: 50 instances, 10,000 owners, one hour.
#[test]
fn skipping_served_requests_holds_at_scale() {
    let (_, v) = json(&["--scenario", "large", "--policy", "skip_served", "--policy", "oracle"]);
    within_reach(&v, "large seed 1");
}

#[track_caller]
fn within_reach(v: &Value, case: &str) {
    let get = |policy: &str, field: &str| num(v, &["policies", policy, field]);
    let waste = get("skip_served", "wasted_turns_per_useful");
    assert!(waste <= 0.5, "{case}: {waste} wasted turns per useful turn");
    let p99 = get("skip_served", "owner_latency_p99_ms") / get("oracle", "owner_latency_p99_ms");
    assert!(p99 <= 1.05, "{case}: p99 {p99:.3}x the oracle's");
    assert_eq!(num(v, &["p99_versus_oracle", "skip_served"]), (p99 * 1000.0).round() / 1000.0, "{case}");
    // Throughput 1.000x: equal to three decimals (an item may end a millisecond past the window).
    let throughput = get("skip_served", "throughput_per_s") / get("oracle", "throughput_per_s");
    assert!(throughput >= 0.9995, "{case}: throughput {throughput:.4}x the oracle's");
    assert_eq!(get("skip_served", "items_unfinished"), 0.0, "{case}: nothing left behind");
    assert_eq!(get("skip_served", "items_done"), num(v, &["items"]), "{case}: every item once");
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
fn overrides_shape_the_run() {
    let (_, v) =
        json(&["--instances", "4", "--owners", "50", "--duration", "60", "--rate", "10", "--requested-of", "2"]);
    for (field, expected) in [("instances", 4.0), ("owners", 50.0), ("duration_s", 60.0), ("rate_per_s", 10.0)] {
        assert_eq!(num(&v, &["config", field]), expected, "{field}");
    }
    assert_eq!(num(&v, &["config", "requested_of"]), 2.0);
    let items = num(&v, &["items"]);
    assert!((400.0..800.0).contains(&items), "about 600 items: {items}");
    let done = num(&v, &["policies", "oracle", "items_done"]);
    assert_eq!(done + num(&v, &["policies", "oracle", "items_unfinished"]), items, "every item accounted for");
}

#[test]
fn the_table_the_explore_mode_and_the_chart() {
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

    let (_, v) = json(&["--explore", "--duration", "60"]);
    let keys: Vec<&String> = v["policies"].as_object().expect("policies").keys().collect();
    assert_eq!(keys.len(), 9, "{keys:?}");
    let (_, v) = json(&["--policy", "legacy", "--policy", "oracle", "--duration", "60"]);
    assert_eq!(v["policies"].as_object().map(|p| p.len()), Some(2));
    assert!(v["versus_legacy"]["oracle"]["claim_busy_cut"].is_number());
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

//! The `drain` binary on the embedded default (no server): a second signal, and
//! settings from a `--config` file.

use std::process::Command;
use std::time::Duration;

use drain_e2e::{Running, drain, output};

/// The longest any one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);

/// `drain run` whose first tick holds the (embedded) lease through the demo's
/// burst, about 15 s at 100 ms a submit; no second beat.
fn slow_run(grace_seconds: u32) -> Running {
    let mut cmd = drain();
    cmd.arg("run")
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "3600")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", grace_seconds.to_string());
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("lease acquired", Duration::from_secs(20)), "the first tick runs:\n{}", run.log());
    run
}

/// SIGTERM to `pid`, `times` times from one `kill` (microseconds apart).
fn sigterm(pid: u32, times: usize) {
    let pid = pid.to_string();
    let status = Command::new("kill").arg("-TERM").args(std::iter::repeat_n(&pid, times)).status().expect("kill");
    assert!(status.success());
}

/// The first signal starts a graceful shutdown that would wait up to the grace
/// period (here 10 minutes) for the running tick; a second one, sent as a person
/// presses Ctrl-C twice (well within a second), exits at once with 130. This used
/// to be ignored when it came within 1 s of the first.
#[test]
fn a_second_signal_exits_at_once_without_waiting_for_the_running_tick() {
    let mut run = slow_run(600);
    run.terminate();
    assert!(run.wait_for("waiting for running ticks", Duration::from_secs(10)), "{}", run.log());
    std::thread::sleep(Duration::from_millis(300));
    run.terminate();
    // The tick alone has ~14 s left and the grace period is 600 s.
    let status = run.wait_exit(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(130), "exit 130 at once: {status:?}\n{}", run.log());
    assert_eq!(run.count("second signal: exiting now"), 1, "{}", run.log());
    assert_eq!(run.count("shutdown complete"), 0, "the graceful path did not finish first:\n{}", run.log());
    assert_eq!(run.count("tick done") + run.count("tick ended early"), 0, "the tick was cut short:\n{}", run.log());
}

/// One signal delivered twice within microseconds (as `timeout` does: to the
/// process, then to its group) is one request: a graceful shutdown, exit 0.
#[test]
fn one_signal_delivered_twice_still_shuts_down_gracefully() {
    let mut run = slow_run(1);
    sigterm(run.pid(), 2);
    let status = run.wait_exit(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "exit 0: {status:?}\n{}", run.log());
    assert_eq!(run.count("shutdown complete"), 1, "{}", run.log());
    assert_eq!(run.count("second signal: exiting now"), 0, "{}", run.log());
}

/// Settings from a `--config` TOML file apply (`drain config` shows origin `file`,
/// `drain run --once` behaves by them), and a setting also in the environment takes
/// the environment's value, shown with origin `env`.
#[test]
fn config_file_settings_apply_and_the_environment_wins() {
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("drain-e2e-config-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "# drain settings (names as the environment variables; any case)\n\
         SERVICEBUS_DRAIN_SINGLEFLIGHT = \"on\"\n\
         servicebus_drain_concurrency = 8\n\
         SERVICEBUS_ATOMIC_CLAIM = true\n\
         DRAIN_KEY_PREFIX = \"from-file\"\n\
         DRAIN_BEAT_INTERVAL_SECONDS = 3\n",
    )
    .expect("write the config file");
    let with_file = |args: &[&str]| {
        let mut cmd = drain();
        cmd.arg("--config").arg(&path).args(args).env("SERVICEBUS_ATOMIC_CLAIM", "off");
        let out = output(cmd, LIMIT);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let json: serde_json::Value = serde_json::from_str(&with_file(&["config", "--json"])).expect("JSON");
    let setting = |name: &str| {
        let s = json["settings"].as_array().unwrap().iter().find(|s| s["name"] == name).cloned();
        let s = s.unwrap_or_else(|| panic!("{name} listed: {json}"));
        (s["value"].as_str().unwrap().to_owned(), s["origin"].as_str().unwrap().to_owned())
    };
    let expected = [
        ("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on", "file"),
        ("SERVICEBUS_DRAIN_CONCURRENCY", "8", "file"),
        ("DRAIN_KEY_PREFIX", "from-file", "file"),
        ("DRAIN_BEAT_INTERVAL_SECONDS", "3", "file"),
        ("SERVICEBUS_ATOMIC_CLAIM", "off", "env"),
        ("SERVICEBUS_DRAIN_BATCH", "32", "default"),
    ];
    for (name, value, origin) in expected {
        assert_eq!(setting(name), (value.to_owned(), origin.to_owned()), "{name}");
    }
    assert_eq!(json["warnings"], serde_json::json!([]), "{json}");

    // The human table shows the same origins.
    let table = with_file(&["config"]);
    for (name, value, origin) in expected {
        let row = table.lines().find(|l| l.split_whitespace().next() == Some(name));
        let row: Vec<&str> = row.unwrap_or_else(|| panic!("{name} in:\n{table}")).split_whitespace().collect();
        assert_eq!(row, [name, origin, value], "{table}");
    }

    // And a run follows them: the lease is on (from the file), the claim off (the
    // environment), so the demo's redelivered duplicates are submitted, not suppressed.
    let report: serde_json::Value = serde_json::from_str(&with_file(&["run", "--once"])).expect("one JSON line");
    let _ = std::fs::remove_file(&path);
    assert_eq!((&report["lease"], &report["fence"]), (&"held".into(), &1.into()), "{report}");
    assert_eq!(report["duplicates"], 0, "{report}");
    let count = |key: &str| report[key].as_u64().unwrap_or(0);
    assert_eq!(count("received"), count("submitted") + count("abandoned"), "{report}");
    // The burst has 30 distinct messages; with the claim on 3 of its redeliveries
    // would be suppressed, here they are submitted too.
    assert!(count("submitted") > 30, "{report}");
}

/// `drain config --json` with `env`: the warnings, and the `(value, origin)` of `name`.
fn config(env: &[(&str, &str)], name: &str) -> (Vec<serde_json::Value>, (String, String)) {
    let mut cmd = drain();
    cmd.args(["config", "--json"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = output(cmd, LIMIT);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("config --json");
    let s = json["settings"].as_array().expect("settings").iter().find(|s| s["name"] == name).cloned();
    let s = s.unwrap_or_else(|| panic!("{name} listed: {json}"));
    let shown =
        (s["value"].as_str().unwrap_or_default().to_owned(), s["origin"].as_str().unwrap_or_default().to_owned());
    (json["warnings"].as_array().cloned().unwrap_or_default(), shown)
}

/// Warnings name the variable that was actually bad, with its value: a typo of a
/// known name is warned about with the closest one (before: ignored in silence); a
/// lone backoff minimum above the maximum's default blames the minimum (before: the
/// unset maximum, with an empty value); a value that fell back to its default shows
/// origin `default` (before: `env`).
#[test]
fn warnings_name_the_bad_variable_and_fallbacks_show_origin_default() {
    let (warnings, singleflight) = config(&[("SERVICEBUS_DRAIN_SINGLEFLIGT", "on")], "SERVICEBUS_DRAIN_SINGLEFLIGHT");
    assert_eq!(singleflight, ("off".to_owned(), "default".to_owned()), "the typo is not applied");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["variable"], "SERVICEBUS_DRAIN_SINGLEFLIGT");
    let message = warnings[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did you mean SERVICEBUS_DRAIN_SINGLEFLIGHT?"), "{message}");

    let (warnings, _) =
        config(&[("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", "20")], "PROJECTION_DRAIN_BACKOFF_MIN_SECONDS");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        (&warnings[0]["variable"], &warnings[0]["value"]),
        (&"PROJECTION_DRAIN_BACKOFF_MIN_SECONDS".into(), &"20".into())
    );

    for (name, raw, shown) in [
        ("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "abc", "120"),
        ("SERVICEBUS_ATOMIC_CLAIM", "nope", "on"),
        ("DRAIN_METRICS_ADDR", "everywhere", "127.0.0.1:9464"),
    ] {
        let (warnings, value) = config(&[(name, raw)], name);
        assert_eq!(value, (shown.to_owned(), "default".to_owned()), "{name}={raw}");
        assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
    }
    let (_, clamped) = config(&[("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "5")], "SERVICEBUS_DRAIN_LOCK_TTL_SECONDS");
    assert_eq!(clamped, ("10".to_owned(), "env".to_owned()), "a clamped value still comes from the environment");
}

/// With one worker and a beat every second, every beat during the demo's 15 s first
/// tick finds the worker busy: that is one warning a minute with a count (before: a
/// warning every beat). The tick, longer than 5 s, logs its progress every 5 s with
/// what it received and submitted so far (before: nothing until it ended).
#[test]
fn a_busy_beat_and_a_long_tick_log_summaries() {
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_LOG", "info")
        .env("DRAIN_WORKER_CONCURRENCY", "1")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "0");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("still running after 10 s", Duration::from_secs(30)), "{}", run.log());
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(20)).is_some(), "{}", run.log());
    let busy = run.count("workers busy");
    assert_eq!(busy, 1, "one busy warning in the first minute, not one per beat:\n{}", run.log());
    let line = run.seen.iter().find(|l| l.contains("workers busy")).cloned().unwrap_or_default();
    let line: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
    assert!(line["beats"].as_u64().is_some_and(|n| n >= 1), "with a count: {line}");
    let progress: Vec<serde_json::Value> = run
        .seen
        .iter()
        .filter(|l| l.contains("still running after"))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(progress.len() >= 2, "progress at 5 s and 10 s:\n{}", run.log());
    for p in &progress {
        assert!(p["received"].as_u64().is_some_and(|n| n > 0), "{p}");
        assert!(p["submitted"].as_u64().is_some(), "{p}");
    }
    assert!(progress[1]["submitted"].as_u64() > progress[0]["submitted"].as_u64(), "progress moves: {progress:?}");
}

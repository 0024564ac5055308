//! The `drain` binary as an operator runs it, on the embedded default.
#![allow(clippy::disallowed_methods, reason = "a test harness reads its DRAIN_TEST_* and CI variables")]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The built `drain` on a clean slate, its metrics endpoint off.
fn drain() -> Command {
    let mut c = support::drain();
    c.env("DRAIN_METRICS_ADDR", "off");
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills the child if a test fails before it exits.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cmd` spawned, stdout discarded, with the lines of its stderr read on a thread.
fn spawn_logged(cmd: &mut Command) -> (Guard, mpsc::Receiver<String>) {
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (Guard(child), rx)
}

/// Wait (bounded) for a line containing `needle`; returns every line seen so far.
fn wait_for(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, needle: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    if seen.iter().any(|l| l.contains(needle)) {
        return true;
    }
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let hit = line.contains(needle);
                seen.push(line);
                if hit {
                    return true;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn once_prints_one_json_report_and_exits_zero() {
    let out = drain()
        .args(["run", "--once"])
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "16")
        .output()
        .expect("run drain");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stdout: {stdout}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(v["queue"], "requests");
    assert_eq!(v["lease"], "held");
    assert_eq!(v["fence"], 1);
    let received = v["received"].as_u64().unwrap();
    let settled: u64 =
        ["submitted", "duplicates", "abandoned", "dead_lettered"].iter().map(|k| v[k].as_u64().unwrap()).sum();
    assert!(received >= 30, "the demo burst was drained: {v}");
    assert_eq!(received, settled, "every received message is accounted for: {v}");
    assert!(v["duplicates"].as_u64().unwrap() > 0, "demo duplicates are suppressed by the claim: {v}");
}

#[test]
fn config_redacts_secrets_and_reports_warnings() {
    let out = drain()
        .args(["config", "--json"])
        .env("DRAIN_REDIS_URL", "redis://app:topsecret@127.0.0.1:6379")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "3")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("topsecret"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ttl =
        v["settings"].as_array().unwrap().iter().find(|s| s["name"] == "SERVICEBUS_DRAIN_LOCK_TTL_SECONDS").unwrap();
    assert_eq!((ttl["value"].as_str(), ttl["origin"].as_str()), (Some("10"), Some("env")));
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1);
    assert_eq!(v["warnings"][0]["variable"], "SERVICEBUS_DRAIN_LOCK_TTL_SECONDS");
}

#[test]
fn a_bad_url_is_a_clear_fatal_error_without_the_secret() {
    let out = drain().args(["run", "--once"]).env("DRAIN_REDIS_URL", "http://u:topsecret@host").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("DRAIN_REDIS_URL") && err.contains("redis://"), "{err}");
    assert!(!err.contains("topsecret"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn flags_markdown_matches_the_committed_docs() {
    let out = drain().args(["config", "--flags-markdown"]).output().unwrap();
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/flags.md"))
        .expect("docs/flags.md exists (cargo xtask flags --write)");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed, "run `cargo xtask flags --write`");
}

#[test]
fn run_skips_overlapping_ticks_serves_metrics_and_shuts_down_on_sigterm() {
    let port = free_port();
    let mut cmd = drain();
    cmd.arg("run")
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        .env("DRAIN_LOG", "debug")
        .env("DRAIN_LOG_FORMAT", "json")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{port}"));
    let (mut child, rx) = spawn_logged(&mut cmd);
    let mut seen = Vec::new();
    assert!(wait_for(&rx, &mut seen, "tick skipped", Duration::from_secs(20)), "no skipped tick:\n{}", seen.join("\n"));
    for l in &seen {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
    }
    // Every skipped tick logs exactly one line: the log count brackets the counter.
    std::thread::sleep(Duration::from_millis(2500));
    let drain_rx = |seen: &mut Vec<String>| seen.extend(rx.try_iter());
    let skips = |seen: &[String]| seen.iter().filter(|l| l.contains("tick skipped")).count() as u64;
    drain_rx(&mut seen);
    let before = skips(&seen);
    let body = scrape(port);
    drain_rx(&mut seen);
    let after = skips(&seen);
    let counted: u64 = body
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"drain_ticks_total{queue="requests",outcome="skipped_locked",mode="on",kind="beat"} "#)
        })
        .unwrap_or_else(|| panic!("no skipped_locked counter:\n{body}"))
        .parse()
        .unwrap();
    assert!(counted >= 2, "several overlapping ticks were skipped: {counted}");
    assert!(before <= counted && counted <= after, "one log line per skipped tick: {before} <= {counted} <= {after}");
    assert!(body.contains(r#"drain_switch_mode{switch="SERVICEBUS_DRAIN_SINGLEFLIGHT",mode="on"} 1"#), "{body}");
    assert!(body.contains(r#"drain_lease_ops_total{op="acquire",result="acquired",mode="on"} 1"#), "{body}");

    let pid = child.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(wait_for(&rx, &mut seen, "shutdown complete", Duration::from_secs(15)), "{}", seen.join("\n"));
    let status = child.0.wait().unwrap();
    assert!(status.success(), "exit 0 after SIGTERM: {status:?}");
    let report = seen.iter().find(|l| l.contains(r#"\"stopped\":true"#) || l.contains(r#""stopped":true"#));
    assert!(report.is_some(), "the running tick was stopped cooperatively:\n{}", seen.join("\n"));
    assert!(seen.iter().any(|l| l.contains("grace period over")), "{}", seen.join("\n"));
}

/// Every subcommand `drain --help` lists has examples in its own `--help`, and
/// each example section runs that subcommand.
#[test]
fn every_subcommand_help_shows_its_examples() {
    let out = drain().arg("--help").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8(out.stdout).unwrap();
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 6, "the command list was found: {commands:?}\n{help}");
    for command in &commands {
        let out = drain().args([command.as_str(), "--help"]).output().unwrap();
        assert!(out.status.success(), "{command}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let examples: Vec<&str> =
            text.lines().skip_while(|l| *l != "Examples:").skip(1).take_while(|l| l.starts_with("  ")).collect();
        let runs_it = |l: &&str| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).any(|w| w == ["drain", command.as_str()])
        };
        assert!(examples.iter().any(runs_it), "`drain {command} --help` shows examples of it:\n{text}");
    }
}

/// A bare `drain` says what `drain --help` says, on stdout, exit 0 (it printed the
/// crate's description, a usage line and an error, exit 2).
#[test]
fn bare_drain_says_what_drain_help_says() {
    let bare = drain().output().unwrap();
    let help = drain().arg("--help").output().unwrap();
    assert!(bare.status.success() && help.status.success(), "{bare:?}\n{help:?}");
    let (bare_text, help_text) = (String::from_utf8(bare.stdout).unwrap(), String::from_utf8(help.stdout).unwrap());
    assert_eq!(bare_text, help_text);
    assert!(bare.stderr.is_empty(), "nothing on stderr: {}", String::from_utf8_lossy(&bare.stderr));
    assert!(help_text.starts_with("Single-flight queue drains"), "{help_text}");
    assert!(help_text.contains("Commands:") && help_text.contains("  run "), "{help_text}");
}

/// `drain run` starts with one line saying what it will do, the store's password
/// masked; the first scrape answers with the text format's full content type and
/// shows every registry switch and every counter the process can move at 0 (so an
/// alert on `rate()` sees the first fail-open or lease loss).
#[test]
fn run_says_what_it_will_do_and_exports_every_series_from_the_first_scrape() {
    let (port, redis_port) = (free_port(), free_port());
    let mut cmd = drain();
    cmd.args(["run", "--resident"])
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("PROJECTION_DRAIN_CLAIM_AWARE", "shadow")
        // Nothing listens there: the start line must not need the store.
        .env("DRAIN_REDIS_URL", format!("redis://drain:hunter2@127.0.0.1:{redis_port}"))
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "3600")
        .env("DRAIN_LOG_FORMAT", "json")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{port}"));
    let (child, rx) = spawn_logged(&mut cmd);
    let mut seen = Vec::new();
    assert!(wait_for(&rx, &mut seen, "drain run: queue", Duration::from_secs(20)), "{}", seen.join("\n"));
    let starts: Vec<&String> = seen.iter().filter(|l| l.contains("drain run: queue")).collect();
    assert_eq!(starts.len(), 1, "{}", seen.join("\n"));
    let start = starts[0];
    for part in [
        "queue requests from the embedded demo queue to the embedded target",
        &format!("store redis at redis://drain:***@127.0.0.1:{redis_port}"),
        "switches on: SERVICEBUS_DRAIN_SINGLEFLIGHT, SERVICEBUS_DRAIN_LEASE_RENEW, SERVICEBUS_ATOMIC_CLAIM, PROJECTION_DRAIN_CLAIM_AWARE (shadow), PROJECTION_DRAIN_RELEASE_WAKE, PROJECTION_DRAIN_SKIP_SERVED;",
        "a tick every 3600 s on 4 workers, messages 1..=512 (adaptive) at a time, plus the resident consumer",
    ] {
        assert!(start.contains(part), "`{part}` in the start line: {start}");
    }
    assert!(!seen.join("\n").contains("hunter2"), "the password never shows:\n{}", seen.join("\n"));

    let page = scrape(port);
    let (head, body) = page.split_once("\r\n\r\n").expect("an HTTP answer");
    let head = head.to_ascii_lowercase();
    assert!(head.lines().any(|l| l == "content-type: text/plain; version=0.0.4; charset=utf-8"), "{head}");
    for (switch, on) in [
        ("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on"),
        ("SERVICEBUS_DRAIN_LEASE_RENEW", "on"),
        ("SERVICEBUS_ATOMIC_CLAIM", "on"),
        ("PROJECTION_DRAIN_CLAIM_AWARE", "shadow"),
        ("PROJECTION_DRAIN_RELEASE_WAKE", "on"),
        ("DRAIN_REDIS_CLUSTER", "off"),
    ] {
        let line = format!(r#"drain_switch_mode{{switch="{switch}",mode="{on}"}} 1"#);
        assert!(body.lines().any(|l| l == line), "`{line}` in:\n{body}");
    }
    for zero in [
        r#"drain_ticks_total{queue="requests",outcome="fail_open",mode="on",kind="beat"} 0"#,
        r#"drain_lease_ops_total{op="renew",result="error",mode="on"} 0"#,
        "drain_lease_lost_total 0",
        r#"drain_messages_total{queue="requests",outcome="claim_error",mode="on"} 0"#,
    ] {
        // The first tick may already have run (and failed open on the absent store):
        // the series exists from the start either way; its value is what it counted.
        let series = zero.rsplit_once(' ').unwrap().0;
        assert!(body.lines().any(|l| l.starts_with(series)), "`{series}` exported from the start:\n{body}");
    }
    assert!(body.contains(r#"kind="resident""#), "the resident consumer's series:\n{body}");
    assert!(!body.contains("drain_owner_"), "no owner drains in this process, no owner series:\n{body}");
    drop(child);
}

/// deploy/drain.toml, the example the systemd unit loads, applies as written: no
/// warning, every key it sets in effect with origin `file`.
#[test]
fn the_deploy_example_config_applies_without_warnings() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/drain.toml");
    let text = std::fs::read_to_string(&path).expect("deploy/drain.toml");
    let keys: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .collect();
    assert!(keys.len() >= 10, "the example sets the main settings: {keys:?}");
    // The helper turns metrics off through the environment; the file sets them here.
    let out = drain()
        .env_remove("DRAIN_METRICS_ADDR")
        .arg("--config")
        .arg(&path)
        .args(["config", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["warnings"], serde_json::json!([]), "no warning: {v}");
    let settings = v["settings"].as_array().expect("settings");
    for key in keys {
        let s = settings.iter().find(|s| s["name"] == key).unwrap_or_else(|| panic!("{key} is a known setting"));
        assert_eq!(s["origin"], "file", "{key} comes from the file: {s}");
    }
}

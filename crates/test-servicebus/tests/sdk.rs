//! Microsoft's own client is the judge: the `test-servicebus` binary, started the way
//! a person starts it, driven by the official `azure-servicebus` Python SDK (pinned in
//! `tests/sdk/requirements.txt`, installed into a venv under `target/`) through its
//! public API only (`tests/sdk/check.py`).
//!
//! Without Python's venv module or PyPI the test skips with the reason; under
//! `CI=true` it fails (`.ci/setup-services.sh` installs python3-venv).
#![allow(clippy::disallowed_methods, reason = "a test harness reads its DRAIN_TEST_* and CI variables")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The pinned requirements; the venv is rebuilt when they change.
const REQUIREMENTS: &str = include_str!("sdk/requirements.txt");
const SCRIPT: &str = "tests/sdk/check.py";
/// The entities `check.py` expects, in Microsoft's emulator configuration format.
const CONFIG: &str = "tests/sdk/Config.json";
/// Bound on the whole SDK run (about 25 s: its groups of checks run side by side).
const SDK_BOUND: Duration = Duration::from_secs(240);

/// The SDK cannot be set up: the check fails saying why and what to do.
fn unavailable(why: &str) -> ! {
    panic!("sdk check: {why}, so it cannot run; run `bash .ci/setup-services.sh`");
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
    }
}

/// Run `cmd` to the end, bounded; its combined output, or why it failed.
fn run(cmd: &mut Command, bound: Duration) -> Result<String, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let (tx, rx) = mpsc::channel();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|p| Box::new(p) as _),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let deadline = Instant::now() + bound;
    let mut out = String::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                out.push_str(&line);
                out.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not finish within {bound:?}:\n{out}"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    let status = child.wait().map_err(|e| format!("{what}: {e}"))?;
    if status.success() { Ok(out) } else { Err(format!("{what} exited with {status}:\n{out}")) }
}

/// The venv's python with the pinned SDK: reused when its marker matches the
/// requirements, built otherwise.
fn sdk_python() -> PathBuf {
    let dir = target_dir().join("servicebus-sdk");
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    let marker = venv.join("requirements.installed");
    if python.is_file() && std::fs::read_to_string(&marker).is_ok_and(|m| m == REQUIREMENTS) {
        return python;
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        unavailable(&format!("cannot create {}: {e}", dir.display()));
    }
    let _ = std::fs::remove_dir_all(&venv);
    if let Err(e) = run(Command::new("python3").arg("-m").arg("venv").arg(&venv), Duration::from_secs(120)) {
        unavailable(&format!("cannot create a Python venv (python3 and python3-venv needed): {e}"));
    }
    let requirements = dir.join("requirements.txt");
    if let Err(e) = std::fs::write(&requirements, REQUIREMENTS) {
        unavailable(&format!("cannot write {}: {e}", requirements.display()));
    }
    let install = run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", "-r"])
            .arg(&requirements),
        Duration::from_secs(300),
    );
    if let Err(e) = install {
        unavailable(&format!("cannot install azure-servicebus from PyPI: {e}"));
    }
    let _ = std::fs::write(&marker, REQUIREMENTS);
    python
}

/// The broker binary, killed (by its pid) when dropped.
struct BrokerProcess {
    child: Child,
    conn: String,
    stderr: mpsc::Receiver<String>,
}

impl BrokerProcess {
    fn start(queues: &[&str]) -> BrokerProcess {
        let args: Vec<String> = queues.iter().flat_map(|q| ["--queue".to_owned(), (*q).to_owned()]).collect();
        BrokerProcess::start_with(&args)
    }

    fn start_with(args: &[String]) -> BrokerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_test-servicebus"));
        cmd.args(["--port", "0"]).args(args);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start test-servicebus");
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let lines = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines.send(format!("stdout: {line}"));
            }
        });
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(format!("stderr: {line}"));
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(conn) = line.strip_prefix("stdout: ready ") {
                        return BrokerProcess { child, conn: conn.to_owned(), stderr: rx };
                    }
                    seen.push(line);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("test-servicebus printed no ready line:\n{}", seen.join("\n"));
    }

    fn log(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }

    /// SIGTERM (by pid) and wait, bounded, for the exit status.
    fn terminate(self) -> Option<std::process::ExitStatus> {
        self.signal("-TERM")
    }

    /// Send `signal` (by pid) and wait, bounded, for the exit status.
    fn signal(mut self, signal: &str) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill").arg(signal).arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn microsofts_sdk_accepts_the_broker() {
    let python = sdk_python();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join(CONFIG);
    let broker = BrokerProcess::start_with(&["--config".to_owned(), config.display().to_string()]);
    assert!(broker.conn.starts_with("Endpoint=sb://127.0.0.1:"), "{}", broker.conn);
    assert!(broker.conn.ends_with(";UseDevelopmentEmulator=true"), "{}", broker.conn);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCRIPT);
    let result = run(Command::new(&python).arg(&script).arg(&broker.conn), SDK_BOUND);
    let out = match result {
        Ok(out) => out,
        Err(e) => panic!("the SDK check failed:\n{e}\n--- broker log\n{}", broker.log()),
    };
    eprintln!("{out}");
    for check in [
        "send_with_ids_and_complete",
        "abandon_raises_the_delivery_count",
        "dead_letter_with_reason",
        "renew_lock_advances_locked_until",
        "an_expired_lock_redelivers_with_count_plus_one",
        "max_delivery_count_dead_letters",
        "duplicate_ids_are_dropped",
        "a_closed_receiver_gives_its_prefetched_messages_back_uncounted",
        "a_wrong_key_is_an_authentication_error",
        "sessions_are_fifo_exclusive_and_next_available_names_its_session",
        "session_state_and_lock_renewal",
        "a_session_lock_runs_out_and_the_session_is_free_again",
        "receivers_and_entities_must_agree_on_sessions",
        "a_topic_fans_out_by_rules",
        "scheduled_messages_wait_and_can_be_cancelled",
        "time_to_live_dead_letters_or_drops",
        "defer_and_receive_deferred",
        "peek_does_not_lock",
    ] {
        assert!(out.lines().any(|l| l.starts_with(&format!("ok {check} "))), "check {check} did not pass:\n{out}");
    }
    assert!(out.contains("sdk-check: 18 passed, 0 failed"), "{out}");
    let status = broker.terminate();
    assert!(status.is_some_and(|s| s.success()), "SIGTERM ends the broker with 0: {status:?}");
}

#[test]
fn the_binary_prints_one_ready_line_refuses_bad_queues_and_configs_and_stops_on_sigterm_and_sigint() {
    let broker = BrokerProcess::start(&["a:max-delivery=3,lock-secs=0.5", "b"]);
    let port = broker.conn.split("sb://127.0.0.1:").nth(1).and_then(|r| r.split(';').next()).expect("a port");
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "port 0 picked a free port: {port}");
    assert!(broker.conn.contains(";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;"));
    assert!(std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_ok(), "it listens");
    let status = broker.terminate();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let status = BrokerProcess::start(&["q"]).signal("-INT");
    assert!(status.is_some_and(|s| s.success()), "SIGINT ends it with 0 too: {status:?}");

    let check_refused = |args: &[&str], needle: &str| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_test-servicebus")).args(args).stdin(Stdio::null()).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} is refused");
        assert!(out.stdout.is_empty(), "no ready line for {args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    };
    check_refused(&["--port", "0", "--queue", "q:lock-secs=0"], "lock-secs");
    // An emulator configuration with a rule the broker cannot evaluate is refused at start.
    let bad = target_dir().join("test-servicebus-unsupported-rule.json");
    let rule =
        r#"{"Name": "eu", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "region = 'eu'"}}}"#;
    let json = format!(
        r#"{{"UserConfig": {{"Namespaces": [{{"Name": "sbemulatorns", "Topics": [{{"Name": "t", "Subscriptions": [{{"Name": "s", "Rules": [{rule}]}}]}}]}}]}}}}"#
    );
    std::fs::write(&bad, json).expect("write a config");
    let bad = bad.display().to_string();
    check_refused(
        &["--port", "0", "--config", &bad],
        "subscription t/s, rule eu: test-servicebus does not evaluate the SQL filter",
    );
    check_refused(&["--port", "0", "--config", "/nonexistent/Config.json"], "cannot read /nonexistent/Config.json");
    check_refused(&["--port", "0", "--queue", "q:bogus=1"], "unknown option");
    check_refused(&["--port", "0"], "--queue");
    check_refused(&["--queue", "q"], "--port");
}

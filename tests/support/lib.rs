//! Helpers for the end-to-end tests: find (or build) the `drain` binary, run it
//! with a clean environment, read its JSON log lines, scrape its `/metrics`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use drain_runtime::TokioClock;
pub use test_servers::{RedisServer, free_port};

pub mod owners;
pub mod postgres;
pub mod prometheus;
pub use test_servers::proxy;
pub mod rabbit;
pub mod servicebus;

/// The `drain` binary of this workspace. `cargo test --workspace` builds it before any
/// test runs; when it is missing or older than a source file it is built from, it is
/// brought up to date here (`cargo test -p drain-e2e` after an edit to drain-app
/// would otherwise test a stale binary). Building only when needed matters: a
/// `cargo build -p drain-app` resolves features differently from the workspace test
/// build and would recompile dependencies.
///
/// `DRAIN_TEST_BIN=/path/to/drain` runs the suite against that binary instead (an
/// older build, to see a test fail before its fix), and builds nothing.
pub fn drain_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("DRAIN_TEST_BIN") {
            eprintln!("testing the drain binary {} (DRAIN_TEST_BIN)", Path::new(&bin).display());
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> (or target/<profile>/<program>, the fault run's)
        // -> target/debug/drain: the benchmarks (release) run the binary the tests
        // built, not a second, release build of drain-app.
        let dir = exe.parent().expect("the executable's directory");
        let profile_dir = if dir.ends_with("deps") { dir.parent().expect("target/<profile>") } else { dir };
        let bin = profile_dir.parent().expect("target").join("debug").join("drain");
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
        let newest = newest_source(&root.join("crates"));
        if built.is_none_or(|b| newest.is_some_and(|n| n > b)) {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let mut build = Command::new(cargo);
            build.args(["build", "--quiet", "-p", "drain-app", "--bin", "drain"]);
            let status = build.status().expect("run cargo build");
            assert!(status.success(), "building the drain binary failed");
        }
        bin
    })
    .clone()
}

/// The newest modification time of a `.rs`, `.lua` or `Cargo.toml` file under `dir`.
fn newest_source(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs" || e == "lua")
                || path.file_name().is_some_and(|n| n == "Cargo.toml")
            {
                let m = entry.metadata().and_then(|m| m.modified()).ok();
                newest = newest.max(m);
            }
        }
    }
    newest
}

/// A `drain` command with none of the caller's drain settings, metrics off and
/// logs as JSON at debug.
pub fn drain() -> Command {
    let mut c = Command::new(drain_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("DRAIN_") || k.starts_with("SERVICEBUS_") || k.starts_with("PROJECTION_") {
            c.env_remove(k);
        }
    }
    c.env("DRAIN_METRICS_ADDR", "off").env("DRAIN_LOG", "debug").env("DRAIN_LOG_FORMAT", "json");
    c
}

/// Run `cmd` to completion, killing it after `within` (a hung `drain` fails the
/// test instead of hanging it).
pub fn output(mut cmd: Command, within: Duration) -> std::process::Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn drain");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(within) {
        Ok(out) => out.expect("wait for drain"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            panic!("drain did not exit within {within:?}");
        }
    }
}

/// A running `drain`, killed when dropped; its stderr lines are collected.
pub struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every stderr line read so far.
    pub seen: Vec<String>,
}

impl Running {
    /// Spawn `cmd` with stderr piped.
    pub fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn drain");
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines, seen: Vec::new() }
    }

    /// The tick reports of the JSON log lines seen so far whose message is `message`
    /// (`tick done`, `resident batch`, …): each line carries its report as a JSON
    /// string.
    #[must_use]
    pub fn reports(&self, message: &str) -> Vec<serde_json::Value> {
        self.seen
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == message)
            .filter_map(|v| v["report"].as_str().and_then(|r| serde_json::from_str(r).ok()))
            .collect()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freeze the process (SIGSTOP, by its pid): it does nothing until [`Self::thaw`].
    /// Dropping a frozen `Running` still kills it.
    pub fn freeze(&self) {
        let status = Command::new("kill").args(["-STOP", &self.pid().to_string()]).status().expect("kill");
        assert!(status.success(), "SIGSTOP {}", self.pid());
    }

    /// Thaw a frozen process (SIGCONT).
    pub fn thaw(&self) {
        let status = Command::new("kill").args(["-CONT", &self.pid().to_string()]).status().expect("kill");
        assert!(status.success(), "SIGCONT {}", self.pid());
    }

    /// Collect lines until one contains `needle` (true) or `within` passes (false).
    pub fn wait_for(&mut self, needle: &str, within: Duration) -> bool {
        if self.seen.iter().any(|l| l.contains(needle)) {
            return true;
        }
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// Count lines containing `needle` after collecting what is available now.
    pub fn count(&mut self, needle: &str) -> usize {
        self.seen.extend(self.lines.try_iter());
        self.seen.iter().filter(|l| l.contains(needle)).count()
    }

    /// Send SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("kill");
        assert!(status.success());
    }

    /// Wait (bounded) for the exit status; kills the process when it does not exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                // The reader may not have read the last lines yet: take them until the
                // pipe closes (bounded, in case a child of the process holds it open).
                let until = Instant::now() + Duration::from_secs(5);
                while let Some(left) = until.checked_duration_since(Instant::now()) {
                    match self.lines.recv_timeout(left) {
                        Ok(line) => self.seen.push(line),
                        Err(_) => break,
                    }
                }
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Everything seen, for assertion messages.
    pub fn log(&self) -> String {
        self.seen.join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` on 127.0.0.1:`port`, retried for up to 10 s while it starts.
pub fn scrape(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").expect("write");
            let mut body = String::new();
            s.read_to_string(&mut body).expect("read");
            return body;
        }
        assert!(Instant::now() < deadline, "no /metrics on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Scrape `/metrics` on `port` every 100 ms until `cond` holds for the body or
/// `within` passes: the last body, and whether it held. Counters move a little after
/// the log line that announces their event (and later still on a loaded machine), so
/// tests wait for the value they expect instead of reading once after a fixed sleep.
pub fn await_metrics(port: u16, within: Duration, mut cond: impl FnMut(&str) -> bool) -> (String, bool) {
    let deadline = Instant::now() + within;
    loop {
        let body = scrape(port);
        if cond(&body) {
            return (body, true);
        }
        if Instant::now() > deadline {
            return (body, false);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of the first series line starting with `series ` (name and labels).
pub fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// CPU seconds (user + system, every thread) the process `pid` used so far, from
/// `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    let per_second = *TICKS.get_or_init(|| {
        let out = Command::new("getconf").arg("CLK_TCK").output().expect("getconf CLK_TCK");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("CLK_TCK is a number")
    });
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // The command name (field 2) may hold spaces: count fields after its `)`.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after `)`.
    let ticks: f64 = fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / per_second
}

/// `drain run` as one process `instance` of a fleet, from `source` to `target`: lease
/// and claims on the store at `store_url` (Redis or PostgreSQL), a beat every second,
/// batches of 32 waited for up to 500 ms, an info log. Each test adds its own
/// settings, then [`beat_started`].
pub fn fleet_member(store_url: &str, (source, target): (&str, &str), instance: &str) -> Command {
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_LOG", "info")
        .env("DRAIN_STORE_URL", store_url)
        .env("DRAIN_SOURCE_URL", source)
        .env("DRAIN_TARGET_URL", target)
        .env("DRAIN_INSTANCE_ID", instance)
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_ATOMIC_CLAIM", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("SERVICEBUS_DRAIN_BATCH", "32")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500");
    cmd
}

/// `cmd` (process `instance`) running, once its beat started.
pub fn beat_started(cmd: Command, instance: &str) -> Running {
    let mut p = Running::spawn(cmd);
    assert!(p.wait_for("beat started", Duration::from_secs(30)), "{instance} did not start: {}", p.log());
    p
}

/// A private redis-server (a test fails saying what to install when it is not).
pub fn redis() -> RedisServer {
    RedisServer::start()
}

/// Wait (bounded by `within`) until `cond` holds; whether it did.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// `call` again, `pause` apart, until the store answers, at most `attempts` times
/// (its connections were cut, its server restarted or moved): the answer. Every
/// error on the way must be temporary.
///
/// # Panics
/// On a permanent error, or when no attempt was answered.
pub async fn answered<T, F>(attempts: u32, pause: Duration, mut call: impl FnMut() -> F) -> T
where
    F: Future<Output = Result<T, drain_core::PortError>>,
{
    let mut last = None;
    for _ in 0..attempts {
        match call().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(e.is_temporary(), "{e}");
                last = Some(e);
            }
        }
        tokio::time::sleep(pause).await;
    }
    panic!("the store did not answer in {attempts} attempts {pause:?} apart: {last:?}");
}

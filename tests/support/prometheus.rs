//! A private Prometheus server for one test: Debian's `prometheus` on a free
//! loopback port, its own directory and data, scraping the given targets every
//! second and evaluating deploy/prometheus/drain-rules.yml every second; stopped by
//! pid (SIGTERM, then SIGKILL) and its directory removed when dropped. Queried over
//! its HTTP API.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped alerting rules.
pub fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/drain-rules.yml")
}

/// A running private Prometheus.
pub struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    /// Start one scraping `targets` (`127.0.0.1:<port>` each, job `drain`) with the
    /// shipped rules; `None` (after printing why) when `prometheus` is not installed
    /// outside CI.
    ///
    /// # Panics
    /// When it is not installed under `CI`, or does not become ready in 60 s.
    pub fn start(test: &str, targets: &[String]) -> Prometheus {
        let Some(program) =
            ["/usr/bin/prometheus", "/usr/local/bin/prometheus"].iter().find(|p| Path::new(p).is_file())
        else {
            panic!(
                "{test}: prometheus is not installed, so this test cannot run: run `bash .ci/setup-services.sh` \
                 (Debian's prometheus package)"
            );
        };
        let dir =
            std::env::temp_dir().join(format!("drain-e2e-prometheus-{}-{}", std::process::id(), crate::free_port()));
        std::fs::create_dir_all(dir.join("data")).expect("prometheus directory");
        let rules = rules_file().canonicalize().expect("deploy/prometheus/drain-rules.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - '{}'\n\
             scrape_configs:\n  - job_name: drain\n    static_configs:\n      - targets: [{}]\n",
            rules.display(),
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus.yml");
        let port = crate::free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new(program)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn prometheus");
        let p = Prometheus { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while p.get("/-/ready").is_none_or(|(status, _)| status != 200) {
            assert!(Instant::now() < deadline, "prometheus did not become ready:\n{}", p.log());
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// Its own log, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on the server: status and body, or `None` when it does not answer.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        // HTTP/1.0: the answer is the body until the server closes, never chunked.
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).ok()?;
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = raw.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    }

    fn api(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.get(path).unwrap_or_else(|| panic!("prometheus does not answer {path}"));
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {status} {body}"));
        v
    }

    /// The state (`pending` or `firing`) of every active alert named `name`.
    pub fn alert_states(&self, name: &str) -> Vec<String> {
        let v = self.api("/api/v1/alerts");
        v["data"]["alerts"]
            .as_array()
            .map(|alerts| {
                alerts
                    .iter()
                    .filter(|a| a["labels"]["alertname"] == name)
                    .filter_map(|a| a["state"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Wait (bounded) until alert `name` is pending or firing; its states, or
    /// `None` when it never became active within `within`.
    pub fn await_alert(&self, name: &str, within: Duration) -> Option<Vec<String>> {
        let deadline = Instant::now() + within;
        loop {
            let states = self.alert_states(name);
            if states.iter().any(|s| s == "pending" || s == "firing") {
                return Some(states);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// An instant query: the API's whole answer (`status`, `data`, or `error`).
    pub fn query(&self, promql: &str) -> serde_json::Value {
        self.api(&format!("/api/v1/query?query={}", encode(promql)))
    }

    /// The value of `promql`'s first result, once it has one.
    pub fn scalar(&self, promql: &str) -> Option<f64> {
        let v = self.query(promql);
        v["data"]["result"].as_array()?.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Wait (bounded) until `promql` has a first result; its value, or `None`.
    pub fn await_scraped(&self, promql: &str, within: Duration) -> Option<f64> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = self.scalar(promql) {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Every active alert, for assertion messages.
    pub fn alerts(&self) -> String {
        self.api("/api/v1/alerts").to_string()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Percent-encode a query parameter (everything but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

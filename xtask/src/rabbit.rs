//! A private RabbitMQ node for the gates' AMQP tests and benches: its own node name
//! (`drain-xtask-<pid>@localhost`), free loopback ports (AMQP and distribution), a
//! data directory under `target/xtask-rabbit/` with its own Erlang cookie, only the
//! `rabbitmq_amqp1_0` plugin. Started once per `cargo xtask` process (the `test` and
//! `bench` gates of one `ci` run share it), stopped when xtask exits. The node stays
//! in xtask's process group: a Ctrl-C reaches its start script too, whose trap
//! stops the broker. The machine's RabbitMQ is never used or touched.
//!
//! Tests find it through three variables: `DRAIN_TEST_AMQP_URL` (the broker),
//! `DRAIN_TEST_AMQP_NODE` and `DRAIN_TEST_AMQP_HOME` (for `rabbitmqctl -n <node>`
//! with `HOME=<dir>`, where the node's cookie is).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::{Failure, project_root};

/// Where Debian keeps the real scripts (`/usr/sbin/rabbitmq*` re-run them as user
/// `rabbitmq`, whose cookie is not this node's).
const RABBIT_BIN: &str = "/usr/lib/rabbitmq/bin";
/// How long the node may take to boot on a loaded machine.
const BOOT: Duration = Duration::from_secs(120);

/// The variables a test process needs to reach the node.
pub(crate) const URL_VAR: &str = "DRAIN_TEST_AMQP_URL";
pub(crate) const NODE_VAR: &str = "DRAIN_TEST_AMQP_NODE";
pub(crate) const HOME_VAR: &str = "DRAIN_TEST_AMQP_HOME";

/// A running private node.
pub(crate) struct Node {
    /// `amqp://guest:guest@127.0.0.1:<port>`.
    pub(crate) url: String,
    /// `drain-xtask-<pid>@localhost`.
    pub(crate) name: String,
    /// Its directory (and `HOME`, for the cookie).
    pub(crate) dir: PathBuf,
    /// How long it took to boot.
    pub(crate) boot: Duration,
    child: Child,
    ctl: PathBuf,
}

/// The node of this xtask process, started on first use.
static NODE: Mutex<Option<Node>> = Mutex::new(None);

/// `(url, node, home)` of this process' node, starting it when needed.
///
/// # Errors
/// When rabbitmq-server is not installed or the node does not boot.
pub(crate) fn shared() -> Result<(String, String, PathBuf), Failure> {
    let mut node = NODE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if node.is_none() {
        let started = Node::start()?;
        println!(
            "xtask: private RabbitMQ node {} on {} ready in {:.1} s (data in {})",
            started.name,
            started.url.rsplit('@').next().unwrap_or_default(),
            started.boot.as_secs_f64(),
            crate::util::rel(&started.dir)
        );
        *node = Some(started);
    }
    let n = node.as_ref().expect("started above");
    Ok((n.url.clone(), n.name.clone(), n.dir.clone()))
}

/// Stop this process' node, if one was started (at xtask's exit).
pub(crate) fn stop_shared() {
    let node = NODE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    drop(node);
}

fn free_port(not: &[u16]) -> u16 {
    loop {
        let port =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        // 25672 + 10000..20000 are where RabbitMQ's CLI tools listen for their own
        // distribution: stay clear of them.
        if port != 0 && !not.contains(&port) && !(35_672..=35_682).contains(&port) {
            return port;
        }
    }
}

impl Node {
    fn start() -> Result<Node, Failure> {
        let server = Path::new(RABBIT_BIN).join("rabbitmq-server");
        let ctl = Path::new(RABBIT_BIN).join("rabbitmqctl");
        if !server.is_file() || !ctl.is_file() {
            return Err(Failure::new(format!("{} is not installed", server.display()))
                .fix("run `bash .ci/setup-services.sh` as root (installs rabbitmq-server)"));
        }
        let name = format!("drain-xtask-{}@localhost", std::process::id());
        let dir = project_root().join("target").join("xtask-rabbit").join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&dir);
        let io = |e: std::io::Error| Failure::new(format!("cannot prepare {}: {e}", dir.display()));
        std::fs::create_dir_all(&dir).map_err(io)?;
        std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_amqp1_0].\n").map_err(io)?;
        std::fs::write(dir.join("rabbitmq.conf"), "loopback_users.guest = true\n").map_err(io)?;
        std::fs::write(dir.join("env.conf"), "").map_err(io)?;
        let port = free_port(&[]);
        let dist = free_port(&[port]);
        let log = std::fs::File::create(dir.join("node.log")).map_err(io)?;
        let started = Instant::now();
        let child = Command::new(&server)
            .current_dir(&dir)
            .env("HOME", &dir)
            .env("RABBITMQ_NODENAME", &name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_PID_FILE", dir.join("pid"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("env.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io)?)
            .stderr(log)
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start {}: {e}", server.display())))?;
        let mut node =
            Node { url: format!("amqp://guest:guest@127.0.0.1:{port}"), name, dir, boot: Duration::ZERO, child, ctl };
        node.await_up(port, started)?;
        node.boot = started.elapsed();
        Ok(node)
    }

    fn await_up(&mut self, port: u16, started: Instant) -> Result<(), Failure> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Failure::new(format!("the private RabbitMQ node exited ({status}):\n{}", self.log_tail())));
            }
            if started.elapsed() > BOOT {
                return Err(Failure::new(format!(
                    "the private RabbitMQ node did not listen within {BOOT:?}:\n{}",
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let out = self
            .ctl()
            .args(["await_startup", "--timeout", "120"])
            .output()
            .map_err(|e| Failure::new(format!("cannot run rabbitmqctl: {e}")))?;
        if !out.status.success() {
            return Err(Failure::new(format!(
                "the private RabbitMQ node did not finish booting: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    fn ctl(&self) -> Command {
        let mut c = Command::new(&self.ctl);
        c.args(["-n", &self.name, "-q"]).env("HOME", &self.dir).stdin(Stdio::null());
        c
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Node {
    /// Wait up to `bound` for the start script to exit.
    fn exited_within(&mut self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let started = Instant::now();
        // The broker stops; the start script, waiting on it, then exits.
        let _ = self.ctl().args(["stop", "--timeout", "20"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        let pid = self.child.id().to_string();
        if !self.exited_within(Duration::from_secs(20)) {
            // The script's TERM trap stops the broker as `rabbitmqctl stop` does.
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            if !self.exited_within(Duration::from_secs(20)) {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        println!("xtask: private RabbitMQ node {} stopped in {:.1} s", self.name, started.elapsed().as_secs_f64());
    }
}

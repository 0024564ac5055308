//! A private RabbitMQ node: its own node name, free loopback ports (AMQP and
//! distribution), a directory of its own that is also its `HOME` (so its Erlang
//! cookie is its own), the `rabbitmq_amqp1_0` plugin and the shovel (the AMQP bench's
//! anchor; it starts no shovel of its own, and adds a few tenths of a second to the
//! boot). `cargo xtask` starts one
//! for a whole test run; a test that stops and starts its broker starts its own.
//!
//! Self-contained (std only): xtask, which depends on no workspace crate so that
//! the gates run when the code does not compile, includes this file by path.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Where Debian keeps the real scripts (`/usr/sbin/rabbitmq*` re-run them as user
/// `rabbitmq`, whose cookie is not the node's).
pub const RABBIT_BIN: &str = "/usr/lib/rabbitmq/bin";

/// How long a node may take to boot on a loaded machine.
pub const RABBIT_BOOT: Duration = Duration::from_secs(120);

/// A running private node; dropping it stops the node and removes its directory.
#[derive(Debug)]
pub struct RabbitNode {
    name: String,
    dir: PathBuf,
    port: u16,
    child: Child,
    own_group: bool,
    boot: Duration,
}

impl RabbitNode {
    /// Whether `rabbitmq-server` and `rabbitmqctl` are installed in [`RABBIT_BIN`].
    #[must_use]
    pub fn installed() -> bool {
        ["rabbitmq-server", "rabbitmqctl"].iter().all(|p| Path::new(RABBIT_BIN).join(p).is_file())
    }

    /// Start node `name` (`…@localhost`) in `dir` (created, emptied first) and wait
    /// until it has booted. With `own_group` the node runs in a process group of its
    /// own, killed as a whole on drop; without, it stays in the caller's group, so a
    /// Ctrl-C reaches its start script too, whose trap stops the broker.
    ///
    /// # Errors
    /// When it is not installed, cannot be started, or does not boot within
    /// [`RABBIT_BOOT`] (with the tail of its log).
    pub fn start(name: &str, dir: &Path, own_group: bool) -> Result<RabbitNode, String> {
        if !Self::installed() {
            return Err(format!("{RABBIT_BIN}/rabbitmq-server is not installed"));
        }
        let _ = fs::remove_dir_all(dir);
        let io = |e: std::io::Error| format!("cannot prepare {}: {e}", dir.display());
        fs::create_dir_all(dir).map_err(io)?;
        fs::write(dir.join("enabled_plugins"), "[rabbitmq_amqp1_0,rabbitmq_shovel].\n").map_err(io)?;
        fs::write(dir.join("rabbitmq.conf"), "loopback_users.guest = true\n").map_err(io)?;
        fs::write(dir.join("env.conf"), "").map_err(io)?;
        let port = free_port(&[]);
        let dist = free_port(&[port]);
        let log = File::create(dir.join("node.log")).map_err(io)?;
        let started = Instant::now();
        let mut server = Command::new(Path::new(RABBIT_BIN).join("rabbitmq-server"));
        server
            .current_dir(dir)
            .env("HOME", dir)
            .env("RABBITMQ_NODENAME", name)
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
            .stderr(log);
        if own_group {
            server.process_group(0);
        }
        let child = server.spawn().map_err(|e| format!("cannot start rabbitmq-server: {e}"))?;
        let mut node =
            RabbitNode { name: name.to_owned(), dir: dir.to_path_buf(), port, child, own_group, boot: Duration::ZERO };
        node.await_up(started)?;
        node.boot = started.elapsed();
        Ok(node)
    }

    /// `amqp://guest:guest@127.0.0.1:<port>`, no path.
    #[must_use]
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.port)
    }

    /// The node's name, for `rabbitmqctl -n`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its directory, also the `HOME` that holds its cookie.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long it took to boot.
    #[must_use]
    pub fn boot(&self) -> Duration {
        self.boot
    }

    /// `rabbitmqctl -n <node> -q` with the node's `HOME`; add the arguments.
    #[must_use]
    pub fn ctl(&self) -> Command {
        ctl(&self.name, &self.dir)
    }

    fn await_up(&mut self, started: Instant) -> Result<(), String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("the private RabbitMQ node exited ({status}):\n{}", self.log_tail()));
            }
            if started.elapsed() > RABBIT_BOOT {
                return Err(format!(
                    "the private RabbitMQ node did not listen within {RABBIT_BOOT:?}:\n{}",
                    self.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(200));
        }
        let out = self
            .ctl()
            .args(["await_startup", "--timeout", "120"])
            .output()
            .map_err(|e| format!("cannot run rabbitmqctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "the private RabbitMQ node did not finish booting: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("node.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Wait up to `bound` for the start script to exit.
    fn exited_within(&mut self, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

/// `rabbitmqctl -n <node> -q` with `HOME=<home>` (where the node's cookie is).
#[must_use]
pub fn ctl(node: &str, home: &Path) -> Command {
    let mut c = Command::new(Path::new(RABBIT_BIN).join("rabbitmqctl"));
    c.args(["-n", node, "-q"]).env("HOME", home).stdin(Stdio::null());
    c
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        // The broker stops; the start script, waiting on it, then exits.
        let _ = self.ctl().args(["stop", "--timeout", "20"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        let pid = self.child.id();
        if !self.exited_within(Duration::from_secs(20)) {
            // The script's TERM trap stops the broker as `rabbitmqctl stop` does.
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
            if !self.exited_within(Duration::from_secs(20)) {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        if self.own_group {
            // What is left of the group: beam.smp's helpers.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A free loopback port, not in `not`, outside 35672..=35682, where RabbitMQ's CLI
/// tools listen for their own distribution.
fn free_port(not: &[u16]) -> u16 {
    loop {
        let p = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).and_then(|l| l.local_addr()).map_or(0, |a| a.port());
        if p != 0 && !not.contains(&p) && !(35_672..=35_682).contains(&p) {
            return p;
        }
    }
}

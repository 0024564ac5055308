//! The servers the `test` gate provides: a private `redis-server` per run, and the
//! machine's RabbitMQ with its AMQP 1.0 plugin.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::util::{Failure, display, run};

/// RabbitMQ's AMQP port on this machine (AMQP 0-9-1 and, with the plugin, 1.0).
pub(crate) const RABBITMQ_PORT: u16 = 5672;
/// The plugin SPEC §7 needs.
const AMQP1_PLUGIN: &str = "rabbitmq_amqp1_0";
const SETUP: &str = "run `bash .ci/setup-services.sh` (installs and starts the services)";

/// A `redis-server` owned by this process: loopback only, nothing persisted, its
/// files in a temporary directory. Dropping it kills the server and removes the
/// directory, on success, failure and panic alike.
pub(crate) struct PrivateRedis {
    child: Child,
    dir: PathBuf,
    /// `redis://127.0.0.1:<port>`.
    pub(crate) url: String,
}

impl PrivateRedis {
    /// Start one on a free loopback port and wait until it answers `PING`.
    pub(crate) fn start() -> Result<PrivateRedis, Failure> {
        let mut last = String::new();
        for attempt in 1..=3 {
            match Self::try_start(attempt)? {
                Ok(redis) => return Ok(redis),
                // Someone took the port between our probe and redis' bind: try another.
                Err(why) => last = why,
            }
        }
        Err(Failure::new(format!("could not start a private redis-server: {last}")).fix(SETUP))
    }

    /// `Err(Failure)` for problems a retry cannot fix, `Ok(Err(why))` for ones it may.
    fn try_start(attempt: u32) -> Result<Result<PrivateRedis, String>, Failure> {
        let port = free_port().map_err(|e| Failure::new(format!("no free loopback port: {e}")))?;
        let dir = std::env::temp_dir().join(format!("drain-xtask-redis-{}-{attempt}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
        let log_path = dir.join("redis.log");
        let log = File::create(&log_path).map_err(|e| Failure::new(format!("cannot create the redis log: {e}")))?;
        let log_err = log.try_clone().map_err(|e| Failure::new(format!("cannot share the redis log: {e}")))?;

        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let _ = fs::remove_dir_all(&dir);
                return Err(Failure::new("redis-server is not installed").fix(SETUP));
            }
            Err(e) => {
                return Err(Failure::new(format!("cannot start `{}`: {e}", display(&cmd))));
            }
        };
        let mut redis = PrivateRedis { child, dir, url: format!("redis://127.0.0.1:{port}") };

        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if redis_pong(port) {
                return Ok(Ok(redis));
            }
            if let Ok(Some(status)) = redis.child.try_wait() {
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                return Ok(Err(format!("it exited with {status}: {}", tail(&log))));
            }
            thread::sleep(Duration::from_millis(50));
        }
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        Ok(Err(format!("it did not answer PING within 15 s: {}", tail(&log))))
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        // Child::kill signals exactly this pid (SIGKILL): nothing is persisted.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

fn redis_pong(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    let n = stream.read(&mut buf).unwrap_or(0);
    buf[..n].starts_with(b"+PONG")
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    if lines.is_empty() { "no output".to_owned() } else { lines[start..].join(" | ") }
}

/// Whether something accepts connections on RabbitMQ's port.
pub(crate) fn rabbitmq_answers() -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, RABBITMQ_PORT));
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// What [`ensure_amqp1_plugin`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plugin {
    /// `rabbitmq-plugins` is not installed here.
    NoTool,
    /// It was on already.
    AlreadyEnabled,
    /// We turned it on.
    EnabledNow,
    /// The node could not be asked (not running); the reason.
    Unknown(String),
}

/// Enable `rabbitmq_amqp1_0` when `rabbitmq-plugins` exists and the plugin is off.
pub(crate) fn ensure_amqp1_plugin() -> Result<Plugin, Failure> {
    let Some(tool) = find_program("rabbitmq-plugins") else {
        return Ok(Plugin::NoTool);
    };
    let mut list = Command::new(&tool);
    list.args(["-q", "list", "--enabled", "--minimal"]);
    let output = match list.stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let why = String::from_utf8_lossy(&o.stderr);
            return Ok(Plugin::Unknown(tail(&why)));
        }
        Err(e) => return Ok(Plugin::Unknown(e.to_string())),
    };
    let listed = String::from_utf8_lossy(&output.stdout);
    if listed.lines().any(|l| l.trim() == AMQP1_PLUGIN) {
        return Ok(Plugin::AlreadyEnabled);
    }
    run(Command::new(&tool).args(["enable", AMQP1_PLUGIN]).stdin(Stdio::null())).map_err(|f| f.fix(SETUP))?;
    Ok(Plugin::EnabledNow)
}

/// `name` on `PATH`, or in the sbin directories Debian puts RabbitMQ's tools in.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

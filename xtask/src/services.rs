//! The programs the gates need (Debian packages), installed by
//! .ci/setup-services.sh: run by the gate itself as root, named as the one command
//! to run otherwise.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::{Failure, run};

/// RabbitMQ's AMQP port on this machine (AMQP 0-9-1 and, with the plugin, 1.0).
pub(crate) const RABBITMQ_PORT: u16 = 5672;
/// The plugin SPEC §7 needs.
const AMQP1_PLUGIN: &str = "rabbitmq_amqp1_0";
const SETUP: &str = "run `bash .ci/setup-services.sh` (installs and starts the services)";

/// What [`ensure`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Every program is installed (now).
    Present,
    /// Some are missing and this is not root (outside CI): why, with the command.
    Missing(String),
}

/// The setup script, relative to the project root.
const SETUP_SCRIPT: &str = ".ci/setup-services.sh";

/// Make sure `programs` are installed. As root a missing one is installed by running
/// the setup script (the same one CI runs); otherwise the gate prints the one
/// command to run, and under CI fails with it.
pub(crate) fn ensure(programs: &[&str]) -> Result<Need, Failure> {
    let absent = missing(programs);
    if absent.is_empty() {
        return Ok(Need::Present);
    }
    let names = absent.join(", ");
    if is_root() {
        println!("xtask: {names} not installed; running `bash {SETUP_SCRIPT}` (as root)");
        let mut cmd = Command::new("bash");
        cmd.arg(SETUP_SCRIPT).current_dir(crate::util::project_root()).stdin(Stdio::null());
        run(&mut cmd)?;
        let still = missing(programs);
        if still.is_empty() {
            return Ok(Need::Present);
        }
        return Err(Failure::new(format!("{} still not installed after {SETUP_SCRIPT}", still.join(", "))));
    }
    let why = format!("{names} not installed; run `sudo bash {SETUP_SCRIPT}` (installs every package the tests need)");
    if crate::util::is_ci() {
        return Err(Failure::new(why));
    }
    println!("xtask: warning: {why}");
    Ok(Need::Missing(why))
}

fn missing<'a>(programs: &[&'a str]) -> Vec<&'a str> {
    programs.iter().copied().filter(|p| find_program(p).is_none()).collect()
}

/// Whether this process runs as root (uid 0), read from /proc on Linux.
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").ok().is_some_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            .is_some_and(|effective| effective == "0")
    })
}

/// Whether `redis-server` can be run: every test that touches Redis starts its own
/// private server through `crates/test-servers`, so the gate only checks the program.
pub(crate) fn redis_server_installed() -> bool {
    find_program("redis-server").is_some()
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

//! # test-servers
//!
//! Private `redis-server`, PostgreSQL and RabbitMQ processes for tests and benchmarks: one standalone server
//! ([`RedisServer`]) or a Redis Cluster of N masters ([`RedisCluster`]), each on free
//! loopback ports, with nothing persisted, in a temporary directory of its own that
//! is removed on drop. The shared server on 6379 is never touched.
//!
//! Both constructors return the server once it answers `PING` (bounded wait, 5 s),
//! and panic when it cannot be started. A server that is not installed fails the
//! test with a message that says what to install ([`REDIS_MISSING`]), on a laptop
//! as in CI: a test that cannot run says so, and never passes without running.
//!
//! ```no_run
//! # fn demo() {
//! let redis = test_servers::RedisServer::start();
//! println!("talk to {}", redis.url());
//! # }
//! ```
//!
//! A benchmark that would rather report itself skipped asks first
//! ([`redis_installed`], [`postgres_installed`]).
//!
//! Every process is a child of the test process: [`RedisServer::kill`] (SIGKILL),
//! [`RedisServer::stop`] (SIGTERM), [`RedisServer::pause`] / [`RedisServer::resume`]
//! (SIGSTOP / SIGCONT through the `kill` command), [`RedisServer::restart`] (same
//! port, same directory). [`RedisServer::command`] sends one command on a fresh
//! connection of redis-rs' blocking client (authenticating with `--requirepass`
//! when it was given), for `INFO commandstats`, `SCRIPT FLUSH` and other test setup.
//!
//! [`PostgresServer`] is a private PostgreSQL the same way: `initdb` into a
//! temporary directory (trust authentication on loopback), `postgres` itself as the
//! child on a free port (`fsync=off`, `pg_stat_statements` preloaded), run as the
//! `postgres` system user when the tests run as root (PostgreSQL refuses root).
//! [`PostgresServer::sql`] runs setup SQL through tokio-postgres; kill, stop, pause/resume (its whole process group) and restart on the
//! same port and data directory, where what was committed survives. It fails as
//! `RedisServer` does when PostgreSQL is missing ([`PG_MISSING`]):
//!
//! ```no_run
//! # fn demo() {
//! let pg = test_servers::PostgresServer::start();
//! pg.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").expect("setup");
//! println!("talk to {}", pg.url());
//! # }
//! ```
//!
//! [`proxy::Proxy`] is a loopback TCP proxy a test can hold: the outage of a store
//! tested on a server others use (its connections frozen, the server serving the
//! rest), and of a process whose target must stop answering.
//!
//! [`RabbitNode`] is a private RabbitMQ node with the AMQP 1.0 plugin, the one
//! start-up of the repository: `cargo xtask` starts one for a test run, and a test
//! that stops and starts its broker starts one of its own.
#![forbid(unsafe_code)]

mod cluster;
mod pg_sql;
mod postgres;
mod process;
pub mod proxy;
mod rabbit;
mod redis_cmd;

use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use process::{ServerProcess, process_controls};

pub use cluster::RedisCluster;
pub use pg_sql::Row;
pub use postgres::{PG_MISSING, PG_START_TIMEOUT, PG_SUPERUSER, PostgresServer, SqlHandle, postgres_installed};
pub use rabbit::{RABBIT_BIN, RABBIT_BOOT, RabbitNode, ctl as rabbitmqctl};
pub use redis_cmd::Reply;

/// One command to the Redis on loopback port `port` (no password), on a connection
/// of its own, answered within `timeout`: what a test's hand-written store sends.
///
/// # Errors
/// When nothing answers in time or the reply cannot be read; an error reply is
/// `Ok(Reply::Error(..))`.
pub fn redis_command(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    redis_cmd::command(port, None, args, timeout)
}

/// How long a server may take to answer its first `PING`.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a cluster may take to reach `cluster_state:ok`.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(20);

/// The message a test fails with when `redis-server` is not installed.
pub const REDIS_MISSING: &str = "redis-server is not installed, so this test cannot run: install Redis 6.2+ \
     (Debian: `apt-get install redis-server redis-tools`; `bash .ci/setup-services.sh` installs every server \
     the tests use)";

/// Whether `redis-server` can be run (for a benchmark that reports itself skipped
/// without it; a test just starts its server, and fails saying what to install).
#[must_use]
pub fn redis_installed() -> bool {
    Command::new("redis-server").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// A `redis-server` child process on a private loopback port.
///
/// Dropping it kills the process and removes its directory.
#[derive(Debug)]
pub struct RedisServer {
    process: ServerProcess,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// A Sentinel's configuration file, written before each start.
    sentinel: Option<String>,
}

impl RedisServer {
    /// A plain standalone server.
    ///
    /// # Panics
    /// When the server cannot be started, or is not installed ([`REDIS_MISSING`]).
    #[must_use]
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// A standalone server started with `extra` arguments after the defaults
    /// (`--port P --bind 127.0.0.1 --save '' --appendonly no --dir <tmp>`), e.g.
    /// `["--requirepass", "s3cret"]`.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    #[must_use]
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_as(extra, None)
    }

    /// A Sentinel (`redis-server <conf> --sentinel`) that watches the primary on
    /// loopback port `primary` as `name`, with a quorum of one, calling it down after
    /// 500 ms without an answer and failing over within 3 s.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    #[must_use]
    pub fn sentinel(name: &str, primary: u16) -> RedisServer {
        let conf = format!(
            "sentinel monitor {name} 127.0.0.1 {primary} 1\nsentinel down-after-milliseconds {name} 500\n\
             sentinel failover-timeout {name} 3000\nsentinel parallel-syncs {name} 1\n"
        );
        Self::start_as(&[], Some(conf))
    }

    fn start_as(extra: &[&str], sentinel: Option<String>) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let mut last = String::new();
        // A free port can be taken between our probe and redis' bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let dir = temp_dir("redis");
            let mut server = RedisServer {
                process: ServerProcess::new(false),
                port,
                dir,
                extra: extra.clone(),
                sentinel: sentinel.clone(),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(StartError::NotInstalled) => panic!("{REDIS_MISSING}"),
                Err(StartError::Failed(why)) => last = why,
            }
        }
        panic!("could not start a private redis-server: {last}");
    }

    /// `redis://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    process_controls!(what: "the process", stop: "a graceful shutdown", sig: "TERM", grace: 5);

    /// Kill the process if it runs, then start a new one on the same port and
    /// directory (empty: nothing is persisted) and wait until it answers `PING`.
    ///
    /// # Panics
    /// When the new process does not come up.
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        // The old socket may linger for a moment; retry the bind briefly.
        for _ in 0..10 {
            match self.spawn() {
                Ok(()) => return,
                Err(StartError::NotInstalled) => panic!("redis-server disappeared during the test"),
                Err(StartError::Failed(why)) => last = why,
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server on port {}: {last}", self.port);
    }

    /// Send one command on a fresh connection and return the reply.
    ///
    /// # Errors
    /// When the server cannot be reached or answers garbage. A Redis error reply
    /// is `Ok(Reply::Error(..))`.
    pub fn command(&self, args: &[&str]) -> io::Result<Reply> {
        redis_cmd::command(self.port, self.password(), args, Duration::from_secs(5))
    }

    /// Make ACL user `user` with `password`, allowed the keys matching each of `keys`
    /// (`drain:*`), the channels matching each of `channels`, and no command but
    /// `rights` (`+get`, `+script|load`, …): `ACL SETUSER <user> on ><password>
    /// resetkeys ~<key>… resetchannels &<channel>… -@all <right>…`.
    ///
    /// # Errors
    /// As [`RedisServer::command`], and when the server does not answer `OK`.
    pub fn acl_user(
        &self,
        user: &str,
        password: &str,
        keys: &[&str],
        channels: &[&str],
        rights: &[&str],
    ) -> io::Result<()> {
        let mut args: Vec<String> = ["ACL", "SETUSER", user, "on"].map(str::to_owned).into();
        args.push(format!(">{password}"));
        args.push("resetkeys".to_owned());
        args.extend(keys.iter().map(|k| format!("~{k}")));
        args.push("resetchannels".to_owned());
        args.extend(channels.iter().map(|c| format!("&{c}")));
        args.push("-@all".to_owned());
        args.extend(rights.iter().map(|r| (*r).to_owned()));
        match self.command(&args.iter().map(String::as_str).collect::<Vec<_>>())? {
            Reply::Simple(ok) if ok == "OK" => Ok(()),
            other => Err(io::Error::other(format!("ACL SETUSER {user} answered {other:?}"))),
        }
    }

    /// `INFO <section>` as `(field, value)` pairs.
    ///
    /// # Errors
    /// As [`RedisServer::command`], and when the reply is not a bulk string.
    pub fn info(&self, section: &str) -> io::Result<Vec<(String, String)>> {
        match self.command(&["INFO", section])? {
            Reply::Bulk(Some(text)) => Ok(parse_info(&String::from_utf8_lossy(&text))),
            other => Err(io::Error::other(format!("INFO answered {other:?}"))),
        }
    }

    /// Make this server a replica of `primary` (`REPLICAOF`, by command, so that a
    /// restart brings it back as a primary) and wait, 10 s at most, until it is in
    /// sync. The primary first starts a sync at once instead of after Redis' default
    /// wait for more replicas (5 s of holding nothing).
    ///
    /// # Panics
    /// When either server refuses, or the replica is not in sync within 10 s.
    pub fn replicate_from(&self, primary: &RedisServer) {
        let port = primary.port().to_string();
        let steps: [(&RedisServer, &[&str]); 2] = [
            (primary, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]),
            (self, &["REPLICAOF", "127.0.0.1", &port]),
        ];
        for (server, args) in steps {
            let reply = server.command(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(reply, Reply::Simple("OK".into()), "{args:?}");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.in_sync() {
            assert!(Instant::now() < deadline, "the replica on port {} did not sync within 10 s", self.port);
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether this replica's link to its primary is up: the first sync is over.
    pub(crate) fn in_sync(&self) -> bool {
        self.info("replication").unwrap_or_default().iter().any(|(k, v)| k == "master_link_status" && v == "up")
    }

    /// Calls per command from `INFO commandstats` (`evalsha`, `get`, `ping`, …;
    /// subcommands as `script|flush`).
    ///
    /// # Errors
    /// As [`RedisServer::info`].
    pub fn command_calls(&self) -> io::Result<std::collections::BTreeMap<String, u64>> {
        let mut out = std::collections::BTreeMap::new();
        for (field, value) in self.info("commandstats")? {
            let Some(name) = field.strip_prefix("cmdstat_") else { continue };
            let calls = value
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            out.insert(name.to_owned(), calls);
        }
        Ok(out)
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        let args = self.args();
        self.process.started(spawn_redis(&self.dir, &args)?);
        let password = self.password().map(str::to_owned);
        match wait_for_pong(self.port, password.as_deref(), self.process.child_mut(), START_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(why) => {
                self.kill();
                let log = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                Err(StartError::Failed(format!("{why}; log tail: {}", tail(&log, 600))))
            }
        }
    }

    /// The `--requirepass` it was started with, used by [`RedisServer::command`].
    #[must_use]
    pub fn password(&self) -> Option<&str> {
        self.extra.windows(2).find(|w| w[0] == "--requirepass").map(|w| w[1].as_str())
    }

    fn args(&self) -> Vec<String> {
        if let Some(conf) = &self.sentinel {
            // Sentinel rewrites its file as it learns; a restart starts from scratch.
            let path = self.dir.join("sentinel.conf");
            let _ = fs::write(&path, conf);
            let port = self.port.to_string();
            let dir = self.dir.to_string_lossy().into_owned();
            return [
                path.to_string_lossy().as_ref(),
                "--sentinel",
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--dir",
                &dir,
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        }
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &self.dir.to_string_lossy(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(self.extra.iter().cloned());
        args
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Freezes (SIGSTOP) and thaws (SIGCONT) the processes of a [`RedisServer`] or a
/// [`RedisCluster`] by their pids: connections stay open and nothing is answered.
#[derive(Debug, Clone)]
pub struct Freezer {
    pub(crate) pids: Vec<u32>,
    /// Signal each pid's children too (a [`PostgresServer`]'s backends).
    pub(crate) tree: bool,
}

impl Freezer {
    /// One process of a private server by its pid, without its children: say one
    /// PostgreSQL backend, read from `pg_stat_activity`.
    #[must_use]
    pub fn process(pid: u32) -> Freezer {
        Freezer { pids: vec![pid], tree: false }
    }

    /// Freeze every process.
    pub fn freeze(&self) {
        for &pid in &self.pids {
            if self.tree { signal_tree(pid, "STOP") } else { signal(pid, "STOP") }
        }
    }

    /// Thaw every process.
    pub fn thaw(&self) {
        for &pid in &self.pids {
            if self.tree { signal_tree(pid, "CONT") } else { signal(pid, "CONT") }
        }
    }
}

enum StartError {
    NotInstalled,
    Failed(String),
}

fn spawn_redis(dir: &Path, args: &[String]) -> Result<Child, StartError> {
    let log = File::create(dir.join("redis.log")).map_err(|e| StartError::Failed(format!("cannot create log: {e}")))?;
    let log_err = log.try_clone().map_err(|e| StartError::Failed(format!("cannot share log: {e}")))?;
    Command::new("redis-server")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                StartError::NotInstalled
            } else {
                StartError::Failed(format!("cannot spawn redis-server: {e}"))
            }
        })
}

fn wait_for_pong(
    port: u16,
    password: Option<&str>,
    mut child: Option<&mut Child>,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Reply::Simple(s)) = redis_cmd::command(port, password, &["PING"], Duration::from_millis(500))
            && s == "PONG"
        {
            return Ok(());
        }
        if let Some(child) = child.as_deref_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(format!("redis-server exited with {status}"));
        }
        if Instant::now() >= deadline {
            return Err(format!("no PONG on port {port} within {within:?}"));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Signal `pid` and every child process of it, by their ids: a PostgreSQL
/// postmaster and its backends (which leave its process group with `setsid`).
///
/// For `STOP` and `KILL` the parent is stopped first and its children are listed
/// once it is, so that it forks no child meanwhile that the list would miss; for
/// `KILL` the list must also be made before the parent dies, since its children
/// then pass to another parent: a stopped backend left out would stay stopped,
/// holding the cluster's shared memory, and no server could start on the data
/// directory again.
pub(crate) fn signal_tree(pid: u32, sig: &str) {
    if sig == "STOP" || sig == "KILL" {
        signal(pid, "STOP");
        // Bounded: a parent that is gone already counts as stopped.
        let deadline = Instant::now() + Duration::from_secs(1);
        while !is_stopped(pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let kids = children(pid);
    if sig != "STOP" {
        signal(pid, sig);
    }
    for child in kids {
        signal(child, sig);
    }
}

/// Whether process `pid` does nothing more: stopped (state `T` in
/// `/proc/<pid>/stat`), exited and not yet reaped (`Z`, `X`), or gone.
pub(crate) fn is_stopped(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    let state = stat.rfind(')').and_then(|at| stat[at + 1..].trim_start().chars().next());
    matches!(state, Some('T' | 'Z' | 'X'))
}

/// The ids of the processes whose parent is `pid`, from `/proc/<id>/stat`.
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&id| {
            fs::read_to_string(format!("/proc/{id}/stat")).ok().and_then(|stat| parent_of(&stat)) == Some(pid)
        })
        .collect()
}

/// The parent id in a `/proc/<id>/stat` line (`id (comm) state ppid …`; the
/// command name may hold spaces and parentheses).
fn parent_of(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// A port that was free a moment ago (bind 127.0.0.1:0, read, release).
///
/// # Panics
/// When the loopback interface cannot be bound at all.
#[must_use]
pub fn free_port() -> u16 {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

pub(crate) fn temp_dir(kind: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("test-servers-{kind}-{}-{n}-{nanos}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("cannot create {}: {e}", dir.display()),
        }
    }
}

fn parse_info(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub(crate) fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..=s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(s.len());
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_parsing() {
        let got = parse_info("# Commandstats\r\ncmdstat_get:calls=3,usec=1\r\ncmdstat_ping:calls=1,usec=0\r\n\r\n");
        assert_eq!(
            got,
            vec![
                ("cmdstat_get".to_owned(), "calls=3,usec=1".to_owned()),
                ("cmdstat_ping".to_owned(), "calls=1,usec=0".to_owned())
            ]
        );
        assert_eq!(tail("abcdef", 2), "ef");
        assert_eq!(tail("ab", 5), "ab");
        assert_eq!(parent_of("42 (postgres: x (y)) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn server_lifecycle() {
        let mut redis = RedisServer::start();
        assert!(redis.url().ends_with(&redis.port().to_string()));
        assert_eq!(redis.command(&["SET", "k", "v"]).expect("set"), Reply::Simple("OK".into()));
        assert_eq!(redis.command(&["GET", "k"]).expect("get"), Reply::Bulk(Some(b"v".to_vec())));
        assert!(redis.command_calls().expect("stats").get("set").is_some_and(|&n| n == 1));
        let dir = redis.dir().to_path_buf();
        redis.pause();
        assert!(redis_cmd::command(redis.port(), None, &["PING"], Duration::from_millis(200)).is_err(), "paused");
        redis.resume();
        assert_eq!(redis.command(&["PING"]).expect("ping"), Reply::Simple("PONG".into()));
        let freezer = redis.freezer();
        freezer.freeze();
        assert!(redis_cmd::command(redis.port(), None, &["PING"], Duration::from_millis(200)).is_err(), "frozen");
        freezer.thaw();
        assert_eq!(redis.command(&["PING"]).expect("ping"), Reply::Simple("PONG".into()));
        redis.restart();
        assert_eq!(redis.command(&["GET", "k"]).expect("get"), Reply::Bulk(None), "nothing persisted");
        redis.kill();
        assert!(redis.pid().is_none());
        assert!(redis.command(&["PING"]).is_err(), "killed");
        drop(redis);
        assert!(!dir.exists(), "the directory is removed on drop");
    }

    #[test]
    fn cluster_forms() {
        let cluster = RedisCluster::start(3);
        assert_eq!(cluster.nodes().len(), 3);
        assert_eq!(cluster.urls().len(), 3);
        // `{a}` hashes to slot 15495 (the last node's range), `{b}` to 3300 (the first's).
        let last = &cluster.nodes()[2];
        assert_eq!(last.command(&["SET", "{a}x", "1"]).expect("set"), Reply::Simple("OK".into()));
        match cluster.nodes()[0].command(&["SET", "{a}x", "1"]).expect("set") {
            Reply::Error(e) => assert!(e.starts_with("MOVED 15495 "), "{e}"),
            other => panic!("expected MOVED, got {other:?}"),
        }
        // A redirected command counts as `rejected_calls`, not `calls`.
        assert_eq!(cluster.command_calls().expect("stats").get("set"), Some(&1));
    }
}

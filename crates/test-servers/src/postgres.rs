//! A private PostgreSQL server: `initdb` into a temporary directory, `postgres` as
//! a child process on a free loopback port, stopped by its pid.

use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::pg_sql::{self, Row};
use crate::process::{ServerProcess, process_controls};
use crate::{free_port, tail, temp_dir};

/// How long a PostgreSQL server may take to accept its first query (crash recovery
/// after [`PostgresServer::restart`] included).
pub const PG_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The message a test fails with when PostgreSQL is not installed.
pub const PG_MISSING: &str = "PostgreSQL (initdb, postgres) is not installed, so this test cannot run: install \
     PostgreSQL 15+ (Debian: `apt-get install postgresql postgresql-contrib`; `bash .ci/setup-services.sh` \
     installs every server the tests use)";

/// Whether PostgreSQL's `initdb` and `postgres` can be found (for a benchmark that
/// reports itself skipped without them; a test just starts its server).
#[must_use]
pub fn postgres_installed() -> bool {
    find_bin().is_some()
}

/// The superuser of a private server (trust authentication on loopback).
pub const PG_SUPERUSER: &str = "postgres";

/// A `postgres` child process on a private loopback port, its cluster in a
/// temporary directory (the cluster in `data/`, the log in `postgres.log`; trust authentication, `fsync=off`, `pg_stat_statements`
/// preloaded, its Unix socket in that directory). PostgreSQL refuses to run as
/// root: as root, `initdb` and `postgres` run as the unprivileged `postgres` system
/// user (Debian's package creates it); otherwise as the current user.
///
/// [`kill`](Self::kill), [`pause`](Self::pause) and [`resume`](Self::resume)
/// signal the postmaster and each of its child processes by pid (a paused
/// postmaster alone would leave open connections answering: backends leave its
/// process group). Dropping it kills them and removes the directory.
#[derive(Debug)]
pub struct PostgresServer {
    process: ServerProcess,
    port: u16,
    dir: PathBuf,
    bin: Option<PathBuf>,
    run_as: Option<(u32, u32)>,
}

impl PostgresServer {
    /// A fresh cluster.
    ///
    /// # Panics
    /// When the server cannot be started, or is not installed ([`PG_MISSING`]).
    #[must_use]
    pub fn start() -> PostgresServer {
        let bin = find_bin().unwrap_or_else(|| panic!("{PG_MISSING}"));
        let run_as = run_as().unwrap_or_else(|why| panic!("cannot run PostgreSQL: {why}"));
        let dir = temp_dir("postgres");
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("cannot hand {} to the postgres user: {e}", dir.display()));
        }
        let mut server = PostgresServer { process: ServerProcess::new(true), port: 0, dir, bin, run_as };
        server.initdb().unwrap_or_else(|why| panic!("initdb failed: {why}"));
        let mut last = String::new();
        // A free port can be taken between our probe and the server's bind: try a few.
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(why) => last = why,
            }
        }
        panic!("could not start a private PostgreSQL: {last}");
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres` (the superuser).
    #[must_use]
    pub fn url(&self) -> String {
        self.url_for(PG_SUPERUSER, "postgres")
    }

    /// `postgres://<user>@127.0.0.1:<port>/<database>` (trust authentication: no
    /// password is needed).
    #[must_use]
    pub fn url_for(&self, user: &str, database: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{database}", self.port)
    }

    /// Run `sql` (one or more statements) as the superuser in database `postgres`.
    ///
    /// # Errors
    /// When the server cannot be reached or answers an error (`ERROR <SQLSTATE>: …`).
    pub fn sql(&self, sql: &str) -> io::Result<Vec<Row>> {
        self.sql_as(PG_SUPERUSER, "postgres", sql)
    }

    /// Run `sql` as `user` in `database`.
    ///
    /// # Errors
    /// As [`PostgresServer::sql`].
    pub fn sql_as(&self, user: &str, database: &str, sql: &str) -> io::Result<Vec<Row>> {
        pg_sql::query(self.port, user, database, sql, Duration::from_secs(10))
    }

    /// A handle that runs SQL as the superuser from another thread, while the
    /// server itself is borrowed elsewhere (a test transaction that holds a lock
    /// while the test goes on).
    #[must_use]
    pub fn sql_handle(&self) -> SqlHandle {
        SqlHandle { port: self.port }
    }

    process_controls!(
        what: "the server and its backends",
        stop: "fast shutdown, sessions are ended and the data is checkpointed",
        sig: "INT",
        grace: 10
    );

    /// Kill the server (SIGKILL, no shutdown checkpoint) and start it again on the
    /// same port and data directory: what was committed survives (crash recovery
    /// replays the log).
    ///
    /// # Panics
    /// When the new process does not come up.
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        // Orphaned backends leave within moments of the postmaster's death; until
        // then the new server refuses the old shared memory: retry briefly.
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return,
                Err(why) => last = why,
            }
            thread::sleep(Duration::from_millis(250));
        }
        panic!("could not restart PostgreSQL on port {}: {last}", self.port);
    }

    /// Stop the server cleanly, keep a copy of its data directory, and start it
    /// again: the state an asynchronous standby that stops receiving here would
    /// have. [`revert_to_copy`](Self::revert_to_copy) brings that state back.
    ///
    /// # Panics
    /// When the copy fails or the server does not come up again.
    pub fn copy_data(&mut self) {
        self.stop();
        let copy = self.dir.join("data-copy");
        let _ = fs::remove_dir_all(&copy);
        run_cp(&self.dir.join("data"), &copy);
        self.restart();
    }

    /// Kill the server and start it on the copy [`copy_data`](Self::copy_data)
    /// kept, on the same port: a failover to a standby that lost every commit
    /// after the copy.
    ///
    /// # Panics
    /// When there is no copy or the server does not come up.
    pub fn revert_to_copy(&mut self) {
        self.kill();
        let (data, copy) = (self.dir.join("data"), self.dir.join("data-copy"));
        assert!(copy.is_dir(), "revert_to_copy needs copy_data first");
        fs::remove_dir_all(&data).unwrap_or_else(|e| panic!("cannot remove {}: {e}", data.display()));
        run_cp(&copy, &data);
        self.restart();
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.as_ref().map_or_else(|| PathBuf::from(program), |dir| dir.join(program)));
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn initdb(&self) -> Result<(), String> {
        let data = self.dir.join("data");
        let out = self
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", PG_SUPERUSER, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{}: {}", out.status, tail(&String::from_utf8_lossy(&out.stderr), 600)))
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("postgres.log");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open the log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("cannot share the log: {e}"))?;
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(&self.dir)
            .args(["-c", "fsync=off", "-c", "shared_preload_libraries=pg_stat_statements"])
            .args(["-c", "max_connections=200", "-c", "log_min_messages=warning"])
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot spawn postgres: {e}"))?;
        self.process.started(child);
        let deadline = Instant::now() + PG_START_TIMEOUT;
        loop {
            if self.sql("SELECT 1").is_ok() {
                return Ok(());
            }
            if let Some(status) = self.process.exited() {
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("postgres exited with {status}; log tail: {}", tail(&log, 600)));
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("no answer on port {} within {PG_START_TIMEOUT:?}", self.port));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs SQL on a [`PostgresServer`]'s port as the superuser in database
/// `postgres`; see [`PostgresServer::sql_handle`].
#[derive(Debug, Clone)]
pub struct SqlHandle {
    port: u16,
}

impl SqlHandle {
    /// As [`PostgresServer::sql`], with `timeout` for the whole exchange.
    ///
    /// # Errors
    /// As [`PostgresServer::sql`].
    pub fn sql(&self, sql: &str, timeout: Duration) -> io::Result<Vec<Row>> {
        pg_sql::query(self.port, PG_SUPERUSER, "postgres", sql, timeout)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The directory of `initdb` and `postgres`: Debian's highest
/// `/usr/lib/postgresql/<major>/bin`; else `Some(None)` when `initdb` runs from
/// `PATH` (both are then called by name); `None` when there is neither.
fn find_bin() -> Option<Option<PathBuf>> {
    let debian = fs::read_dir("/usr/lib/postgresql")
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok().map(|major| (major, e.path().join("bin"))))
        .filter(|(_, bin)| has_server(bin))
        .max_by_key(|(major, _)| *major)
        .map(|(_, bin)| bin);
    match debian {
        Some(bin) => Some(Some(bin)),
        None => match Command::new("initdb").arg("--version").output() {
            Ok(out) if out.status.success() => Some(None),
            _ => None,
        },
    }
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// `Some((uid, gid))` of the `postgres` system user when we are root, `None` (run
/// as ourselves) otherwise.
fn run_as() -> Result<Option<(u32, u32)>, String> {
    let status = fs::read_to_string("/proc/self/status").map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|id| id.parse::<u32>().ok())
        .ok_or("no Uid line in /proc/self/status")?;
    if uid != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    passwd_ids(&passwd, "postgres").map(Some).ok_or_else(|| {
        "running as root, and there is no `postgres` user to run the server as (Debian's postgresql package \
         creates it; PostgreSQL refuses root)"
            .to_owned()
    })
}

fn passwd_ids(passwd: &str, user: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == user).then_some(())?;
        let _password = fields.next()?;
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    })
}

/// `cp -a from to`: keeps the owner and modes PostgreSQL insists on.
fn run_cp(from: &Path, to: &Path) {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status();
    assert!(status.is_ok_and(|s| s.success()), "cp -a {} {} failed", from.display(), to.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The postmaster and every child of it reach state T (stopped) within 2 s.
    fn backends_stopped(pg: &PostgresServer) -> bool {
        let pid = pg.pid().expect("running");
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let kids = crate::children(pid);
            if crate::is_stopped(pid) && !kids.is_empty() && kids.iter().all(|&k| crate::is_stopped(k)) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn passwd_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\npostgres:x:101:104:PostgreSQL administrator:/var/lib/postgresql:/bin/bash\n";
        assert_eq!(passwd_ids(passwd, "postgres"), Some((101, 104)));
        assert_eq!(passwd_ids(passwd, "nobody"), None);
        assert_eq!(passwd_ids("postgres:x:oops", "postgres"), None);
    }

    /// Killed while paused: the stopped backends die with the postmaster (none is
    /// left stopped, passed to another parent, holding the shared memory), and the
    /// server starts again on its data directory.
    #[test]
    fn a_paused_server_can_be_killed_and_restarted() {
        let mut pg = PostgresServer::start();
        pg.sql("CREATE TABLE t (v int); INSERT INTO t VALUES (7)").expect("setup");
        let kids = crate::children(pg.pid().expect("running"));
        assert!(!kids.is_empty(), "a postmaster has background processes");
        pg.pause();
        pg.kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        let gone = |k: &u32| {
            let stat = fs::read_to_string(format!("/proc/{k}/stat")).unwrap_or_default();
            let state = stat.rfind(')').and_then(|at| stat[at + 1..].trim_start().chars().next());
            !matches!(state, Some('T' | 'R' | 'S' | 'D'))
        };
        while !kids.iter().all(gone) {
            assert!(Instant::now() < deadline, "backends still alive after the kill: {kids:?}");
            thread::sleep(Duration::from_millis(20));
        }
        pg.restart();
        assert_eq!(pg.sql("SELECT v FROM t").expect("select"), vec![vec![Some("7".to_owned())]]);
    }

    #[test]
    fn server_lifecycle() {
        let mut pg = PostgresServer::start();
        assert!(pg.url().contains(&format!(":{}/", pg.port())));
        pg.sql("CREATE TABLE t (v int); INSERT INTO t VALUES (7)").expect("setup");
        assert_eq!(pg.sql("SELECT v FROM t").expect("select"), vec![vec![Some("7".to_owned())]]);
        let err = pg.sql("SELECT * FROM missing").expect_err("no such table");
        assert!(err.to_string().contains("42P01"), "{err}");
        pg.pause();
        assert!(pg_sql::query(pg.port(), PG_SUPERUSER, "postgres", "SELECT 1", Duration::from_millis(300)).is_err());
        pg.resume();
        pg.sql("SELECT 1").expect("answers after resume");
        // A frozen server does not answer on a connection opened before the freeze
        // either (its backend is frozen too).
        let open = std::net::TcpStream::connect(("127.0.0.1", pg.port())).expect("connect");
        let freezer = pg.freezer();
        freezer.freeze();
        assert!(backends_stopped(&pg), "every backend is stopped");
        freezer.thaw();
        drop(open);
        pg.restart();
        assert_eq!(
            pg.sql("SELECT v FROM t").expect("select"),
            vec![vec![Some("7".to_owned())]],
            "committed data survives"
        );
        let dir = pg.dir().to_path_buf();
        pg.kill();
        assert!(pg.pid().is_none());
        assert!(pg.sql("SELECT 1").is_err(), "killed");
        drop(pg);
        assert!(!dir.exists(), "the directory is removed on drop");
    }
}

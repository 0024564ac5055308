//! The process of a private server, controlled by its pid: killed, stopped politely,
//! frozen and thawed, alone or with its child processes.

use std::process::{Child, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use crate::{Freezer, signal, signal_tree};

/// A private server's process while it runs; `tree` servers (a PostgreSQL
/// postmaster) are signalled together with their child processes.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Option<Child>,
    paused: bool,
    tree: bool,
}

impl ServerProcess {
    /// No process yet; `tree` for one whose children are signalled with it.
    pub(crate) const fn new(tree: bool) -> Self {
        ServerProcess { child: None, paused: false, tree }
    }

    /// `child` was just spawned and runs.
    pub(crate) fn started(&mut self, child: Child) {
        self.child = Some(child);
        self.paused = false;
    }

    /// The running process, to watch it start.
    pub(crate) fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// How it exited, when it has (it is then forgotten).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())?;
        self.child = None;
        Some(status)
    }

    /// Its pid, `None` once killed or stopped.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, pid: u32, sig: &str) {
        if self.tree { signal_tree(pid, sig) } else { signal(pid, sig) }
    }

    /// Kill it at once (SIGKILL) and reap it. Does nothing when not running.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.signal(child.id(), "KILL");
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Thaw it if frozen, send `sig`, and wait up to `grace` for it to exit before
    /// killing it.
    pub(crate) fn stop(&mut self, sig: &str, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        if self.paused {
            self.signal(child.id(), "CONT");
            self.paused = false;
        }
        self.signal(child.id(), sig);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.signal(child.id(), "KILL");
        let _ = child.wait();
    }

    /// Freeze it (SIGSTOP).
    pub(crate) fn pause(&mut self) {
        if let Some(pid) = self.pid() {
            self.signal(pid, "STOP");
            self.paused = true;
        }
    }

    /// Thaw it (SIGCONT).
    pub(crate) fn resume(&mut self) {
        if let Some(pid) = self.pid() {
            self.signal(pid, "CONT");
            self.paused = false;
        }
    }

    /// A handle that freezes and thaws it from shared references.
    pub(crate) fn freezer(&self) -> Freezer {
        Freezer { pids: self.pid().into_iter().collect(), tree: self.tree }
    }
}

/// The port, directory and process controls of a private server type with fields
/// `port`, `dir` and `process` (a [`ServerProcess`]), as inherent methods: `port`,
/// `dir`, `pid`, `kill`, `stop` (sending `$sig`, then waiting up to `$grace`
/// seconds), `pause`, `resume` and `freezer`. `$what` names what the controls act
/// on, `$stop` says what the stop does.
macro_rules! process_controls {
    (what: $what:literal, stop: $stop:literal, sig: $sig:literal, grace: $grace:literal) => {
        /// The port it listens on.
        #[must_use]
        pub fn port(&self) -> u16 {
            self.port
        }

        /// Its private directory.
        #[must_use]
        pub fn dir(&self) -> &std::path::Path {
            &self.dir
        }

        /// Its process id (of a PostgreSQL server, the postmaster's), `None` once
        /// killed or stopped.
        #[must_use]
        pub fn pid(&self) -> Option<u32> {
            self.process.pid()
        }

        #[doc = concat!("Kill ", $what, " at once (SIGKILL) and reap it. Does nothing when not running.")]
        pub fn kill(&mut self) {
            self.process.kill();
        }

        #[doc = concat!("Stop ", $what, " (", $sig, ": ", $stop, "), waiting up to ", $grace, " s before killing it.")]
        pub fn stop(&mut self) {
            self.process.stop($sig, std::time::Duration::from_secs($grace));
        }

        #[doc = concat!("Freeze ", $what, " (SIGSTOP): connections stay open, nothing is answered.")]
        pub fn pause(&mut self) {
            self.process.pause();
        }

        #[doc = concat!("Thaw ", $what, " when paused (SIGCONT).")]
        pub fn resume(&mut self) {
            self.process.resume();
        }

        #[doc = concat!("A handle that freezes and thaws ", $what, " from shared references (an outage a test")]
        /// starts while it still reads the server). Thaw before the server is stopped: a
        /// frozen process ignores the polite stop and is killed.
        #[must_use]
        pub fn freezer(&self) -> $crate::Freezer {
            self.process.freezer()
        }
    };
}

pub(crate) use process_controls;

//! Running the example programs from their tests: spawn one, read its output lines as
//! they come, signal it by its pid, wait for its exit with a bound. A program that
//! is still running when its `Program` is dropped is killed (by its pid).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One running example program and the lines it printed so far.
pub(crate) struct Program {
    child: Child,
    out: Arc<Mutex<Vec<String>>>,
    err: Arc<Mutex<Vec<String>>>,
    status: Option<ExitStatus>,
    readers: Vec<JoinHandle<()>>,
}

/// Collect `stream`'s lines into `into` on a thread of their own, until its end.
fn collect(stream: impl Read + Send + 'static, into: Arc<Mutex<Vec<String>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            into.lock().unwrap().push(line);
        }
    })
}

impl Program {
    /// Start `bin` (an `env!("CARGO_BIN_EXE_…")` path) with `args`.
    pub(crate) fn start(bin: &str, args: &[&str]) -> Program {
        let mut child = Command::new(bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let (out, err) = (Arc::default(), Arc::default());
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), Arc::clone(&out)),
            collect(child.stderr.take().expect("stderr"), Arc::clone(&err)),
        ];
        Program { child, out, err, status: None, readers }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lines printed on stdout so far.
    pub(crate) fn stdout(&self) -> Vec<String> {
        self.out.lock().unwrap().clone()
    }

    /// Lines printed on stderr so far.
    pub(crate) fn stderr(&self) -> Vec<String> {
        self.err.lock().unwrap().clone()
    }

    /// Both streams, for assertion messages.
    pub(crate) fn output(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout().join("\n"), self.stderr().join("\n"))
    }

    /// Wait until a stdout line contains `needle` (true) or `within` passes (false).
    pub(crate) fn wait_for(&self, needle: &str, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if self.stdout().iter().any(|l| l.contains(needle)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Send `signal` (`TERM`, `KILL`, …) to this process, by its pid.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill").args([&format!("-{signal}"), &self.pid().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {}", self.pid());
    }

    /// Wait for the exit, at most `within`; `None` if it is still running. Once it
    /// exited, the rest of its output is read before this returns.
    pub(crate) fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + within;
        while self.status.is_none() && Instant::now() < until {
            self.status = self.child.try_wait().expect("try_wait");
            if self.status.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if self.status.is_some() {
            // The pipes end with the process: its last lines are in once the readers end.
            self.readers.drain(..).for_each(|r| r.join().expect("reader"));
        }
        self.status
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

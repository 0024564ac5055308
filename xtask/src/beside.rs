//! Gates that `ci` runs beside others (the test gate's test run, or the gates after
//! it): they only compile and read files (no server), and the others mostly wait on
//! servers, so the two together keep both cores busy. Each runs as `xtask <gate>` in
//! a process of its own, one after another, its output kept in
//! `target/ci/<gate>.log` and printed when the lane is done, so the two never
//! interleave.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Gate;
use crate::metadata::Metadata;
use crate::util::{Failure, GateResult, Outcome};

/// How each gate of the lane ended: `None` for one not run after a failure.
pub(crate) type Ended = Vec<(Gate, Option<(GateResult, Duration)>)>;

/// The lane, running.
pub(crate) struct Lane {
    thread: JoinHandle<Ended>,
    logs: PathBuf,
}

impl Lane {
    /// Start `gates`, one after another, on a thread of their own, beside `what`.
    pub(crate) fn start(gates: &'static [Gate], what: &str) -> Result<Lane, Failure> {
        let logs = Metadata::load()?.target_directory.join("ci");
        fs::create_dir_all(&logs).map_err(|e| Failure::new(format!("cannot create {}: {e}", logs.display())))?;
        let exe = std::env::current_exe().map_err(|e| Failure::new(format!("cannot find xtask itself: {e}")))?;
        let names: Vec<&str> = gates.iter().map(|g| g.name()).collect();
        println!("xtask ci: {} run beside {what} (their output follows)", names.join(", "));
        let dir = logs.clone();
        let thread = std::thread::spawn(move || {
            let mut ended = Vec::new();
            let mut failed = false;
            for &gate in gates {
                if failed {
                    ended.push((gate, None));
                    continue;
                }
                let started = Instant::now();
                let result = run_one(&exe, gate, &dir);
                failed = result.is_err();
                ended.push((gate, Some((result, started.elapsed()))));
            }
            ended
        });
        Ok(Lane { thread, logs })
    }

    /// Wait for the lane, print each gate's output, and return how each ended.
    pub(crate) fn finish(self) -> Ended {
        let ended = self.thread.join().unwrap_or_default();
        for (gate, result) in &ended {
            println!("\n==> xtask {} (ran beside other gates)", gate.name());
            match result {
                Some(_) => print!("{}", fs::read_to_string(log(&self.logs, *gate)).unwrap_or_default()),
                None => println!("not run: an earlier gate of the same lane failed"),
            }
        }
        ended
    }
}

fn log(dir: &Path, gate: Gate) -> PathBuf {
    dir.join(format!("{}.log", gate.name()))
}

/// Run `xtask <gate>` with its output in its log.
fn run_one(exe: &Path, gate: Gate, dir: &Path) -> GateResult {
    let path = log(dir, gate);
    let opened = File::create(&path).and_then(|out| Ok((out.try_clone()?, out)));
    let (stdout, stderr) = opened.map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))?;
    let mut cmd = Command::new(exe);
    crate::util::build_env(&mut cmd);
    let status = cmd
        .arg(gate.name())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .map_err(|e| Failure::new(format!("could not start `xtask {}`: {e}", gate.name())))?;
    if !status.success() {
        return Err(Failure::new(format!("its output is above, and in {}", path.display())));
    }
    let skipped = format!("xtask {}: skipped (", gate.name());
    let text = fs::read_to_string(&path).unwrap_or_default();
    Ok(match text.lines().rev().find_map(|l| l.strip_prefix(skipped.as_str())) {
        Some(why) => Outcome::Skipped(why.trim_end_matches(')').to_owned()),
        None => Outcome::Passed,
    })
}

//! # bench-support
//!
//! What the workspace's benches share, so that each bench file holds only what it
//! measures:
//!
//! * [`stats`] — the median, and the spread of per-round ratios (interquartile range
//!   over the median, with the full range);
//! * [`order`] — the order in which interleaved clients take their slices, round by
//!   round;
//! * [`cpu`] — the CPU time a process has run, to charge each slice's client and
//!   server time to the client that ran it;
//! * [`lease`] — the lease benches' runner: clients alternating in short timed
//!   slices of N Tokio tasks, many rounds, the median round and the ratios, and the
//!   JSON keys every lease bench writes;
//! * [`write()`] — `<target>/bench/<name>.json` from a [`serde_json::Value`], where
//!   `cargo xtask bench` reads it (see xtask/src/bench.rs); [`full`] and [`only`]
//!   read the bench's command line.
//!
//! The caller passes its target's `env!("CARGO_TARGET_TMPDIR")`, which cargo sets
//! for bench and test targets only:
//!
//! ```no_run
//! // In a bench target: `let tmp = env!("CARGO_TARGET_TMPDIR");`
//! # let tmp = "target/tmp";
//! let figures = serde_json::json!({ "bench": "demo", "length": "ci", "build": "debug" });
//! bench_support::write(tmp, "demo", &figures);
//! ```
#![forbid(unsafe_code)]

pub mod cpu;
pub mod lease;
pub mod order;
pub mod stats;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Write `json` (one line) to `<target>/bench/<name>.json`, the target directory
/// found from `target_tmpdir` (a bench's `env!("CARGO_TARGET_TMPDIR")`, which is
/// `<target>/tmp`), print where, and return the path.
///
/// # Panics
///
/// When the directory or the file cannot be written: the bench gate must not pass
/// without its figures.
pub fn write(target_tmpdir: &str, name: &str, json: &Value) -> PathBuf {
    let path = Path::new(target_tmpdir).join("..").join("bench").join(format!("{name}.json"));
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create target/bench");
    std::fs::write(&path, format!("{json}\n")).expect("write the bench JSON");
    println!("wrote {}", path.display());
    path
}

/// Whether the bench runs its `full` length: its command line holds `--full`
/// (`cargo xtask bench --full` passes it).
pub fn full() -> bool {
    std::env::args().any(|a| a == "--full")
}

/// The names on the bench's command line (arguments that are not flags):
/// `cargo bench --bench amqp -- tick_c1` runs only what they name.
pub fn only() -> Vec<String> {
    std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect()
}

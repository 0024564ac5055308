//! `cargo xtask <gate>`: every CI gate of the drain workspace, runnable locally.
//!
//! Each gate prints one closing line, `xtask <gate>: ok` (or `skipped (why)`), or a
//! failure with the command that fixes it, and exits non-zero on failure. `cargo
//! xtask ci` runs them all in order, stops at the first failure, and ends with a
//! summary. `.ci/run` calls exactly `cargo xtask ci`.

mod arch;
mod bench;
mod bench_summary;
mod beside;
mod cargo_gates;
mod ci;
mod deploy;
mod env_gate;
mod files;
mod flags;
mod fuzz;
mod lines;
mod metadata;
mod nemesis;
mod package;
mod rabbit;
mod scan;
mod services;
mod soak;
mod test_gate;
mod util;
mod vocabulary;

use std::process::ExitCode;

use util::{Failure, GateResult};

const HELP: &str = "\
cargo xtask <gate>: the drain workspace's CI gates, runnable locally

Gates (`ci` runs fmt, then test with clippy and doc beside its tests, then the rest
in this order with package beside them, and stops at the first failure):
  fmt      cargo fmt --all -- --check
  clippy   cargo clippy --workspace --all-targets --all-features -- -D warnings,
           and the fuzz targets (fuzz/, their own workspace) on stable
  test     cargo test --workspace --all-features; tests start private
           redis-servers and Prometheus servers, the gate one private RabbitMQ
           node with AMQP 1.0 (DRAIN_TEST_AMQP_URL); runs .ci/setup-services.sh
           as root when a package is missing
  soak     the load program (tests/load/): 64 queues x 16 instances of the tick
           path and 10,000 owners on a private redis-server; no error, commands
           per operation as specified, flat memory; target/bench/load.json.
           `cargo xtask soak [--seconds N]` runs 60 s by default, `ci` 15 s
  doc      cargo doc --workspace --no-deps --all-features, rustdoc warnings denied
  arch     architecture invariants: drain-core's dependencies and source (no
           clock, randomness, I/O or Redis vocabulary), dependencies between
           workspace crates, no spec-section or issue references in code
           (docs/architecture.md)
  flags    docs/flags.md matches `drain config --flags-markdown`
           (`cargo xtask flags --write` regenerates it)
  env      only the config layer reads the environment: the root clippy.toml
           disallows the reads, and only the config layer and test harnesses
           allow them
  deploy   deploy/: promtool check and test the alerting rules, the Grafana
           dashboard queries only keep-list metrics, systemd-analyze verify the
           unit (installs promtool as root, via .ci/setup-services.sh)
  lines    no source file over 800 lines without a reason in
           xtask/line-exceptions.txt
  bench    runs the benches; each writes target/bench/<name>.json. The `ci`
           length (short, on the test build's dev-profile dependencies) by
           default; `cargo xtask bench --full` runs them long, in release
  package  every publishable crate (members not `publish = false`) packages:
           manifest metadata, README, license files, crate docs opening with a
           runnable example, `cargo package --no-verify`, each crate checked
           alone; `cargo xtask package --verify` builds each crate from its
           package instead (minutes; not in `ci`)
  ci       all of the above, then a summary; with nextest, clippy, doc and
           package run beside the test gate's tests (they need no server)

Not in `ci` (takes minutes; fuzz needs the nightly toolchain):
  fuzz     every cargo-fuzz target in fuzz/ for --seconds N each (default 30);
           installs cargo-fuzz when missing (docs/reliability.md)
  nemesis  the fault run of tests/nemesis.rs for --minutes N (default 5): a
           failover that loses writes, a frozen holder, slow replies, a
           partition, an empty restart, in cycles, on private redis-servers;
           the history checked, the checker's negative control; writes
           target/bench/nemesis.json (the test gate runs one short cycle)

Options:
  -h, --help   this text
";

/// One gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Formatting.
    Fmt,
    /// Lints.
    Clippy,
    /// Tests with services.
    Test,
    /// The load program, CI-length.
    Soak,
    /// Documentation.
    Doc,
    /// Architecture invariants.
    Arch,
    /// Generated flag docs.
    Flags,
    /// Environment reads.
    Env,
    /// The files under deploy/.
    Deploy,
    /// File lengths.
    Lines,
    /// Benchmarks.
    Bench,
    /// Publishable crates.
    Package,
}

impl Gate {
    /// Every gate, in the order `ci` runs them.
    pub(crate) const ALL: [Gate; 12] = [
        Gate::Fmt,
        Gate::Clippy,
        Gate::Test,
        Gate::Soak,
        Gate::Doc,
        Gate::Arch,
        Gate::Flags,
        Gate::Env,
        Gate::Deploy,
        Gate::Lines,
        Gate::Bench,
        Gate::Package,
    ];

    /// Its subcommand name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Gate::Fmt => "fmt",
            Gate::Clippy => "clippy",
            Gate::Test => "test",
            Gate::Soak => "soak",
            Gate::Doc => "doc",
            Gate::Arch => "arch",
            Gate::Flags => "flags",
            Gate::Env => "env",
            Gate::Deploy => "deploy",
            Gate::Lines => "lines",
            Gate::Bench => "bench",
            Gate::Package => "package",
        }
    }

    fn parse(name: &str) -> Option<Gate> {
        Gate::ALL.into_iter().find(|g| g.name() == name)
    }

    /// Run it (checking, never writing) and print its closing line.
    pub(crate) fn run(self) -> GateResult {
        self.run_with(false)
    }

    fn run_with(self, write: bool) -> GateResult {
        let result = match self {
            Gate::Fmt => cargo_gates::fmt(),
            Gate::Clippy => cargo_gates::clippy(),
            Gate::Test => test_gate::run_gate(),
            Gate::Soak => soak::run_gate(soak::CI_SECONDS),
            Gate::Doc => cargo_gates::doc(),
            Gate::Arch => arch::run(),
            Gate::Flags => flags::run_gate(write),
            Gate::Env => env_gate::run(),
            Gate::Deploy => deploy::run_gate(),
            Gate::Lines => lines::run(),
            Gate::Bench => bench::run_gate(bench::Length::Ci),
            Gate::Package => package::run_gate(false),
        };
        self.report(result)
    }

    /// Print the closing line of this gate's `result`, and return it.
    fn report(self, result: GateResult) -> GateResult {
        util::report(self.name(), result)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => {
            eprint!("{HELP}");
            ExitCode::from(2)
        }
        ["-h" | "--help" | "help", ..] => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        ["ci"] => exit(ci::run()),
        ["flags", "--write"] => exit(Gate::Flags.run_with(true).map(|_| ())),
        ["soak", rest @ ..] => match soak::parse_args(rest) {
            Ok(seconds) => exit(soak::run_and_report(seconds)),
            Err(problem) => usage(&problem),
        },
        ["bench", rest @ ..] => match bench::parse_args(rest) {
            Ok(length) => exit(Gate::Bench.report(bench::run_gate(length)).map(|_| ())),
            Err(problem) => usage(&problem),
        },
        ["package", rest @ ..] => match package::parse_args(rest) {
            Ok(verify) => exit(Gate::Package.report(package::run_gate(verify)).map(|_| ())),
            Err(problem) => usage(&problem),
        },
        ["nemesis", rest @ ..] => match nemesis::parse_args(rest) {
            Ok(minutes) => exit(nemesis::run_and_report(minutes)),
            Err(problem) => usage(&problem),
        },
        ["fuzz", rest @ ..] => match fuzz::parse_args(rest) {
            Ok(seconds) => exit(fuzz::run_and_report(seconds)),
            Err(problem) => usage(&problem),
        },
        [name] => match Gate::parse(name) {
            Some(gate) => exit(gate.run().map(|_| ())),
            None => usage(&format!("unknown gate `{name}`")),
        },
        _ => usage(&format!("unexpected arguments `{}`", args.join(" "))),
    }
}

fn exit(result: Result<(), Failure>) -> ExitCode {
    // A private RabbitMQ node a gate started for this run stops with it.
    rabbit::stop_shared();
    if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("xtask: {problem}\n");
    eprint!("{HELP}");
    ExitCode::from(2)
}

//! Command-line interface.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Single-flight queue drains and claim-aware owner admission.
///
/// Configuration comes from the environment (see `drain config` and docs/flags.md).
/// With no DRAIN_*_URL set, everything runs embedded: an in-memory store and a demo
/// queue fed by a synthetic producer.
#[derive(Debug, Parser)]
///
/// Run `drain` with no command, or `drain --help`, for this text.
#[command(name = "drain", version)]
pub(crate) struct Cli {
    /// TOML file of settings (same names as the environment variables; the
    /// environment wins).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// `None` for a bare `drain`, which prints the same text as `drain --help`.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// The text of `drain --help`, for a bare `drain`.
pub(crate) fn long_help() -> String {
    use clap::CommandFactory;
    Cli::command().render_long_help().to_string()
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the beat: a tick every DRAIN_BEAT_INTERVAL_SECONDS on DRAIN_WORKER_CONCURRENCY
    /// workers, single-flight per queue, with /metrics; SIGINT/SIGTERM shut down gracefully.
    #[command(after_help = "Examples:\n  \
        drain run                                        # embedded demo\n  \
        SERVICEBUS_DRAIN_SINGLEFLIGHT=on drain run       # overlapping ticks skip\n  \
        drain run --once                                 # one tick, one JSON line\n  \
        drain run --owners 200                           # plus claim-aware owner drains\n  \
        DRAIN_STORE_URL=redis://127.0.0.1:6379 drain run --resident\n  \
        DRAIN_STORE_URL=postgres://drain_app:PASSWORD@127.0.0.1/app drain run --once")]
    Run(crate::commands::run::RunArgs),
    /// List leases, fences and claims with holder and TTL (on Redis by SCAN, never KEYS).
    #[command(after_help = "Examples:\n  \
        DRAIN_REDIS_URL=redis://127.0.0.1:6379 drain leases\n  \
        DRAIN_STORE_URL=postgres://drain_app:PASSWORD@127.0.0.1/app drain leases\n  \
        DRAIN_REDIS_URL=redis://127.0.0.1:6379 DRAIN_KEY_PREFIX=tenant-a drain leases --json")]
    Leases(crate::commands::leases::LeasesArgs),
    /// Check connectivity, round-trip time, config warnings, and every store right and
    /// operation a subcommand needs (`--for run|owners|leases`; on PostgreSQL the schema
    /// and the role's rights, read only).
    #[command(after_help = "Examples:\n  \
        drain doctor\n  \
        DRAIN_REDIS_URL=redis://drain:secret@127.0.0.1:6379 drain doctor\n  \
        DRAIN_REDIS_URL=redis://drain:secret@127.0.0.1:6379 drain doctor --for owners\n\n\
        Exits non-zero with one line per failed check.")]
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Deterministic fleet simulation in virtual time: legacy vs claim-aware vs oracle.
    #[command(after_help = "Examples:\n  \
        drain simulate\n  \
        drain simulate --seed 7 --json\n  \
        drain simulate --scenario seed-fleet --svg target/sim.svg\n  \
        drain simulate --scenario owners   # drain owners' benchmark workload")]
    Simulate(crate::commands::simulate::SimulateArgs),
    /// Owner drains on Redis or PostgreSQL: backlogs in the store, the owner claim taken
    /// per turn, a batch taken per turn; exits with one JSON line once every backlog is
    /// empty.
    #[command(after_help = "Examples:\n  \
        DRAIN_REDIS_URL=redis://127.0.0.1:6379 drain owners --owners 200 --seed 20000 --seed-only\n  \
        DRAIN_REDIS_URL=redis://127.0.0.1:6379 drain owners --owners 200   # run several at once\n  \
        PROJECTION_DRAIN_CLAIM_AWARE=off DRAIN_REDIS_URL=redis://127.0.0.1:6379 drain owners\n  \
        DRAIN_STORE_URL=postgres://drain_app@127.0.0.1:5432/app drain owners --owners 200")]
    Owners(crate::commands::owners::OwnersArgs),
    /// Print the effective configuration, where each value came from, and warnings.
    #[command(after_help = "Examples:\n  \
        drain config\n  \
        SERVICEBUS_DRAIN_SINGLEFLIGHT=on drain config --json\n  \
        drain config --flags-markdown > docs/flags.md")]
    Config(crate::commands::config::ConfigArgs),
}

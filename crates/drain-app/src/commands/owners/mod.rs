//! `drain owners`: seed and drain owner backlogs on Redis, and everything else about
//! owner drains in the binary:
//!
//! * `drains` — the owner drains of `drain owners` on drain-core's admission driver;
//! * `keys` — the workload's keys (backlog lists, the processed-items hash);
//! * `wake` — the release wake-up's Redis side (`PROJECTION_DRAIN_RELEASE_WAKE`);
//! * `demo` — the demo owner workload of `drain run --owners N`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use drain_core::ports::Clock;
use drain_runtime::TokioClock;
use tokio::sync::watch;

use crate::commands::run::Signals;
use crate::compose::{self, Backend};
use crate::config::Loaded;
use crate::observe;

pub(crate) mod demo;
mod drains;
pub(crate) mod keys;
mod wake;

use drains::OwnerKeys;

/// `drain owners` arguments.
#[derive(Debug, Args)]
pub(crate) struct OwnersArgs {
    /// Owners `owner-0` … `owner-<N-1>`, each with the backlog list
    /// `<prefix>:backlog:{owner-i}`.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) owners: u32,
    /// First push ITEMS items (`item-0` …) round-robin onto the owners' backlogs.
    #[arg(long, value_name = "ITEMS")]
    pub(crate) seed: Option<u64>,
    /// Only seed (with --seed), then exit without draining.
    #[arg(long, requires = "seed")]
    pub(crate) seed_only: bool,
    /// Items taken per turn (moved into the owner's in-flight list in one script).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) batch: u32,
    /// Simulated work per item, in microseconds, while the turn holds the owner's claim.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub(crate) item_delay_us: u64,
    /// Milliseconds between passes over the backlogs (each pass requests every owner
    /// with items, and ends the run once all are empty).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub(crate) pass_ms: u64,
    /// How long a turn's owner claim lives if the process dies holding it (another
    /// process takes the owner, and the batch the dead turn left in flight, after it).
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub(crate) claim_ttl_seconds: u64,
}

/// Why `drain owners` refuses a PostgreSQL store (docs/operations.md says the same).
pub(crate) const POSTGRES_HAS_NO_BACKLOGS: &str = "drain owners keeps its demo backlogs in Redis lists, which drain has \
     no PostgreSQL form of: run it with a redis:// DRAIN_STORE_URL; on PostgreSQL, `drain run --owners N` runs \
     claim-aware owner drains (owner claims and peeks) over an in-process workload";

/// Run `drain owners`.
pub(crate) async fn main(args: &OwnersArgs, loaded: Loaded) -> ExitCode {
    let (config, effective) = (loaded.config, loaded.effective);
    if config.postgres_url.is_some() {
        // Said before anything connects: nothing here would work, and nothing is created.
        eprintln!("drain: {POSTGRES_HAS_NO_BACKLOGS}");
        return ExitCode::from(2);
    }
    let draining = !args.seed_only;
    let observer = match observe::start(config.metrics_addr, draining) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let known = adapter_metrics::Known { ticks: None, owners: Some(config.claim_aware) };
    observe::announce(observer.as_ref(), &effective, &known);
    let rt = match compose::compose_until_signal(config, clock, observer, true).await {
        Ok(Some(rt)) => Arc::new(rt),
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let Backend::Redis(lazy) = &rt.backend else {
        tracing::error!("drain owners needs Redis: set DRAIN_REDIS_URL (e.g. redis://127.0.0.1:6379)");
        return ExitCode::from(2);
    };
    let store = match lazy.store().await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot use Redis at {}: {e}", lazy.shown());
            return ExitCode::from(2);
        }
    };
    let owners = args.owners as usize;
    if let Some(items) = args.seed {
        if let Err(e) = drains::seed(&store, &OwnerKeys::new(rt.keys.clone()), owners, items).await {
            tracing::error!("seeding the backlogs failed: {e}");
            return ExitCode::FAILURE;
        }
        tracing::info!(owners, items, "backlogs seeded");
    }
    if !draining {
        return ExitCode::SUCCESS;
    }
    let (tx, rx) = watch::channel(false);
    let mut subscribed = Signals::new();
    let signals = tokio::spawn(async move {
        subscribed.next().await;
        tracing::info!("signal received: stopping after the running turns");
        let _ = tx.send(true);
    });
    let options = drains::Options {
        owners,
        batch: args.batch as usize,
        item_delay: Duration::from_micros(args.item_delay_us),
        pass: Duration::from_millis(args.pass_ms),
        claim_ttl: Duration::from_secs(args.claim_ttl_seconds),
    };
    let report = drains::run(rt.clone(), store, options, rx).await;
    signals.abort();
    rt.amqp.close().await;
    match serde_json::to_string(&report) {
        Ok(line) => crate::out::outln!("{line}"),
        Err(e) => {
            tracing::error!("cannot print the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    // A permanent error stopped the run: retrying cannot help until someone acts.
    if report.error.is_some() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

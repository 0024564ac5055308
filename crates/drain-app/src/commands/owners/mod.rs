//! `drain owners`: seed and drain owner backlogs on Redis or PostgreSQL, and
//! everything else about owner drains in the binary:
//!
//! * `drains` — the owner drains of `drain owners` on drain-core's admission driver;
//! * `backlog` — the backlogs' port, on Redis and on PostgreSQL;
//! * `keys` — the workload's Redis keys (backlog lists, the processed-items hash);
//! * `wake` — whether the release wake-up acts (`PROJECTION_DRAIN_RELEASE_WAKE`);
//! * `demo` — the demo owner workload of `drain run --owners N`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use drain_core::ports::{Clock, DrainStamps, LeaseStore, OwnerClaims, ReleaseWake};
use drain_runtime::TokioClock;
use tokio::sync::watch;

use crate::commands::run::Signals;
use crate::compose::{self, Backend, Runtime};
use crate::config::Loaded;
use crate::observe;

mod backlog;
pub(crate) mod demo;
mod drains;
pub(crate) mod keys;
mod wake;

use backlog::{Backlogs, RedisBacklogs};
use drains::{OwnerStore, Report};
use keys::OwnerKeys;

/// `drain owners` arguments.
#[derive(Debug, Args)]
pub(crate) struct OwnersArgs {
    /// Owners `owner-0` … `owner-<N-1>`, each with a backlog (on Redis the list
    /// `<prefix>:backlog:{owner-i}`, on PostgreSQL rows of drain's `backlog_items`).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) owners: u32,
    /// First push ITEMS items (`item-0` …) round-robin onto the owners' backlogs.
    #[arg(long, value_name = "ITEMS")]
    pub(crate) seed: Option<u64>,
    /// Only seed (with --seed), then exit without draining.
    #[arg(long, requires = "seed")]
    pub(crate) seed_only: bool,
    /// Items taken per turn (moved into flight in one call).
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
    /// Add to the report when each batch was recorded (`recorded_at`: `[unix ms,
    /// items]` pairs), from which a benchmark reads item latencies.
    #[arg(long)]
    pub(crate) item_times: bool,
}

/// Run `drain owners`.
pub(crate) async fn main(args: &OwnersArgs, loaded: Loaded) -> ExitCode {
    let (config, effective) = (loaded.config, loaded.effective);
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
    match &rt.backend {
        Backend::Redis(lazy) => match lazy.inner().store().await.map(|s| (*s).clone()) {
            Ok(store) => {
                let backlogs = RedisBacklogs { store: store.clone(), keys: OwnerKeys::new(rt.keys.clone()) };
                let wake = draining && wake::wake_allowed(&rt, &store).await;
                let counters = store.release_counters();
                let heard = move || (counters.received(), counters.reconnects());
                serve(args, rt.clone(), OwnerStore { claims: store, backlogs, heard, wake }).await
            }
            Err(e) => cannot_use("Redis", lazy.inner().shown(), &e),
        },
        Backend::Postgres(lazy) => match lazy.inner().store().await.map(|s| (*s).clone()) {
            Ok(store) => {
                // grant_sql grants the wake-up's functions with the others: the switches decide.
                let wake = draining && wake::switches_allow_wake(&rt);
                let heard = {
                    let store = store.clone();
                    move || (store.release_counters().received(), store.release_counters().reconnects())
                };
                serve(args, rt.clone(), OwnerStore { claims: store.clone(), backlogs: store, heard, wake }).await
            }
            Err(e) => cannot_use("PostgreSQL", lazy.inner().shown(), &e),
        },
        _ => {
            tracing::error!(
                "drain owners needs Redis or PostgreSQL: set DRAIN_STORE_URL (e.g. redis://127.0.0.1:6379 or \
                 postgres://user@127.0.0.1/db)"
            );
            ExitCode::from(2)
        }
    }
}

fn cannot_use(name: &str, shown: &str, e: &drain_core::PortError) -> ExitCode {
    tracing::error!("cannot use {name} at {shown}: {e}");
    ExitCode::from(2)
}

/// `drain owners` once the store is chosen: the same on every store.
async fn serve<S, B, H>(args: &OwnersArgs, rt: Arc<Runtime>, on: OwnerStore<S, B, H>) -> ExitCode
where
    S: LeaseStore + OwnerClaims + ReleaseWake + DrainStamps + Clone,
    B: Backlogs,
    H: Fn() -> (u64, u64),
{
    let owners = args.owners as usize;
    if let Some(items) = args.seed {
        if let Err(e) = backlog::seed(&on.backlogs, owners, items).await {
            tracing::error!("seeding the backlogs failed: {e}");
            return ExitCode::FAILURE;
        }
        tracing::info!(owners, items, "backlogs seeded");
    }
    if args.seed_only {
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
        item_times: args.item_times,
    };
    let report = drains::run(rt.clone(), on, options, rx).await;
    signals.abort();
    rt.amqp.close().await;
    print(&report)
}

/// Print the report as one JSON line; a permanent error that stopped the run fails
/// the process (retrying cannot help until someone acts).
fn print(report: &Report) -> ExitCode {
    match serde_json::to_string(report) {
        Ok(line) => crate::out::outln!("{line}"),
        Err(e) => {
            tracing::error!("cannot print the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    if report.error.is_some() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

//! `drain run`: the beat, ticks, the resident consumer, owner-drain demo and `/metrics`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use adapter_metrics::{Known, KnownTicks};
use clap::Args;
use drain_core::ports::Clock;
use drain_core::tick::{InFlight, TickConfig};
use drain_runtime::{Beat, TokioClock, purge_rounds};
use tokio::sync::watch;

use crate::commands::owners::demo as owners;
use crate::compose::{self, Runtime};
use crate::config::Loaded;
use crate::demo;
use crate::observe;

/// `drain run` arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Run one tick, print its report as one JSON line on stdout, and exit 0 (a skipped
    /// tick is not an error).
    #[arg(long)]
    pub(crate) once: bool,
    /// Also run the resident consumer: one long-running receive loop in this process,
    /// without the lease (the atomic claim covers its overlap with ticks).
    #[arg(long, conflicts_with = "once")]
    pub(crate) resident: bool,
    /// Also run claim-aware owner drains over a demo workload of N owners (run several
    /// processes on one Redis to watch them compete for owner claims).
    #[arg(long, value_name = "N", conflicts_with = "once", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) owners: Option<u32>,
}

/// `drain run` and `drain run --once`.
pub(crate) async fn main(args: &RunArgs, loaded: Loaded) -> ExitCode {
    let observer = match observe::start(loaded.config.metrics_addr, !args.once) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let (config, effective) = (loaded.config, loaded.effective);
    let rt = match compose::compose_until_signal(config, clock.clone(), observer, args.owners.is_some()).await {
        Ok(Some(rt)) => Arc::new(rt),
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let ticks = KnownTicks {
        queue: &rt.ticks.tick.queue,
        singleflight: rt.ticks.tick.singleflight,
        atomic_claim: rt.ticks.tick.atomic_claim,
        resident: args.resident,
    };
    let owners = args.owners.map(|_| rt.config.claim_aware);
    observe::announce(rt.ticks.observer.as_ref(), &effective, &Known { ticks: Some(ticks), owners });
    if !args.once {
        let plan = plan(&rt, args, &observe::switch_modes(&effective));
        tracing::info!("{plan}");
    }
    let producer = rt.demo_queue.clone().map(|q| tokio::spawn(demo::produce(q, clock.clone(), !args.once)));

    let code = if args.once { once(&rt).await } else { forever(rt.clone(), args).await };
    if let Some(p) = producer {
        p.abort();
    }
    rt.amqp.close().await;
    code
}

/// What `drain run` is about to do, as its first log line says it: queue, source,
/// target and store (secrets masked), the switches not off, beat and concurrency.
fn plan(rt: &Runtime, args: &RunArgs, switches: &[(&'static str, drain_core::Switch)]) -> String {
    let c = &rt.config;
    let source = c.source_url.as_ref().map_or_else(|| "the embedded demo queue".to_owned(), ToString::to_string);
    let target = c.target_url.as_ref().map_or_else(|| "the embedded target".to_owned(), ToString::to_string);
    let on: Vec<String> = switches
        .iter()
        .filter(|(_, mode)| *mode != drain_core::Switch::Off)
        .map(
            |(name, mode)| {
                if *mode == drain_core::Switch::On { (*name).to_owned() } else { format!("{name} (shadow)") }
            },
        )
        .collect();
    let switches_on = if on.is_empty() { "none".to_owned() } else { on.join(", ") };
    let extras = match (args.resident, args.owners) {
        (false, None) => String::new(),
        (true, None) => ", plus the resident consumer".to_owned(),
        (false, Some(n)) => format!(", plus owner drains over {n} demo owners"),
        (true, Some(n)) => format!(", plus the resident consumer and owner drains over {n} demo owners"),
    };
    format!(
        "drain run: queue {queue} from {source} to {target}, store {store}; switches on: {switches_on}; \
         a tick every {beat} s on {workers} workers, messages {msgs} at a time{extras}",
        msgs = in_flight(&rt.ticks.tick),
        queue = rt.ticks.tick.queue,
        store = rt.store_name(),
        beat = c.beat_interval.as_secs(),
        workers = c.worker_concurrency,
    )
}

/// How many messages a tick has in flight, in words.
fn in_flight(tick: &TickConfig) -> String {
    match tick.in_flight {
        InFlight::Adaptive { max } => format!("{}..={max} (adaptive)", tick.concurrency.max(1)),
        _ => tick.concurrency.to_string(),
    }
}

async fn once(rt: &Runtime) -> ExitCode {
    let beat = Beat::new(rt.ticks.clone(), rt.gate.clone(), rt.beat_config(false));
    let report = beat.once().await;
    crate::out::outln!("{}", crate::report::to_json(&report));
    ExitCode::SUCCESS
}

async fn forever(rt: Arc<Runtime>, args: &RunArgs) -> ExitCode {
    let (tx, rx) = watch::channel(false);
    // Subscribe before anything runs, and keep the subscription: a signal that lands
    // between two waits is not lost.
    let mut signals = Signals::new();
    tokio::spawn(async move {
        signals.next().await;
        let first = tokio::time::Instant::now();
        tracing::info!("signal received: shutting down (a second signal exits at once)");
        let _ = tx.send(true);
        loop {
            signals.next().await;
            let after = first.elapsed();
            if !same_delivery(after) {
                break;
            }
            tracing::info!(
                after_ms = after.as_millis() as u64,
                "signal ignored: within {} ms of the first it counts as the same one; send another to exit now",
                SAME_SIGNAL.as_millis()
            );
        }
        tracing::warn!("second signal: exiting now (running ticks are not finished; leases expire by TTL)");
        std::process::exit(SECOND_SIGNAL_EXIT);
    });
    let owners = args.owners.map(|n| tokio::spawn(owners::run(rt.clone(), n as usize, rx.clone())));
    // PostgreSQL keeps expired claims and lapsed waiter registrations as rows (Redis
    // expires its keys by itself): every process deletes them now and then.
    let purge = match &rt.backend {
        compose::Backend::Postgres(store) => {
            let store = store.clone();
            Some(tokio::spawn(purge_rounds(PURGE_EVERY, PURGE_LIMIT, move |limit| {
                let store = store.clone();
                async move { store.inner().store().await?.purge_expired(limit).await }
            })))
        }
        _ => None,
    };
    let mut shutdown = rx.clone();
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    Beat::new(rt.ticks.clone(), rt.gate.clone(), rt.beat_config(args.resident)).run(stop).await;
    if let Some(task) = purge {
        task.abort();
    }
    if let Some(task) = owners {
        // The driver closes the scheduler, hands off pending intents and awaits running turns.
        let _ = task.await;
    }
    ExitCode::SUCCESS
}

/// Time between two purges of expired rows on PostgreSQL.
const PURGE_EVERY: Duration = Duration::from_secs(300);

/// Rows one purge call deletes at most (of claims, and of waiter registrations).
const PURGE_LIMIT: u32 = 10_000;

/// The exit status of a second signal (documented in docs/operations.md).
const SECOND_SIGNAL_EXIT: i32 = 130;

/// Signals this close to the first count as the same one: `timeout`, and supervisors
/// that signal both a process and its group, deliver one request twice within
/// microseconds. A person pressing Ctrl-C twice is far slower than this (a keystroke
/// alone lasts longer), so their second press exits. (This was 1 s, which swallowed a
/// quick double Ctrl-C: the process then waited out the whole grace period.)
const SAME_SIGNAL: Duration = Duration::from_millis(100);

/// Whether a signal `after` the first is that first signal delivered twice.
fn same_delivery(after: Duration) -> bool {
    after < SAME_SIGNAL
}

/// SIGINT and SIGTERM (Ctrl-C elsewhere), subscribed once.
pub(crate) struct Signals {
    #[cfg(unix)]
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let streams = match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
                (Ok(int), Ok(term)) => Some((int, term)),
                _ => {
                    tracing::warn!("cannot subscribe to SIGINT/SIGTERM; falling back to Ctrl-C only");
                    None
                }
            };
            Signals { streams }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The next SIGINT or SIGTERM.
    pub(crate) async fn next(&mut self) {
        #[cfg(unix)]
        if let Some((int, term)) = &mut self.streams {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_near_simultaneous_signal_is_the_same_delivery() {
        assert!(same_delivery(Duration::ZERO));
        assert!(same_delivery(Duration::from_micros(50)), "timeout(1) signals the child and then its group");
        assert!(!same_delivery(Duration::from_millis(150)), "a quick double Ctrl-C exits");
        assert!(!same_delivery(Duration::from_millis(900)), "within 1 s of the first still exits");
    }
}

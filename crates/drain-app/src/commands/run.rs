use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use drain_core::event::Event;
use drain_core::ports::Clock;
use tokio::sync::watch;

use crate::beat;
use crate::cli::RunArgs;
use crate::clock::SystemClock;
use crate::compose::{self, Runtime};
use crate::config::Loaded;
use crate::demo;
use crate::observe;
use crate::owners;

/// `drain run` and `drain run --once`.
pub(crate) async fn main(args: &RunArgs, loaded: Loaded) -> ExitCode {
    let config = loaded.config;
    let observer = match observe::start(config.metrics_addr, !args.once) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    for (switch, mode) in [
        ("SERVICEBUS_DRAIN_SINGLEFLIGHT", config.singleflight),
        ("SERVICEBUS_DRAIN_LEASE_RENEW", config.lease_renew),
        ("SERVICEBUS_ATOMIC_CLAIM", config.atomic_claim),
        ("PROJECTION_DRAIN_CLAIM_AWARE", config.claim_aware),
    ] {
        observer.observe(&Event::SwitchMode { switch, mode });
    }
    let rt = match compose::compose(config, clock.clone(), observer, args.owners.is_some()).await {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let producer = rt.demo_queue.clone().map(|q| tokio::spawn(demo::produce(q, clock.clone(), !args.once)));

    let code = if args.once { once(&rt).await } else { forever(rt.clone(), args).await };
    if let Some(p) = producer {
        p.abort();
    }
    rt.amqp.close().await;
    code
}

async fn once(rt: &Runtime) -> ExitCode {
    let report = beat::tick_once(rt, &AtomicBool::new(false)).await;
    match serde_json::to_string(&report) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("cannot print the report: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn forever(rt: Arc<Runtime>, args: &RunArgs) -> ExitCode {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let first = tokio::time::Instant::now();
        tracing::info!("signal received: shutting down (a second signal exits at once)");
        let _ = tx.send(true);
        loop {
            wait_for_signal().await;
            // `timeout`, shells and some supervisors deliver one signal twice (to the
            // process and to its group) within microseconds: that is not a second request.
            if first.elapsed() >= SAME_SIGNAL {
                break;
            }
        }
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
    let owners = args.owners.map(|n| tokio::spawn(owners::run(rt.clone(), n as usize, rx.clone())));
    beat::run(rt, rx, args.resident).await;
    if let Some(task) = owners {
        // The driver closes the scheduler, hands off pending intents and awaits running turns.
        let _ = task.await;
    }
    ExitCode::SUCCESS
}

/// Signals this close to the first count as the same one.
const SAME_SIGNAL: std::time::Duration = std::time::Duration::from_secs(1);

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

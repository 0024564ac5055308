//! The beat: a tick every interval (jittered by ±50 %) onto a pool of
//! `DRAIN_WORKER_CONCURRENCY` workers, an optional resident consumer, and graceful
//! shutdown.
//!
//! Shutdown, on the first SIGINT/SIGTERM: stop the beat; let running ticks finish
//! within `DRAIN_SHUTDOWN_GRACE_SECONDS`; then ask the rest to stop (each abandons
//! what it did not submit, settles its claims and releases its lease); abort what
//! still runs after a short bound and release its lease from here. A second
//! signal exits at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drain_core::event::TickKind;
use drain_core::ports::LeaseName;
use drain_core::tick::{TickReport, run_tick_until};
use drain_core::{LeaseToken, Switch};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::compose::Runtime;

/// How long stopped ticks get to abandon and release before they are aborted.
const STOP_BOUND: Duration = Duration::from_secs(5);

/// Leases held by running ticks, so a tick aborted at shutdown still gets released.
#[derive(Default)]
struct Held(Mutex<HashMap<u64, LeaseToken>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, LeaseToken>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Run one tick with a fresh token.
pub(crate) async fn tick_once(rt: &Runtime, stop: &AtomicBool) -> TickReport {
    let token = LeaseToken::generate(&rt.config.instance_id, &mut rand::rng());
    run_tick_until(&rt.tick, &rt.ports(), &token, stop).await
}

fn log_report(report: &TickReport) {
    let json = serde_json::to_string(report).unwrap_or_default();
    if report.is_skipped() {
        tracing::debug!(target: "drain::tick", report = %json, "tick skipped: another tick holds the lease");
    } else if report.error.is_some() || report.lease_lost {
        tracing::warn!(target: "drain::tick", report = %json, "tick ended early");
    } else {
        tracing::info!(target: "drain::tick", report = %json, "tick done");
    }
}

/// Beat until `shutdown` flips, then shut down gracefully.
pub(crate) async fn run(rt: Arc<Runtime>, mut shutdown: watch::Receiver<bool>, resident: bool) {
    let workers = rt.config.worker_concurrency.max(1);
    let slots = Arc::new(Semaphore::new(workers));
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Held::default());
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut next_id = 0u64;

    if resident {
        tasks.spawn(resident_loop(rt.clone(), stop.clone(), shutdown.clone()));
    }

    let mut next_beat = tokio::time::Instant::now();
    tracing::info!(
        queue = %rt.tick.queue,
        interval_s = rt.config.beat_interval.as_secs(),
        workers,
        singleflight = rt.tick.singleflight.as_str(),
        atomic_claim = rt.tick.atomic_claim.as_str(),
        store = %rt.store_name(),
        "beat started"
    );
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next_beat) => {
                next_beat = tokio::time::Instant::now() + jittered(rt.config.beat_interval);
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(workers, "all workers busy; this beat starts no tick");
                    continue;
                };
                next_id += 1;
                let (id, rt, stop, held) = (next_id, rt.clone(), stop.clone(), held.clone());
                tasks.spawn(async move {
                    let token = LeaseToken::generate(&rt.config.instance_id, &mut rand::rng());
                    if rt.tick.singleflight != Switch::Off {
                        held.lock().insert(id, token.clone());
                    }
                    let report = run_tick_until(&rt.tick, &rt.ports(), &token, &stop).await;
                    held.lock().remove(&id);
                    log_report(&report);
                    drop(permit);
                });
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => log_join(done),
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    shut_down(&rt, tasks, &stop, &held).await;
}

/// `interval` times a factor drawn from [0.5, 1.5): one tick per interval on average,
/// but the beats of several processes never stay in phase. With single-flight, a
/// process whose beat kept falling inside other holders' ticks never ran one, and the
/// messages its receiver had prefetched stayed unacknowledged for as long as that
/// lasted (found by `tests/fleet_amqp.rs`).
fn jittered(interval: Duration) -> Duration {
    use rand::RngExt;
    interval.mul_f64(rand::rng().random_range(0.5..1.5))
}

async fn all_done(tasks: &mut JoinSet<()>) {
    while let Some(done) = tasks.join_next().await {
        log_join(done);
    }
}

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        // The error quotes the panic message: mask the secrets in it as the hook does.
        tracing::error!(
            "a tick panicked (its lease was released first): {}",
            crate::panic_hook::scrubbed(&e.to_string())
        );
    }
}

async fn shut_down(rt: &Runtime, mut tasks: JoinSet<()>, stop: &AtomicBool, held: &Held) {
    let grace = rt.config.shutdown_grace;
    tracing::info!(
        running = tasks.len(),
        grace_s = grace.as_secs(),
        "shutdown: beat stopped; waiting for running ticks"
    );
    if tokio::time::timeout(grace, all_done(&mut tasks)).await.is_err() {
        tracing::warn!(running = tasks.len(), "grace period over: stopping ticks (unsubmitted messages are abandoned)");
        stop.store(true, Ordering::Release);
        if tokio::time::timeout(STOP_BOUND, all_done(&mut tasks)).await.is_err() {
            tracing::warn!(running = tasks.len(), "ticks did not stop in time: aborting them");
            tasks.abort_all();
            all_done(&mut tasks).await;
        }
    }
    stop.store(true, Ordering::Release);
    let leftovers: Vec<LeaseToken> = held.lock().drain().map(|(_, t)| t).collect();
    let key = LeaseName::queue(rt.tick.queue.as_str());
    for (token, leases) in leftovers.into_iter().filter_map(|t| rt.leases.as_ref().map(|l| (t, l))) {
        match leases.release(&key, &token).await {
            Ok(r) => tracing::info!(result = ?r, "released the lease of an aborted tick"),
            Err(e) => tracing::warn!("could not release an aborted tick's lease ({e}); its TTL frees it"),
        }
    }
    tracing::info!("shutdown complete");
}

/// The resident consumer's wait after a batch that got nowhere: the first delay,
/// doubled after each such batch up to [`RESIDENT_BACKOFF_MAX`], forgotten after a
/// batch that made progress.
const RESIDENT_BACKOFF_FIRST: Duration = Duration::from_secs(1);
const RESIDENT_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Whether a resident batch got nowhere: it failed, or every message it received
/// went back to the source (the claim store fails closed, the target refuses). On
/// Service Bus each return counts a delivery, so retrying at once would burn the
/// backlog's delivery counts into the dead-letter queue within seconds.
fn stalled(report: &TickReport) -> bool {
    report.error.is_some() || report.stats.as_ref().is_some_and(|s| s.received > 0 && s.abandoned >= s.received)
}

/// The wait after a stalled batch, given the previous one.
fn next_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(RESIDENT_BACKOFF_FIRST, |d| d.saturating_mul(2).min(RESIDENT_BACKOFF_MAX))
}

/// The resident consumer: one in-process receive loop (at most one per process,
/// guarded by its own lock), no lease; the atomic claim covers its overlap with
/// beat ticks. It backs off (1 s doubling to 30 s) while its batches get nowhere.
async fn resident_loop(rt: Arc<Runtime>, stop: Arc<AtomicBool>, mut shutdown: watch::Receiver<bool>) {
    static RESIDENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let Ok(_guard) = RESIDENT.try_lock() else {
        tracing::warn!("a resident consumer already runs in this process");
        return;
    };
    let mut cfg = rt.tick.clone();
    cfg.singleflight = Switch::Off;
    cfg.max_batches = Some(1);
    cfg.kind = TickKind::Resident;
    tracing::info!(queue = %cfg.queue, "resident consumer started");
    let mut backoff = None;
    while !stop.load(Ordering::Acquire) && !*shutdown.borrow() {
        let token = LeaseToken::generate(&rt.config.instance_id, &mut rand::rng());
        let report = run_tick_until(&cfg, &rt.ports(), &token, &stop).await;
        if let Some(s) = report.stats
            && s.received > 0
        {
            tracing::info!(target: "drain::resident", report = %serde_json::to_string(&report).unwrap_or_default(), "resident batch");
        }
        if !stalled(&report) {
            backoff = None;
            continue;
        }
        let delay = next_backoff(backoff);
        backoff = Some(delay);
        tracing::warn!(
            target: "drain::resident",
            queue = %cfg.queue,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            "resident batch got nowhere (failed, or every message went back); backing off"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_consumer_backs_off_only_while_its_batches_get_nowhere() {
        use drain_core::tick::DrainStats;
        let report = |received: u64, abandoned: u64, error: Option<&str>| TickReport {
            queue: "q".to_owned(),
            skipped: None,
            lease: None,
            fence: None,
            stats: Some(DrainStats { received, abandoned, submitted: received - abandoned, ..DrainStats::default() }),
            lease_lost: false,
            stopped: false,
            error: error.map(str::to_owned),
        };
        let check = |r: TickReport, want: bool| assert_eq!(stalled(&r), want, "{r:?}");
        check(report(10, 10, None), true);
        check(report(10, 9, None), false);
        check(report(0, 0, None), false);
        check(report(0, 0, Some("receive failed")), true);
        let delays: Vec<u64> = std::iter::successors(Some(next_backoff(None)), |d| Some(next_backoff(Some(*d))))
            .take(8)
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn beats_are_jittered_around_the_interval() {
        let interval = Duration::from_secs(10);
        let beats: Vec<Duration> = (0..1_000).map(|_| jittered(interval)).collect();
        assert!(beats.iter().all(|b| *b >= interval / 2 && *b < interval * 3 / 2), "within ±50 %");
        assert!(beats.iter().any(|b| *b < interval * 3 / 4) && beats.iter().any(|b| *b > interval * 5 / 4), "spread");
        let mean = beats.iter().sum::<Duration>() / 1_000;
        assert!(mean > interval * 9 / 10 && mean < interval * 11 / 10, "one beat per interval on average: {mean:?}");
    }
}

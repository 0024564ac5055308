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
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drain_core::event::TickKind;
use drain_core::guard::LeaseStatus;
use drain_core::ports::LeaseName;
use drain_core::tick::{ClaimHealth, Gate, TickControl, TickReport, run_tick};
use drain_core::{LeaseToken, Switch};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::compose::Runtime;

/// How long stopped ticks get to abandon and release before they are aborted.
const STOP_BOUND: Duration = Duration::from_secs(5);
/// A tick running longer than this logs its progress, once per this period.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// "All workers busy" is logged at most this often, with the number of beats it
/// stands for.
const BUSY_EVERY: Duration = Duration::from_secs(60);

/// Leases held by running ticks, so a tick aborted at shutdown still gets released.
#[derive(Default)]
struct Held(Mutex<HashMap<u64, LeaseToken>>);

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, LeaseToken>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Run one tick with a fresh token: its report, and the token (the holder of any
/// claims its failed claim call may still take).
pub(crate) async fn tick_once(rt: &Runtime) -> (TickReport, LeaseToken) {
    let token = LeaseToken::generate(&rt.config.instance_id, &mut rand::rng());
    let report = run_tick(&rt.tick, &rt.ports(), &token, &TickControl::default()).await;
    (report, token)
}

/// Run a tick of `cfg`, logging its progress every [`PROGRESS_EVERY`] while it runs.
async fn watched_tick(
    rt: &Runtime,
    cfg: &drain_core::tick::TickConfig,
    token: &LeaseToken,
    stop: &Arc<AtomicBool>,
    what: &'static str,
) -> TickReport {
    let progress = TickControl::stopped_by(stop.clone());
    let ports = rt.ports();
    let tick = run_tick(cfg, &ports, token, &progress);
    futures::pin_mut!(tick);
    let started = tokio::time::Instant::now();
    let mut every = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            report = &mut tick => return report,
            _ = every.tick() => tracing::info!(
                target: "drain::tick",
                queue = %cfg.queue,
                running_s = started.elapsed().as_secs(),
                received = progress.received(),
                submitted = progress.submitted(),
                "{what} still running after {} s: {} received, {} submitted so far",
                started.elapsed().as_secs(),
                progress.received(),
                progress.submitted()
            ),
        }
    }
}

/// What went wrong in a tick, in words with counts (empty when nothing did).
fn problems(report: &TickReport) -> String {
    let mut out = String::new();
    let mut add = |what: String| {
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&what);
    };
    if report.lease == Some(LeaseStatus::FailOpen) {
        add("the lease store failed on acquire: drained without the lease (fail-open)".to_owned());
    }
    if let Some(s) = report.stats {
        if s.claim_errors > 0 {
            add(format!(
                "{} message(s) abandoned, not submitted: the claim store failed (fail-closed)",
                s.claim_errors
            ));
        } else if report.claims == ClaimHealth::Failed {
            add("the claim store failed: receiving stopped".to_owned());
        }
        if s.submit_failures > 0 {
            add(format!("{} submit(s) failed: claims released, messages abandoned for redelivery", s.submit_failures));
        }
        if s.claims_expired > 0 {
            add(format!(
                "{} claim(s) expired before they were settled (submits outlived SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS): possible duplicates in the target",
                s.claims_expired
            ));
        }
        if s.claim_settle_errors > 0 {
            add(format!(
                "{} claim settlement(s) failed: those claims stay pending until the pending TTL",
                s.claim_settle_errors
            ));
        }
        if s.settle_errors > 0 {
            add(format!("{} settlement(s) at the source failed: those messages are redelivered", s.settle_errors));
        }
        if s.dead_lettered > 0 {
            add(format!("{} message(s) without a message id dead-lettered", s.dead_lettered));
        }
    }
    if report.lease_lost {
        add("the lease was lost while draining (expired or taken): drain cancelled".to_owned());
    }
    if let Some(e) = &report.error {
        let _ = write!(out, "{}{e}", if out.is_empty() { "" } else { "; " });
    }
    out
}

/// One line per tick: a summary with counts (`report`, the `--once` JSON), a warning
/// whose `problems` field says in words what went wrong, when something did. The
/// message stays `tick done` / `resident batch` either way, for whoever greps it.
fn log_report(report: &TickReport, resident: bool) {
    let json = crate::report::to_json(report);
    let problems = problems(report);
    if report.is_skipped() {
        tracing::debug!(target: "drain::tick", report = %json, "tick skipped: another tick holds the lease");
    } else if report.error.is_some() || report.lease_lost {
        tracing::warn!(target: "drain::tick", report = %json, problems = %problems, "tick ended early");
    } else if resident && !problems.is_empty() {
        tracing::warn!(target: "drain::resident", report = %json, problems = %problems, "resident batch");
    } else if resident && report.stats.is_some_and(|s| s.received > 0) {
        tracing::info!(target: "drain::resident", report = %json, "resident batch");
    } else if !problems.is_empty() {
        tracing::warn!(target: "drain::tick", report = %json, problems = %problems, "tick done");
    } else if !resident {
        tracing::info!(target: "drain::tick", report = %json, "tick done");
    }
}

/// "All workers busy", at most once per [`BUSY_EVERY`], with how many beats it covers.
#[derive(Default)]
struct Busy {
    beats: u64,
    logged: Option<tokio::time::Instant>,
}

impl Busy {
    fn beat_lost(&mut self, workers: usize) {
        self.beats += 1;
        if self.logged.is_none_or(|t| t.elapsed() >= BUSY_EVERY) {
            tracing::warn!(
                workers,
                beats = self.beats,
                "all {workers} workers busy: {} beat(s) started no tick{}",
                self.beats,
                if self.logged.is_some() { " in the last minute" } else { "" }
            );
            self.beats = 0;
            self.logged = Some(tokio::time::Instant::now());
        }
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
    // With the lease on, this process drains only inside ticks it holds the lease for:
    // between them its receiver holds no credit, so it sits on no message the holder
    // could drain (a resident consumer receives all the time, so it keeps its credit).
    let park = rt.tick.singleflight.enforces() && !resident;
    let running = Arc::new(AtomicUsize::new(0));
    if park {
        rt.amqp.park_source().await;
    }
    let mut busy = Busy::default();

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
                let probe = match rt.gate() {
                    Gate::Run => false,
                    Gate::Probe => true,
                    Gate::Wait { .. } => {
                        tracing::debug!(queue = %rt.tick.queue, "beat starts no tick: the claim store is down");
                        rt.claims_down_tick(Duration::ZERO);
                        rt.hold_nothing().await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    busy.beat_lost(workers);
                    if probe {
                        // Probe now rather than lose the turn; a failed probe is a beat
                        // that found the claim store down.
                        let started = rt.clock.now();
                        if !rt.probe().await {
                            rt.claims_down_tick(rt.clock.now().saturating_since(started));
                        }
                    }
                    continue;
                };
                next_id += 1;
                let (id, rt, stop, held, running) = (next_id, rt.clone(), stop.clone(), held.clone(), running.clone());
                tasks.spawn(async move {
                    let started = rt.clock.now();
                    if probe && !rt.probe().await {
                        rt.claims_down_tick(rt.clock.now().saturating_since(started));
                        drop(permit);
                        return;
                    }
                    let token = LeaseToken::generate(&rt.config.instance_id, &mut rand::rng());
                    if rt.tick.singleflight != Switch::Off {
                        held.lock().insert(id, token.clone());
                    }
                    running.fetch_add(1, Ordering::AcqRel);
                    let report = watched_tick(&rt, &rt.tick, &token, &stop, "tick").await;
                    // The last tick to end parks the source (one still draining keeps it).
                    if running.fetch_sub(1, Ordering::AcqRel) == 1 && park {
                        rt.amqp.park_source().await;
                    }
                    held.lock().remove(&id);
                    log_report(&report, false);
                    rt.after_tick(&report, &token);
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

/// The resident consumer: one in-process receive loop (at most one per process,
/// guarded by its own lock), no lease; the atomic claim covers its overlap with
/// beat ticks. While the claim store is down it receives nothing: it waits out the
/// gate's back-off, then probes the store (see `gate`).
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
    let stopping = |shutdown: &watch::Receiver<bool>| stop.load(Ordering::Acquire) || *shutdown.borrow();
    while !stopping(&shutdown) {
        match rt.gate() {
            Gate::Run => {}
            Gate::Probe => {
                rt.probe().await;
                continue;
            }
            Gate::Wait { until } => {
                rt.hold_nothing().await;
                let wait = until.saturating_since(rt.clock.now()).max(Duration::from_millis(10));
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
        }
        let token = LeaseToken::generate(&rt.config.instance_id, &mut rand::rng());
        let report = watched_tick(&rt, &cfg, &token, &stop, "resident batch").await;
        log_report(&report, true);
        rt.after_tick(&report, &token);
        if report.error.is_some() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

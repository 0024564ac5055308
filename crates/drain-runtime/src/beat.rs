//! The beat: a tick every interval (jittered by ±50 %) onto a pool of worker slots,
//! an optional resident consumer, the claim gate, and graceful shutdown.
//!
//! Shutdown, once the `shutdown` future resolves: stop the beat; let running ticks
//! finish within the grace period; then ask the rest to stop (each abandons what it
//! did not submit, settles its claims and releases its lease); abort what still runs
//! after a short bound and release its lease from here.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use drain_core::event::TickKind;
use drain_core::ports::LeaseName;
use drain_core::tick::{OutageVerdict, TickConfig, TickControl, TickReport};
use drain_core::{LeaseToken, Switch};
use rand::RngExt;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::{ClaimGate, Ticks};

/// How long stopped ticks get to abandon and release before they are aborted.
const STOP_BOUND: Duration = Duration::from_secs(5);
/// A tick running longer than this logs its progress, once per this period.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// "All workers busy" is logged at most this often, with the number of beats it
/// stands for.
const BUSY_EVERY: Duration = Duration::from_secs(60);

/// How the beat runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BeatConfig {
    /// The mean time between two beats (each is jittered by ±50 %).
    pub interval: Duration,
    /// Ticks that may run at once: the overlap the single-flight lease removes.
    pub workers: usize,
    /// How long running ticks may finish on shutdown before they are told to stop.
    pub grace: Duration,
    /// Also run the resident consumer: one receive loop in this process, without
    /// the lease (the atomic claim covers its overlap with the beat's ticks).
    pub resident: bool,
}

impl BeatConfig {
    /// A beat every `interval` (on average) on `workers` worker slots.
    #[must_use]
    pub fn every(interval: Duration, workers: usize) -> Self {
        BeatConfig { interval, workers, ..BeatConfig::default() }
    }

    /// With a grace of `grace` for running ticks on shutdown.
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// With the resident consumer.
    #[must_use]
    pub fn resident(mut self, resident: bool) -> Self {
        self.resident = resident;
        self
    }
}

impl Default for BeatConfig {
    /// A tick every 10 s on 4 workers, a 30 s grace, no resident consumer.
    fn default() -> Self {
        BeatConfig { interval: Duration::from_secs(10), workers: 4, grace: Duration::from_secs(30), resident: false }
    }
}

/// Called with every tick's report (after it is logged).
pub type OnReport = Arc<dyn Fn(&TickReport) + Send + Sync>;

/// The beat runner over one queue's [`Ticks`].
pub struct Beat {
    ticks: Arc<Ticks>,
    gate: Arc<ClaimGate>,
    config: BeatConfig,
    on_report: Option<OnReport>,
    /// The beat stopped: the resident consumer starts no further batch.
    closing: AtomicBool,
}

impl Beat {
    /// A beat over `ticks` with its claim gate.
    #[must_use]
    pub fn new(ticks: Arc<Ticks>, gate: Arc<ClaimGate>, config: BeatConfig) -> Self {
        Beat { ticks, gate, config, on_report: None, closing: AtomicBool::new(false) }
    }

    /// Also hand every tick's report to `f`.
    #[must_use]
    pub fn on_report(mut self, f: OnReport) -> Self {
        self.on_report = Some(f);
        self
    }

    /// One tick now, as `drain run --once` runs it: its report, once the claims its
    /// failed claim call may have taken are released ([`ClaimGate::release_before_exit`]).
    pub async fn once(&self) -> TickReport {
        let (report, token) = self.ticks.tick(&self.ticks.tick, &TickControl::default()).await;
        self.gate.release_before_exit(&report, &token).await;
        report
    }

    /// Beat until `shutdown` resolves, then shut down gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let this = Arc::new(self);
        let (ticks, cfg) = (&this.ticks, this.config);
        let workers = cfg.workers.max(1);
        let slots = Arc::new(Semaphore::new(workers));
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(RunningLeases::default());
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut next_id = 0u64;
        // With the lease on, this process drains only inside ticks it holds the lease
        // for: between them its source holds no credit, so it sits on no message the
        // holder could drain (a resident consumer receives all the time, so it keeps it).
        let park = ticks.tick.singleflight.enforces() && !cfg.resident;
        let running = Arc::new(AtomicUsize::new(0));
        if park {
            ticks.source.park().await;
        }
        let mut busy = Busy::default();
        if cfg.resident {
            tasks.spawn(this.clone().resident(stop.clone()));
        }
        let mut next_beat = tokio::time::Instant::now();
        tracing::info!(
            queue = %ticks.tick.queue,
            interval_s = cfg.interval.as_secs(),
            workers,
            singleflight = ticks.tick.singleflight.as_str(),
            atomic_claim = ticks.tick.atomic_claim.as_str(),
            "beat started"
        );
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_beat) => {
                    next_beat = tokio::time::Instant::now() + jittered(cfg.interval);
                    let probe = match this.gate.verdict() {
                        OutageVerdict::Run => false,
                        OutageVerdict::Probe => true,
                        OutageVerdict::Wait { .. } => {
                            tracing::debug!(queue = %ticks.tick.queue, "beat starts no tick: the claim store is down");
                            this.gate.claims_down_tick(Duration::ZERO);
                            ticks.source.park().await;
                            continue;
                        }
                    };
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        busy.beat_lost(workers);
                        if probe {
                            // Probe now rather than lose the turn; a failed probe is a beat
                            // that found the claim store down.
                            let started = ticks.clock.now();
                            if !this.gate.probe().await {
                                this.gate.claims_down_tick(ticks.clock.now().saturating_since(started));
                            }
                        }
                        continue;
                    };
                    next_id += 1;
                    let (id, this, stop, held, running) = (next_id, this.clone(), stop.clone(), held.clone(), running.clone());
                    tasks.spawn(async move {
                        let ticks = &this.ticks;
                        let started = ticks.clock.now();
                        if probe && !this.gate.probe().await {
                            this.gate.claims_down_tick(ticks.clock.now().saturating_since(started));
                            drop(permit);
                            return;
                        }
                        let token = ticks.token();
                        if ticks.tick.singleflight != Switch::Off {
                            held.lock().insert(id, token.clone());
                        }
                        running.fetch_add(1, Ordering::AcqRel);
                        let report = this.watched(&ticks.tick, &token, &stop, "tick").await;
                        // The last tick to end parks the source (one still draining keeps it).
                        if running.fetch_sub(1, Ordering::AcqRel) == 1 && park {
                            ticks.source.park().await;
                        }
                        held.lock().remove(&id);
                        this.report(&report, false);
                        this.gate.after_tick(&report, &token);
                        drop(permit);
                    });
                }
                Some(done) = tasks.join_next(), if !tasks.is_empty() => log_join(done),
                () = &mut shutdown => break,
            }
        }
        this.closing.store(true, Ordering::Release);
        this.shut_down(tasks, &stop, &held).await;
    }

    /// A tick of `cfg`, logging its progress every [`PROGRESS_EVERY`] while it runs.
    async fn watched(&self, cfg: &TickConfig, token: &LeaseToken, stop: &Arc<AtomicBool>, what: &str) -> TickReport {
        let control = TickControl::stopped_by(stop.clone());
        let ports = self.ticks.ports();
        let tick = drain_core::tick::run_tick(cfg, &ports, token, &control);
        let mut tick = std::pin::pin!(tick);
        let started = tokio::time::Instant::now();
        let mut every = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            tokio::select! {
                report = &mut tick => return report,
                _ = every.tick() => tracing::info!(
                    target: "drain::tick",
                    queue = %cfg.queue,
                    running_s = started.elapsed().as_secs(),
                    received = control.received(),
                    submitted = control.submitted(),
                    "{what} still running after {} s: {} received, {} submitted so far",
                    started.elapsed().as_secs(),
                    control.received(),
                    control.submitted()
                ),
            }
        }
    }

    /// Log a report, then hand it to the callback.
    fn report(&self, report: &TickReport, resident: bool) {
        log_report(report, resident);
        if let Some(f) = &self.on_report {
            f(report);
        }
    }

    async fn shut_down(&self, mut tasks: JoinSet<()>, stop: &AtomicBool, held: &RunningLeases) {
        let grace = self.config.grace;
        tracing::info!(
            running = tasks.len(),
            grace_s = grace.as_secs(),
            "shutdown: beat stopped; waiting for running ticks"
        );
        if tokio::time::timeout(grace, all_done(&mut tasks)).await.is_err() {
            tracing::warn!(
                running = tasks.len(),
                "grace period over: stopping ticks (unsubmitted messages are abandoned)"
            );
            stop.store(true, Ordering::Release);
            if tokio::time::timeout(STOP_BOUND, all_done(&mut tasks)).await.is_err() {
                tracing::warn!(running = tasks.len(), "ticks did not stop in time: aborting them");
                tasks.abort_all();
                all_done(&mut tasks).await;
            }
        }
        stop.store(true, Ordering::Release);
        let leftovers: Vec<LeaseToken> = held.lock().drain().map(|(_, t)| t).collect();
        let key = LeaseName::queue(self.ticks.tick.queue.as_str());
        for (token, leases) in leftovers.into_iter().filter_map(|t| self.ticks.leases.as_ref().map(|l| (t, l))) {
            match leases.release(&key, &token).await {
                Ok(r) => tracing::info!(result = ?r, "released the lease of an aborted tick"),
                Err(e) => tracing::warn!("could not release an aborted tick's lease ({e}); its TTL frees it"),
            }
        }
        tracing::info!("shutdown complete");
    }

    /// The resident consumer: one in-process receive loop (at most one per process),
    /// no lease; the atomic claim covers its overlap with beat ticks. While the claim
    /// store is down it receives nothing: it waits out the gate's back-off, then
    /// probes the store.
    async fn resident(self: Arc<Self>, stop: Arc<AtomicBool>) {
        static RESIDENT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let Ok(_guard) = RESIDENT.try_lock() else {
            tracing::warn!("a resident consumer already runs in this process");
            return;
        };
        let ticks = &self.ticks;
        let mut cfg = ticks.tick.clone();
        cfg.singleflight = Switch::Off;
        cfg.max_batches = Some(1);
        cfg.kind = TickKind::Resident;
        tracing::info!(queue = %cfg.queue, "resident consumer started");
        while !stop.load(Ordering::Acquire) && !self.closing.load(Ordering::Acquire) {
            match self.gate.verdict() {
                OutageVerdict::Run => {}
                OutageVerdict::Probe => {
                    self.gate.probe().await;
                    continue;
                }
                OutageVerdict::Wait { until } => {
                    ticks.source.park().await;
                    let wait = until.saturating_since(ticks.clock.now()).max(Duration::from_millis(10));
                    // Short naps, so a shutdown is noticed within a second.
                    tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                    continue;
                }
            }
            let token = ticks.token();
            let report = self.watched(&cfg, &token, &stop, "resident batch").await;
            self.report(&report, true);
            self.gate.after_tick(&report, &token);
            if report.error.is_some() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Leases held by running ticks, so a tick aborted at shutdown still gets released.
#[derive(Default)]
struct RunningLeases(Mutex<HashMap<u64, LeaseToken>>);

impl RunningLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, LeaseToken>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One line per tick: a summary with counts (`report`, the JSON line), a warning whose
/// `problems` field says in words what went wrong, when something did. The message
/// stays `tick done` / `resident batch` either way, for whoever greps it.
fn log_report(report: &TickReport, resident: bool) {
    let json = serde_json::to_string(report).unwrap_or_default();
    let problems = report.problems().join("; ");
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

/// `interval` times a factor drawn from [0.5, 1.5): one tick per interval on average,
/// but the beats of several processes never stay in phase. With single-flight, a
/// process whose beat kept falling inside other holders' ticks never ran one, and the
/// messages its receiver had prefetched stayed unacknowledged for as long as that
/// lasted (found by `tests/fleet_amqp.rs`).
fn jittered(interval: Duration) -> Duration {
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
        // The panic's own report (printed when it happened) says why; its message may
        // quote a secret, which only the process's panic hook knows how to mask.
        tracing::error!("a tick panicked (its lease was released first); see the panic report above");
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

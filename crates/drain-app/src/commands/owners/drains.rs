//! `drain owners`: owner drains on a real store (Redis or PostgreSQL), driven by
//! drain-core's admission scheduler and driver (the shape of the `drain run --owners`
//! demo, with real work).
//!
//! Each owner's items wait in its backlog in the store (`backlog`: Redis lists beside
//! the owner's claim, or drain's tables on PostgreSQL). A turn takes the owner's claim
//! with `LeaseStore::acquire` on `LeaseName::owner` (a lost race is `ClaimBusy`),
//! takes a batch (up to `--batch` items moved into flight, or, when a batch a failed
//! or killed turn took is still in flight, that batch again), works it, and records
//! it (each item counted once as it leaves flight, in the same step: a count above 1
//! would be an item recorded twice). No item is ever out of both its backlog and
//! flight without being recorded; an item whose turn died after its work but before
//! its record is worked again, and recorded once. Then the turn releases the claim
//! and reports `Productive { more }` while the batch came back full. A pass every
//! `pass` reads which owners have items in one round trip and requests every
//! owner with items, so processes started together contend for the same owners; when
//! all are empty the driver shuts down (running turns finish) and the process
//! reports. An intent the scheduler hands back (its retry timers are at the cap)
//! waits for the next pass, never straight back into the scheduler. A permanent
//! store error (a missing right) stops the run: retrying cannot help, and nothing is
//! lost. `wake` decides whether the release wake-up acts (waiters, one wake per
//! release); drain-runtime's `CountedPeeks` and `CountedTurns` count for the report.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use drain_core::admission::{DriverPorts, OwnerId, OwnerTurns, Scheduler, TurnOutcome, Worked, drive};
use drain_core::layer::Forward;
use drain_core::ports::{DrainStamps, LeaseStore, OwnerClaims, ReleaseWake};
use drain_core::{PortError, Switch};
use drain_runtime::{CountedPeeks, CountedTurns, owner_passes};
use rand::rngs::{SmallRng, StdRng};
use rand::seq::SliceRandom;
use serde::Serialize;
use tokio::sync::watch;

use super::backlog::Backlogs;
use super::keys::OwnerKeys;
use crate::compose::Runtime;

/// The workload's shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Owners `owner-0` … `owner-<owners-1>`.
    pub(crate) owners: usize,
    /// Items popped per turn, at most.
    pub(crate) batch: usize,
    /// Simulated work per item, inside the claim.
    pub(crate) item_delay: Duration,
    /// Time between two passes over the backlogs.
    pub(crate) pass: Duration,
    /// How long a turn's claim lives if the process dies holding it.
    pub(crate) claim_ttl: Duration,
    /// Report when each batch was recorded (`recorded_at`), for item latencies.
    pub(crate) item_times: bool,
}

/// What one process did, printed as one JSON line.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    /// `PROJECTION_DRAIN_CLAIM_AWARE`.
    pub(crate) claim_aware: &'static str,
    /// `PROJECTION_DRAIN_RELEASE_WAKE` (acts only with claim-aware on).
    pub(crate) release_wake: &'static str,
    /// `PROJECTION_DRAIN_SKIP_SERVED` (acts only with claim-aware on: the marks come
    /// with the peeks).
    pub(crate) skip_served: &'static str,
    /// Owners served.
    pub(crate) owners: usize,
    /// Items this process recorded as processed.
    pub(crate) processed: u64,
    /// Items of batches a failed or killed turn had taken and not recorded, which
    /// this process took again.
    pub(crate) recovered: u64,
    /// Turns run (every outcome).
    pub(crate) turns: u64,
    /// Turns that lost the race for the owner's claim.
    pub(crate) claim_busy: u64,
    /// Turns that did work.
    pub(crate) productive: u64,
    /// Turns that found the backlog empty.
    pub(crate) done: u64,
    /// Turns that failed (store errors).
    pub(crate) failed: u64,
    /// Owners peeked by admission.
    pub(crate) peeks: u64,
    /// Peek round trips (batches).
    pub(crate) peek_round_trips: u64,
    /// Release notifications this process heard (it was the waiter a release woke).
    pub(crate) releases_heard: u64,
    /// Claim waits those notifications ended (`Woken::Queued`; in shadow, would have).
    pub(crate) release_wakes: u64,
    /// Requests dropped because a drain that began after them served them (in
    /// shadow, would have been).
    pub(crate) skipped_served: u64,
    /// Releases of this process that notified a waiter.
    pub(crate) wakes_sent: u64,
    /// Times the release subscription was lost and made again.
    pub(crate) subscriber_reconnects: u64,
    /// Passes over the backlogs.
    pub(crate) passes: u64,
    /// Intents handed off by the scheduler (timer cap, shutdown).
    pub(crate) handed_off: u64,
    /// From the first pass until the driver stopped.
    pub(crate) drain_ms: u64,
    /// When the first pass began, in milliseconds since the Unix epoch.
    pub(crate) started_unix_ms: u64,
    /// When this process recorded its last item, in milliseconds since the Unix
    /// epoch (0: none): the fleet's drain time is the latest of these, minus the
    /// fleet's start, free of the pass interval that `drain_ms` is quantised by.
    pub(crate) last_item_unix_ms: u64,
    /// Every backlog and in-flight list was empty (false: stopped by a signal or an
    /// error).
    pub(crate) complete: bool,
    /// With `--item-times`: each recorded batch as `[unix ms, items]`, in the order
    /// recorded (an item's latency is its batch's time less the fleet's start).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) recorded_at: Vec<(u64, u64)>,
    /// Why the run stopped early: a permanent store error (the items are safe in
    /// their backlogs and in-flight lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

#[derive(Default)]
struct Counters {
    processed: AtomicU64,
    recovered: AtomicU64,
    passes: AtomicU64,
    handed_off: AtomicU64,
    last_item_unix_ms: AtomicU64,
    recorded_at: Mutex<Vec<(u64, u64)>>,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn unix_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

/// The work of one turn on an owner's backlog, run by drain-core's `OwnerTurns`
/// while the turn holds the owner's claim.
struct Batches<B> {
    backlogs: B,
    options: Options,
    counters: Arc<Counters>,
}

impl<B: Backlogs> Batches<B> {
    /// Take a batch (or the one a failed turn left in flight), work it, record it;
    /// how many items it held. On an error the batch stays in the in-flight list for
    /// the owner's next turn.
    async fn work(&self, owner: &OwnerId) -> Result<usize, PortError> {
        let batch = self.backlogs.take_batch(owner, self.options.batch).await?;
        let n = batch.items.len();
        if n == 0 {
            return Ok(0);
        }
        if batch.recovered {
            bump(&self.counters.recovered, n as u64);
            tracing::debug!(owner = %owner, items = n, "taking again a batch a failed or killed turn left in flight");
        }
        if !self.options.item_delay.is_zero() {
            tokio::time::sleep(self.options.item_delay.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))).await;
        }
        let recorded = self.backlogs.record_batch(owner, &batch.items).await?;
        if recorded < n as u64 {
            // Our claim expired during the work and another turn took the batch over.
            tracing::debug!(owner = %owner, items = n, recorded, "part of the batch was recorded by another turn");
        }
        bump(&self.counters.processed, recorded);
        let now = unix_ms();
        self.counters.last_item_unix_ms.fetch_max(now, Ordering::Relaxed);
        if self.options.item_times && recorded > 0 {
            self.counters.recorded_at.lock().unwrap_or_else(PoisonError::into_inner).push((now, recorded));
        }
        Ok(n)
    }

    /// One turn's work, as `OwnerTurns` wants it: a full batch may have left items,
    /// a short one emptied the list. A failure is logged here (the turn fails; a
    /// permanent one stops the run, and no item is lost either way).
    async fn turn(&self, owner: &OwnerId) -> Result<Worked, PortError> {
        match self.work(owner).await {
            Ok(n) => Ok(Worked { items: n as u64, more: n >= self.options.batch }),
            Err(e) => {
                if e.is_temporary() {
                    tracing::warn!(owner = %owner, "owner turn failed (its batch stays in flight for the next turn): {e}");
                } else {
                    tracing::error!(owner = %owner, "owner turn failed permanently; stopping (no item is lost): {e}");
                }
                Err(e)
            }
        }
    }
}

/// The store `drain owners` runs on: its owner claims (and their wake-up) and its
/// backlogs; `heard` counts what the release subscriptions heard and how often they
/// reconnected.
pub(crate) struct OwnerStore<S, B, H> {
    pub(crate) claims: S,
    pub(crate) backlogs: B,
    pub(crate) heard: H,
    /// The release wake-up may act (the switches, and the store's rights).
    pub(crate) wake: bool,
}

/// Drain every owner's backlog with the scheduler until all are empty or `shutdown`
/// flips; running turns finish either way.
pub(crate) async fn run<S, B, H>(
    rt: Arc<Runtime>,
    on: OwnerStore<S, B, H>,
    options: Options,
    mut shutdown: watch::Receiver<bool>,
) -> Report
where
    S: LeaseStore + OwnerClaims + ReleaseWake + DrainStamps + Clone,
    B: Backlogs,
    H: Fn() -> (u64, u64),
{
    let c = &rt.config;
    let mut cfg = c.scheduler_config();
    let OwnerStore { claims: store, backlogs, heard, wake } = on;
    if !wake {
        cfg.release_wake = Switch::Off;
    }
    let mut scheduler = Scheduler::new(cfg, rand::make_rng::<SmallRng>());
    let counters = Arc::new(Counters::default());
    let batches = Batches { backlogs, options, counters: counters.clone() };
    let mut turns = OwnerTurns::new(
        &store,
        &*rt.ticks.clock,
        c.instance_id.clone(),
        options.claim_ttl,
        rand::make_rng::<StdRng>(),
        |owner, _| {
            let batches = &batches;
            async move { batches.turn(&owner).await }
        },
    );
    if !wake {
        turns = turns.without_wake();
    }
    let marks = c.skip_served != Switch::Off;
    if !marks {
        turns = turns.without_marks();
    }
    // The peeks read the marks the turns publish (Off: neither, as before the marks).
    let peeks = Forward::new(Arc::new(store.clone()), CountedPeeks::new(marks));
    let observer = CountedTurns::new(rt.ticks.observer.clone());
    let ports = DriverPorts { claims: Some(&peeks), work: &turns, clock: &*rt.ticks.clock, observer: &observer };

    let owners: Vec<OwnerId> = (0..options.owners).map(OwnerKeys::owner).collect();
    let started_unix_ms = AtomicU64::new(0);
    let (requests, passes) = owner_passes(options.pass, || async {
        let _ = started_unix_ms.compare_exchange(0, unix_ms(), Ordering::Relaxed, Ordering::Relaxed);
        bump(&counters.passes, 1);
        // An owner has work while items wait in its backlog or in flight.
        let pending = batches.backlogs.pending(&owners).await?;
        if !pending.iter().any(|&p| p) {
            return Ok(Vec::new());
        }
        // An intent the scheduler handed back (its retry timers are at the cap)
        // waits for this pass, never straight back into the scheduler.
        let handed_off: BTreeSet<OwnerId> = turns.take_handed_off().into_iter().collect();
        bump(&counters.handed_off, handed_off.len() as u64);
        let mut wanted: Vec<OwnerId> = owners
            .iter()
            .zip(&pending)
            .filter(|&(o, &p)| p || handed_off.contains(o))
            .map(|(o, _)| o.clone())
            .collect();
        // Each process in its own order, as independent instances would be.
        wanted.shuffle(&mut rand::rng());
        Ok(wanted)
    });
    let complete = AtomicBool::new(false);
    let mut pass_error = None;
    let stop = async {
        tokio::select! {
            ended = passes => match ended {
                Ok(()) => complete.store(true, Ordering::Relaxed),
                Err(e) => pass_error = Some(e),
            },
            _ = shutdown.wait_for(|s| *s) => {}
        }
    };
    tracing::info!(
        owners = options.owners,
        claim_aware = c.claim_aware.as_str(),
        release_wake = c.release_wake.as_str(),
        skip_served = c.skip_served.as_str(),
        waiter = wake,
        batch = options.batch,
        store = %rt.store_name(),
        "owner drains started"
    );
    let start = Instant::now();
    drive(&mut scheduler, ports, requests, stop).await;
    let drain_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    // What the scheduler handed back at its close, too.
    let handed_off = load(&counters.handed_off) + turns.take_handed_off().len() as u64;
    let (releases_heard, subscriber_reconnects) = if wake { heard() } else { (0, 0) };
    let recorded_at = std::mem::take(&mut *counters.recorded_at.lock().unwrap_or_else(PoisonError::into_inner));
    Report {
        claim_aware: c.claim_aware.as_str(),
        release_wake: c.release_wake.as_str(),
        skip_served: c.skip_served.as_str(),
        owners: options.owners,
        processed: load(&counters.processed),
        recovered: load(&counters.recovered),
        turns: observer.all_turns(),
        claim_busy: observer.turns(TurnOutcome::ClaimBusy),
        productive: observer.turns(TurnOutcome::Productive { more: false }),
        done: observer.turns(TurnOutcome::Done),
        failed: observer.turns(TurnOutcome::Failed),
        peeks: peeks.hooks().owners(),
        peek_round_trips: peeks.hooks().round_trips(),
        releases_heard,
        release_wakes: observer.release_wakes(),
        skipped_served: observer.skipped_served(),
        wakes_sent: turns.wakes_sent(),
        subscriber_reconnects,
        passes: load(&counters.passes),
        handed_off,
        drain_ms,
        started_unix_ms: load(&started_unix_ms),
        last_item_unix_ms: load(&counters.last_item_unix_ms),
        complete: complete.load(Ordering::Relaxed),
        recorded_at,
        error: turns.fatal().or(pass_error).map(|e| e.to_string()),
    }
}

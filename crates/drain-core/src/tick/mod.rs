//! One beat tick: the single-flight lease around a drain of the
//! queue, with renewal, fencing, and the per-message atomic claim.
//!
//! ```text
//! lease Off ───────────────────────────────► drain ─► report {"lease":"off"}
//! lease On ─► acquire ─┬─ Acquired{fence} ─► drain ∥ renew every TTL/3 ─► release ─► report {"lease":"held","fence":n}
//!                      ├─ Busy ────────────► report {"skipped":"locked"}   (no receive, no release)
//!                      └─ Err ─────────────► drain ─► report {"lease":"fail_open"}
//!                         (a timeout: the acquire may have landed late, so a
//!                          best-effort release with this tick's token follows the drain)
//! ```
//!
//! The release runs on every path that ends the drain: success, a source error,
//! a lost lease, and a panic in a port (the panic is re-raised after the release).
//! A tick future that is dropped mid-drain cannot release; the TTL frees the lease.
//!
//! **Degraded stores.** A store call on the tick's path (acquire, claim, settle) that
//! timed out marks that store down for the rest of the tick, so a frozen store costs
//! a tick one timeout, not one per operation (when one object serves both lease and
//! claims, for both; `health`). Renewals run beside the drain and never delay it. A
//! claim store that fails, or is known down, ends the receiving: what the tick holds
//! is abandoned and nothing more is received, since every receive of a message that
//! cannot be claimed costs it a delivery. Across ticks, [`Outage`] keeps a process
//! from receiving at all until [`probe_claims`] finds the store answering again.

mod drain;
mod health;
mod outage;
mod planner;
mod report;
mod window;

use std::panic::resume_unwind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub use outage::{Outage, OutagePolicy, OutageVerdict, StaleClaims, Step};
pub use report::{ClaimHealth, DrainStats, TickReport};
pub use window::InFlight;

use crate::error::{ErrorKind, PortError};
use crate::event::{Event, LeaseOp, TickKind, TickOutcome};
use crate::guard::{Ended, LeaseGuard, LeaseStatus, Start};
use crate::ports::{
    ClaimState, ClaimStore, Clock, Fence, LeaseName, LeaseStore, MessageId, MessageSource, Observer, SettleAction,
    Settlement, Submitter,
};
use crate::switch::Switch;
use crate::tick::health::Health;
use crate::token::LeaseToken;

/// Settings of one queue's tick.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TickConfig {
    /// The queue drained.
    pub queue: String,
    /// The single-flight lease: Off never touches the lease store, Shadow takes the
    /// lease and counts a skip it would make, On skips while another tick holds it.
    pub singleflight: Switch,
    /// How long a lease lives unless renewed: the backstop that frees the lease of a
    /// holder that died.
    pub lease_ttl: Duration,
    /// Renew the lease every `lease_ttl / 3` while the drain runs (only On renews).
    pub renew: Switch,
    /// The per-message claim before a submit (fails closed when On).
    pub atomic_claim: Switch,
    /// How long a `done` claim suppresses duplicates.
    pub claim_done_ttl: Duration,
    /// How long a `pending` claim lives before a redelivery may take it over; it
    /// must exceed the longest submit.
    pub claim_pending_ttl: Duration,
    /// Messages processed at once: with [`InFlight::Fixed`], submits in flight; with
    /// [`InFlight::Adaptive`], the least the window shrinks to.
    pub concurrency: usize,
    /// How many messages are in flight to the target at once: a window that adapts
    /// to the target (the default), or `concurrency`.
    pub in_flight: InFlight,
    /// Messages processed at once while this tick holds the single-flight lease (On):
    /// the capacity of the workers that would otherwise have raced it for the queue,
    /// which the lease leaves idle (`None`: `concurrency`).
    pub held_concurrency: Option<usize>,
    /// Messages asked for per receive ([`InFlight::Adaptive`]: the window's start).
    pub batch: usize,
    /// The longest one receive waits.
    pub max_wait: Duration,
    /// Stop after this many receives even if the queue is not empty (`None`: until a
    /// receive comes back empty).
    pub max_batches: Option<u32>,
    /// What runs this tick (label `kind` of the tick metric): the beat, or the
    /// resident consumer's batches.
    pub kind: TickKind,
}

impl TickConfig {
    /// The adaptive window's default maximum. A drain holds at most three batches
    /// of the window (one received and claimed, one in flight, one being settled at
    /// the source), so the largest message times three times this bounds the memory
    /// of what is in flight, plus whatever credit the source keeps open (`drain run`
    /// keeps this much). The first message waits for no more than the first receive
    /// of `batch`: the window only grows once full steps showed it paying.
    pub const MAX_IN_FLIGHT: usize = 512;

    /// The defaults for `queue`: single-flight off; a 120 s lease, renewed; the
    /// claim on, `done` for a day, `pending` for 5 min; an adaptive window of at
    /// most [`TickConfig::MAX_IN_FLIGHT`] messages in flight starting at 32 per
    /// receive, a receive waiting at most 1 s. (drain's binary uses the same
    /// defaults; its registry is tested against these.)
    #[must_use]
    pub fn new(queue: impl Into<String>) -> Self {
        TickConfig {
            queue: queue.into(),
            singleflight: Switch::Off,
            lease_ttl: Duration::from_secs(120),
            renew: Switch::On,
            atomic_claim: Switch::On,
            claim_done_ttl: Duration::from_secs(86_400),
            claim_pending_ttl: Duration::from_secs(300),
            concurrency: 1,
            in_flight: InFlight::Adaptive { max: Self::MAX_IN_FLIGHT },
            held_concurrency: None,
            batch: 32,
            max_wait: Duration::from_millis(1_000),
            max_batches: None,
            kind: TickKind::Beat,
        }
    }

    /// With the single-flight lease at `mode`.
    #[must_use]
    pub fn singleflight(mut self, mode: Switch) -> Self {
        self.singleflight = mode;
        self
    }

    /// With the per-message claim at `mode`.
    #[must_use]
    pub fn atomic_claim(mut self, mode: Switch) -> Self {
        self.atomic_claim = mode;
        self
    }

    /// With leases of `ttl`.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// With `n` messages processed at once, a fixed window ([`InFlight::Fixed`]).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self.in_flight = InFlight::Fixed;
        self
    }

    /// With receives of at most `n` messages, each waiting at most `max_wait`.
    #[must_use]
    pub fn receive(mut self, n: usize, max_wait: Duration) -> Self {
        (self.batch, self.max_wait) = (n, max_wait);
        self
    }
}

/// The ports a tick uses. When the lease store and the claim store are the same
/// object (one store serving both), a timeout of either counts for both for the rest
/// of the tick. The lease store is needed only while single-flight
/// computes (On or Shadow), the claim store only while the atomic claim does:
/// [`TickPorts::missing`] says what a configuration lacks. A tick that finds a needed
/// port missing treats it as a store that cannot answer: the lease fails open, the
/// claims fail closed, and the report's `error` names the port.
#[derive(Clone, Copy)]
pub struct TickPorts<'a> {
    /// Single-flight leases.
    pub leases: Option<&'a dyn LeaseStore>,
    /// Per-message claims.
    pub claims: Option<&'a dyn ClaimStore>,
    /// The queue.
    pub source: &'a dyn MessageSource,
    /// Where messages are resubmitted.
    pub target: &'a dyn Submitter,
    /// Time.
    pub clock: &'a dyn Clock,
    /// Decisions.
    pub observer: &'a dyn Observer,
}

impl<'a> TickPorts<'a> {
    /// The ports every tick needs; add stores with [`TickPorts::leases`] and
    /// [`TickPorts::claims`].
    #[must_use]
    pub fn new(
        source: &'a dyn MessageSource,
        target: &'a dyn Submitter,
        clock: &'a dyn Clock,
        observer: &'a dyn Observer,
    ) -> Self {
        TickPorts { leases: None, claims: None, source, target, clock, observer }
    }

    /// With `store` for single-flight leases.
    #[must_use]
    pub fn leases(mut self, store: &'a dyn LeaseStore) -> Self {
        self.leases = Some(store);
        self
    }

    /// With `store` for per-message claims.
    #[must_use]
    pub fn claims(mut self, store: &'a dyn ClaimStore) -> Self {
        self.claims = Some(store);
        self
    }

    /// The ports `cfg` needs that are missing (`"lease store"`, `"claim store"`);
    /// empty when the tick has all it needs.
    #[must_use]
    pub fn missing(&self, cfg: &TickConfig) -> Vec<&'static str> {
        let mut out = Vec::new();
        if cfg.singleflight.computes() && self.leases.is_none() {
            out.push(NO_LEASE_STORE);
        }
        if cfg.atomic_claim.computes() && self.claims.is_none() {
            out.push(NO_CLAIM_STORE);
        }
        out
    }
}

const NO_LEASE_STORE: &str = "lease store";
const NO_CLAIM_STORE: &str = "claim store";

/// Run one tick with `token` (fresh for this tick: [`LeaseToken::generate`]), under
/// `control` (a stop flag for shutdown, and counts to read while it runs; pass
/// `&TickControl::default()` when nothing watches).
///
/// The single-flight lease is a [`LeaseGuard`] of [`LeaseName::queue`] failing open
/// and telling the drain of a loss: a lost lease (a renewal found it gone, or none
/// was confirmed by its deadline) stops the drain before its next receive or submit.
/// Once `control` is stopped (a shutdown past its grace period), no further receive or
/// submit starts, the messages of the current batch that were not submitted are
/// abandoned, claims are settled, the lease is released, and the report says
/// `"stopped":true`.
///
/// Never returns an error: every failure is a decision in the report (fail open on
/// the lease, fail closed on claims, a source error ends the drain early). A panic
/// in a port is re-raised after the lease is released.
pub async fn run_tick(
    cfg: &TickConfig,
    ports: &TickPorts<'_>,
    token: &LeaseToken,
    control: &TickControl,
) -> TickReport {
    let start = ports.clock.now();
    let health = Health::new(ports);
    let mode = cfg.singleflight;
    let finish = |outcome: TickOutcome| {
        let duration = ports.clock.now().saturating_since(start);
        ports.observer.observe(&Event::Tick { queue: &cfg.queue, outcome, mode, kind: cfg.kind, duration });
    };
    let mut guard = LeaseGuard::over(ports.leases, ports.clock, LeaseName::queue(cfg.queue.as_str()), cfg.lease_ttl)
        .observer(ports.observer)
        .mode(mode)
        .fail_open()
        .tell_on_loss();
    if !cfg.renew.enforces() {
        guard = guard.without_renewal();
    }

    let begun = match guard.begin(token).await {
        Start::Run(begun) => begun,
        Start::Skipped { .. } => {
            finish(TickOutcome::SkippedLocked);
            return TickReport::skipped_locked(&cfg.queue);
        }
        // The guard fails open: an acquire error runs the drain without the lease.
        Start::Refused { .. } => unreachable!("a fail-open guard never refuses"),
    };
    if begun.timed_out {
        health.lease_timed_out();
    }
    // The holder drains with the fleet's racing capacity, which the lease would
    // otherwise leave idle.
    let held_cfg;
    let drain_cfg = match cfg.held_concurrency {
        Some(n) if begun.status == LeaseStatus::Held && n > cfg.concurrency => {
            let mut c = cfg.clone();
            c.concurrency = n;
            held_cfg = c;
            &held_cfg
        }
        _ => cfg,
    };
    // A tick that failed open receives for one lease TTL at most: under a steady feed
    // its drain would never end, and the fleet would drain without single-flight and
    // without fences long after the store answered again.
    let until = (begun.status == LeaseStatus::FailOpen).then(|| start + cfg.lease_ttl);
    let drain = drain::Drain::new(drain_cfg, ports, token, &begun.held, control, &health, until);
    let (ended, loss) = guard.keep_while(&begun, token, drain.run()).await;

    // After a timed-out acquire, a best-effort release with this tick's token: if the
    // acquire landed late, the lease no tick holds is freed now instead of skipping
    // every tick until its TTL; if it did not, the compare-and-delete touches nothing.
    // It is the one call made to a store that timed out in this tick: a slow store
    // runs it after the late acquire, which frees the lease; a frozen one costs it one
    // more timeout. A lease we hold on a store that timed out later is left to its TTL.
    if begun.timed_out || (begun.acquired && !health.lease_down()) {
        guard.release(token).await;
    } else if begun.acquired {
        lease_op(cfg, ports, LeaseOp::Release, "error");
    }

    let mut outcome = match ended {
        Ended::Done(outcome) => outcome,
        Ended::Panicked(panic) => resume_unwind(panic),
        Ended::Stopped(..) => unreachable!("the tick's guard tells the drain of a loss"),
    };
    let missing = ports.missing(cfg);
    if !missing.is_empty() && outcome.error.is_none() {
        outcome.error = Some(format!("no {} configured", missing.join(" and no ")));
    }
    let tick_outcome = match begun.status {
        LeaseStatus::FailOpen => TickOutcome::FailOpen,
        LeaseStatus::ShadowWouldSkip => TickOutcome::SkippedLocked,
        _ => TickOutcome::Ran,
    };
    finish(tick_outcome);
    TickReport {
        queue: cfg.queue.clone(),
        skipped: None,
        lease: Some(begun.status),
        fence: begun.held.fence().map(Fence::number),
        stats: Some(outcome.stats),
        lease_lost: loss.is_some(),
        stopped: control.is_stopped(),
        error: outcome.error,
        claims: outcome.claims,
        stale_claims: outcome.stale_claims,
    }
}

/// Stops a running tick from outside, and counts what it received and submitted so
/// far (the binary logs the progress of a long tick).
#[derive(Debug, Default)]
pub struct TickControl {
    stop: Arc<AtomicBool>,
    received: AtomicU64,
    submitted: AtomicU64,
}

impl TickControl {
    /// A control stopped by `stop`, which several ticks may share (a shutdown stops
    /// them all).
    #[must_use]
    pub fn stopped_by(stop: Arc<AtomicBool>) -> Self {
        TickControl { stop, ..TickControl::default() }
    }

    /// Ask the tick to stop: no further receive or submit starts.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether [`TickControl::stop`] was called.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Messages received so far.
    #[must_use]
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Messages submitted so far (counted once their batch is settled).
    #[must_use]
    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Relaxed)
    }

    fn add_received(&self, n: u64) {
        self.received.fetch_add(n, Ordering::Relaxed);
    }

    fn add_submitted(&self, n: u64) {
        self.submitted.fetch_add(n, Ordering::Relaxed);
    }
}

/// The message id of [`probe_claims`]' claim: it starts with a NUL, which no message
/// id a broker hands out does.
const PROBE_ID: &str = "\u{0}drain-probe";

/// A cheap check that the claim store answers claims, receiving nothing: one claim of
/// the probe message of `cfg.queue` (its id is `"\u{0}drain-probe"`; it is a claim of the
/// queue like any other, so it lives where the queue's claims live), released again
/// at once. A probe that finds another prober's pending claim counts as answered.
///
/// # Errors
/// The claim store's error, or a `Protocol` error for an answer of the wrong length.
pub async fn probe_claims(cfg: &TickConfig, claims: &dyn ClaimStore, token: &LeaseToken) -> Result<(), PortError> {
    let id = MessageId::from(PROBE_ID);
    let ttl = cfg.claim_pending_ttl.min(Duration::from_secs(10));
    let states = claims.claim_batch(&cfg.queue, std::slice::from_ref(&id), token, ttl).await?;
    match states.as_slice() {
        [ClaimState::Claimed] => {
            let release = Settlement { id, action: SettleAction::Release };
            claims.settle_batch(&cfg.queue, &[release], token, ttl).await.map(|_| ())
        }
        [_] => Ok(()),
        other => Err(PortError::new(ErrorKind::Protocol, format!("{} answers to one claim", other.len()))),
    }
}

/// Release the claims a failed call of one tick may have taken late (see
/// [`TickReport::stale_claims`]): one settlement call releasing each id with the
/// tick's token. A claim the call never took, or that another holder has, is left
/// alone (the release compares the token). Call it after [`probe_claims`] answered and
/// before receiving again.
///
/// # Errors
/// The claim store's error, or a `Protocol` error for an answer of the wrong length.
pub async fn release_stale_claims(
    cfg: &TickConfig,
    claims: &dyn ClaimStore,
    stale: &StaleClaims,
) -> Result<(), PortError> {
    if stale.ids.is_empty() {
        return Ok(());
    }
    let releases: Vec<Settlement> =
        stale.ids.iter().map(|id| Settlement { id: id.clone(), action: SettleAction::Release }).collect();
    let answers = claims.settle_batch(&cfg.queue, &releases, &stale.token, cfg.claim_done_ttl).await;
    planner::of_length(answers, releases.len(), "releases").map(|_| ())
}

fn lease_op(cfg: &TickConfig, ports: &TickPorts<'_>, op: LeaseOp, result: &'static str) {
    ports.observer.observe(&Event::LeaseOp { op, result, mode: cfg.singleflight });
}

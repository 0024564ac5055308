//! One beat tick: the single-flight lease around a drain of the
//! queue, with renewal, fencing, and the per-message atomic claim.
//!
//! ```text
//! lease Off ───────────────────────────────► drain ─► report {"lease":"off"}
//! lease On ─► acquire ─┬─ Acquired{fence} ─► drain ∥ renew every TTL/3 ─► release ─► report {"lease":"held","fence":n}
//!                      ├─ Held ────────────► report {"skipped":"locked"}   (no receive, no release)
//!                      └─ Err ─────────────► drain ─► report {"lease":"fail_open"}
//!                         (a timeout: the acquire may have landed late, so a
//!                          best-effort release with this tick's token follows the drain)
//! ```
//!
//! The release runs on every path that ends the drain: success, a source error,
//! a lost lease, and a panic in a port (the panic is re-raised after the release).
//! A tick future that is dropped mid-drain cannot release; the TTL frees the lease.

mod drain;
mod report;

use std::panic::{AssertUnwindSafe, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{Either, select};

pub use drain::MISSING_ID_REASON;
pub use report::{DrainStats, LeaseStatus, TickReport};

use crate::error::{ErrorKind, PortError};
use crate::event::{Event, LeaseOp, TickKind, TickOutcome};
use crate::ports::{
    Acquire, ClaimStore, Clock, LeaseName, LeaseStore, MessageSource, Observer, Release, Renew, Submitter,
};
use crate::switch::Switch;
use crate::token::LeaseToken;

/// Settings of one queue's tick (the `SERVICEBUS_*` settings of docs/flags.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickConfig {
    /// The queue drained.
    pub queue: String,
    /// `SERVICEBUS_DRAIN_SINGLEFLIGHT`.
    pub singleflight: Switch,
    /// `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`.
    pub lease_ttl: Duration,
    /// `SERVICEBUS_DRAIN_LEASE_RENEW`.
    pub renew: Switch,
    /// `SERVICEBUS_ATOMIC_CLAIM`.
    pub atomic_claim: Switch,
    /// `SERVICEBUS_ATOMIC_CLAIM_TTL_SECONDS`: how long `done` suppresses duplicates.
    pub claim_done_ttl: Duration,
    /// `SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS`.
    pub claim_pending_ttl: Duration,
    /// `SERVICEBUS_DRAIN_CONCURRENCY`: messages processed at once.
    pub concurrency: usize,
    /// `SERVICEBUS_DRAIN_BATCH`: messages per receive.
    pub batch: usize,
    /// `SERVICEBUS_DRAIN_MAX_WAIT_MS`.
    pub max_wait: Duration,
    /// Stop after this many receives even if the queue is not empty (`None`: until a
    /// receive comes back empty).
    pub max_batches: Option<u32>,
    /// What runs this tick (label `kind` of the tick metric): the beat, or the
    /// resident consumer's batches.
    pub kind: TickKind,
}

impl TickConfig {
    /// The default settings for `queue`.
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
            batch: 32,
            max_wait: Duration::from_millis(1_000),
            max_batches: None,
            kind: TickKind::Beat,
        }
    }
}

/// The ports a tick uses. The lease store is needed only while single-flight
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

/// Run one tick. `token` must be fresh for this tick ([`LeaseToken::generate`]).
///
/// Never returns an error: every failure is a decision in the report (fail open on
/// the lease, fail closed on claims, a source error ends the drain early). A panic
/// in a port is re-raised after the lease is released.
pub async fn run_tick(cfg: &TickConfig, ports: &TickPorts<'_>, token: &LeaseToken) -> TickReport {
    run_tick_until(cfg, ports, token, &AtomicBool::new(false)).await
}

/// [`run_tick`] that also stops cooperatively once `stop` is set (a shutdown past its
/// grace period): no further receive or submit starts, the messages of the current
/// batch that were not submitted are abandoned, claims are settled and the lease is
/// released, and the report says `"stopped":true`.
pub async fn run_tick_until(
    cfg: &TickConfig,
    ports: &TickPorts<'_>,
    token: &LeaseToken,
    stop: &AtomicBool,
) -> TickReport {
    let start = ports.clock.now();
    let key = LeaseName::queue(cfg.queue.as_str());
    let mode = cfg.singleflight;
    let finish = |outcome: TickOutcome| {
        let duration = ports.clock.now().saturating_since(start);
        ports.observer.observe(&Event::Tick { queue: &cfg.queue, outcome, mode, kind: cfg.kind, duration });
    };

    // `timed_out`: the acquire got no answer in time, so it may still have taken the
    // lease with our token (a request is not withdrawn by a client timeout).
    let (status, fence, acquired, timed_out) = match mode {
        Switch::Off => (LeaseStatus::Off, None, false, false),
        Switch::On | Switch::Shadow => match acquire(ports.leases, &key, token, cfg.lease_ttl).await {
            Ok(Acquire::Acquired { fence }) => {
                lease_op(cfg, ports, LeaseOp::Acquire, "acquired");
                let status = if mode.enforces() { LeaseStatus::Held } else { LeaseStatus::ShadowAcquired };
                (status, Some(fence), true, false)
            }
            Ok(Acquire::Held { .. }) => {
                lease_op(cfg, ports, LeaseOp::Acquire, "held");
                if mode.enforces() {
                    finish(TickOutcome::SkippedLocked);
                    return TickReport::skipped_locked(&cfg.queue);
                }
                (LeaseStatus::ShadowWouldSkip, None, false, false)
            }
            Err(e) => {
                lease_op(cfg, ports, LeaseOp::Acquire, "error");
                (LeaseStatus::FailOpen, None, false, e.kind == ErrorKind::Timeout)
            }
        },
    };

    let cancel = AtomicBool::new(false);
    let lost = AtomicBool::new(false);
    let drain =
        drain::Drain { cfg, ports, token, fence: if mode.enforces() { fence } else { None }, cancel: &cancel, stop };
    let drain_fut = AssertUnwindSafe(drain.run()).catch_unwind();
    let result = if let Some(leases) = ports.leases.filter(|_| acquired && cfg.renew.computes()) {
        let renew_fut = renew_loop(cfg, &key, leases, ports, token, &cancel, &lost);
        futures::pin_mut!(drain_fut, renew_fut);
        match select(drain_fut, renew_fut).await {
            Either::Left((result, _)) => result,
            Either::Right(((), drain_fut)) => drain_fut.await,
        }
    } else {
        drain_fut.await
    };

    // After a timed-out acquire, a best-effort release with this tick's token: if the
    // acquire landed late, the lease no tick holds is freed now instead of skipping
    // every tick until its TTL; if it did not, the compare-and-delete touches nothing.
    if let Some(leases) = ports.leases.filter(|_| acquired || timed_out) {
        match leases.release(&key, token).await {
            Ok(Release::Released) => lease_op(cfg, ports, LeaseOp::Release, "released"),
            Ok(Release::NotOwner) => lease_op(cfg, ports, LeaseOp::Release, "not_owner"),
            Err(_) => lease_op(cfg, ports, LeaseOp::Release, "error"),
        }
    }

    let mut outcome = match result {
        Ok(outcome) => outcome,
        Err(panic) => resume_unwind(panic),
    };
    let missing = ports.missing(cfg);
    if !missing.is_empty() && outcome.error.is_none() {
        outcome.error = Some(format!("no {} configured", missing.join(" and no ")));
    }
    let tick_outcome = match status {
        LeaseStatus::FailOpen => TickOutcome::FailOpen,
        LeaseStatus::ShadowWouldSkip => TickOutcome::SkippedLocked,
        _ => TickOutcome::Ran,
    };
    finish(tick_outcome);
    TickReport {
        queue: cfg.queue.clone(),
        skipped: None,
        lease: Some(status),
        fence: if mode.enforces() { fence } else { None },
        stats: Some(outcome.stats),
        lease_lost: lost.load(Ordering::Acquire),
        stopped: stop.load(Ordering::Acquire),
        error: outcome.error,
    }
}

/// Acquire through the lease store, or fail as an unreachable store would when there
/// is none.
async fn acquire(
    leases: Option<&dyn LeaseStore>,
    key: &LeaseName,
    token: &LeaseToken,
    ttl: Duration,
) -> Result<Acquire, PortError> {
    match leases {
        Some(store) => store.acquire(key, token, ttl).await,
        None => Err(PortError::new(ErrorKind::Config, format!("no {NO_LEASE_STORE} configured"))),
    }
}

fn lease_op(cfg: &TickConfig, ports: &TickPorts<'_>, op: LeaseOp, result: &'static str) {
    ports.observer.observe(&Event::LeaseOp { op, result, mode: cfg.singleflight });
}

/// Renew every TTL/3 until the lease is lost. With single-flight and renewal both
/// On, a loss cancels the drain cooperatively (it stops before the next submit or
/// receive); otherwise the loss is only counted. A store error is counted and the
/// next period tries again: a blip is not a loss, and the TTL still runs.
async fn renew_loop(
    cfg: &TickConfig,
    key: &LeaseName,
    leases: &dyn LeaseStore,
    ports: &TickPorts<'_>,
    token: &LeaseToken,
    cancel: &AtomicBool,
    lost: &AtomicBool,
) {
    let period = (cfg.lease_ttl / 3).max(Duration::from_millis(1));
    let mut next = ports.clock.now() + period;
    loop {
        ports.clock.sleep_until(next).await;
        next = ports.clock.now() + period;
        match leases.renew(key, token, cfg.lease_ttl).await {
            Ok(Renew::Renewed) => lease_op(cfg, ports, LeaseOp::Renew, "renewed"),
            Ok(Renew::Lost) => {
                lease_op(cfg, ports, LeaseOp::Renew, "lost");
                ports.observer.observe(&Event::LeaseLost { queue: &cfg.queue });
                lost.store(true, Ordering::Release);
                if cfg.singleflight.enforces() && cfg.renew.enforces() {
                    cancel.store(true, Ordering::Release);
                }
                return;
            }
            Err(_) => lease_op(cfg, ports, LeaseOp::Renew, "error"),
        }
    }
}

//! Every counter exported at 0 for the label sets this process can produce, before
//! the first event: a series that only appears at 1 makes `rate()` and `increase()`
//! blind to the first loss, fail-open or claim error (Prometheus sees no change from
//! "absent" to 1), so alerts built on them could not fire on a process's first one.

use drain_core::Switch;
use drain_core::admission::TurnOutcome;
use drain_core::event::{LeaseOp, MessageOutcome, SkipReason, TickKind, TickOutcome};
use metrics::{counter, gauge};

/// What this process runs, and so which label sets it can produce.
#[derive(Debug, Clone, Copy, Default)]
pub struct Known<'a> {
    /// The tick path (beat ticks, and the resident consumer when `resident`).
    pub ticks: Option<KnownTicks<'a>>,
    /// Owner drains, under this `PROJECTION_DRAIN_CLAIM_AWARE` position.
    pub owners: Option<Switch>,
}

/// The tick path's labels: its queue and the switch positions it runs under.
#[derive(Debug, Clone, Copy)]
pub struct KnownTicks<'a> {
    /// The queue drained.
    pub queue: &'a str,
    /// `SERVICEBUS_DRAIN_SINGLEFLIGHT` (label `mode` of ticks and lease operations).
    pub singleflight: Switch,
    /// `SERVICEBUS_ATOMIC_CLAIM` (label `mode` of messages).
    pub atomic_claim: Switch,
    /// The resident consumer runs too (its batches: `kind="resident"`, `mode="off"`).
    pub resident: bool,
}

/// Register every counter of `known` at 0 (and the owner gauges), so each series is
/// on `/metrics` from the first scrape. Counters already counting keep their value.
pub fn export_known(known: &Known<'_>) {
    if let Some(t) = known.ticks {
        let queue = t.queue.to_owned();
        let mode = t.singleflight.as_str();
        for outcome in TickOutcome::ALL {
            counter!("drain_ticks_total", "queue" => queue.clone(), "outcome" => outcome.as_str(), "mode" => mode, "kind" => TickKind::Beat.as_str())
                .increment(0);
        }
        if t.resident {
            // The resident consumer takes no lease: its batches always run, as `off`.
            counter!("drain_ticks_total", "queue" => queue.clone(), "outcome" => TickOutcome::Ran.as_str(), "mode" => Switch::Off.as_str(), "kind" => TickKind::Resident.as_str())
                .increment(0);
        }
        if t.singleflight != Switch::Off {
            for op in LeaseOp::ALL {
                for &result in op.results() {
                    counter!("drain_lease_ops_total", "op" => op.as_str(), "result" => result, "mode" => mode)
                        .increment(0);
                }
            }
        }
        counter!("drain_lease_lost_total").increment(0);
        for outcome in MessageOutcome::ALL {
            counter!("drain_messages_total", "queue" => queue.clone(), "outcome" => outcome.as_str(), "mode" => t.atomic_claim.as_str())
                .increment(0);
        }
    }
    if let Some(mode) = known.owners {
        for reason in SkipReason::ALL {
            counter!("drain_owner_skipped_total", "reason" => reason.as_str(), "mode" => mode.as_str()).increment(0);
        }
        counter!("drain_owner_claim_busy_backoff_total", "mode" => mode.as_str()).increment(0);
        counter!("drain_owner_retry_overflow_total").increment(0);
        counter!("drain_owner_peek_errors_total").increment(0);
        for outcome in TurnOutcome::ALL {
            counter!("drain_owner_turns_total", "outcome" => outcome.as_str()).increment(0);
        }
        gauge!("drain_owner_queue_depth").increment(0.0);
        gauge!("drain_owner_retry_timers").increment(0.0);
    }
}

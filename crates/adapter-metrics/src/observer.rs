use drain_core::Switch;
use drain_core::event::Event;
use drain_core::ports::Observer;
use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

/// Turns every drain-core [`Event`] into the metric of docs/metrics.md it stands for.
///
/// Stateless and cheap: each event is one counter increment, gauge set or histogram
/// record on the global recorder (a no-op until [`crate::install`] ran).
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver;

impl Observer for MetricsObserver {
    fn observe(&self, event: &Event<'_>) {
        match *event {
            Event::Tick { queue, outcome, mode, kind, duration } => {
                counter!("drain_ticks_total", "queue" => queue.to_owned(), "outcome" => outcome.as_str(), "mode" => mode.as_str(), "kind" => kind.as_str())
                    .increment(1);
                histogram!("drain_tick_duration_seconds", "kind" => kind.as_str()).record(duration.as_secs_f64());
            }
            Event::LeaseOp { op, result, mode } => {
                counter!("drain_lease_ops_total", "op" => op.as_str(), "result" => result, "mode" => mode.as_str())
                    .increment(1);
            }
            Event::LeaseLost { .. } => counter!("drain_lease_lost_total").increment(1),
            Event::Message { queue, outcome, mode } => {
                counter!("drain_messages_total", "queue" => queue.to_owned(), "outcome" => outcome.as_str(), "mode" => mode.as_str())
                    .increment(1);
            }
            Event::OwnerSkipped { reason, mode } => {
                counter!("drain_owner_skipped_total", "reason" => reason.as_str(), "mode" => mode.as_str())
                    .increment(1);
            }
            Event::ClaimBusyBackoff { mode } => {
                counter!("drain_owner_claim_busy_backoff_total", "mode" => mode.as_str()).increment(1);
            }
            Event::RetryOverflow => counter!("drain_owner_retry_overflow_total").increment(1),
            Event::PeekError => counter!("drain_owner_peek_errors_total").increment(1),
            Event::OwnerTurn { outcome } => {
                counter!("drain_owner_turns_total", "outcome" => outcome.as_str()).increment(1);
            }
            Event::OwnerQueueDepth(n) => gauge!("drain_owner_queue_depth").set(n as f64),
            Event::RetryTimers(n) => gauge!("drain_owner_retry_timers").set(n as f64),
            Event::StoreOp { op, duration } => {
                histogram!("drain_redis_op_duration_seconds", "op" => op).record(duration.as_secs_f64());
            }
            Event::SwitchMode { switch, mode } => {
                for m in [Switch::Off, Switch::Shadow, Switch::On] {
                    let v = if m == mode { 1.0 } else { 0.0 };
                    gauge!("drain_switch_mode", "switch" => switch, "mode" => m.as_str()).set(v);
                }
            }
            // New event kinds are added to drain-core first; until mapped here they are
            // not exported (the keep-list is the contract).
            _ => {}
        }
    }
}

/// Register HELP text and units for every kept metric.
pub(crate) fn describe() {
    describe_counter!(
        "drain_ticks_total",
        "Ticks by queue, outcome (ran, skipped_locked, fail_open), mode and kind (beat, resident)."
    );
    describe_counter!("drain_lease_ops_total", "Single-flight lease operations by op, result and mode.");
    describe_counter!(
        "drain_lease_lost_total",
        "Held leases lost (a renewal found the lease gone, or none was confirmed by its deadline); the work under it was stopped."
    );
    describe_counter!("drain_owner_skipped_total", "Owner launches deferred by admission, by reason.");
    describe_counter!("drain_owner_claim_busy_backoff_total", "Claim-busy turns put on a jittered retry timer.");
    describe_counter!("drain_owner_retry_overflow_total", "Retry timers beyond the cap, handed back to the caller.");
    describe_counter!("drain_owner_peek_errors_total", "Admission peeks that failed; the owner was admitted.");
    describe_counter!("drain_owner_turns_total", "Owner turns by outcome.");
    describe_counter!("drain_messages_total", "Received messages by queue and outcome.");
    describe_gauge!("drain_owner_queue_depth", "Owners waiting to launch.");
    describe_gauge!("drain_owner_retry_timers", "Pending owner retry timers.");
    describe_histogram!("drain_tick_duration_seconds", Unit::Seconds, "Duration of a tick, by kind (beat, resident).");
    describe_histogram!(
        "drain_redis_op_duration_seconds",
        Unit::Seconds,
        "Duration of one store round trip (Redis or PostgreSQL), by op."
    );
    describe_gauge!("drain_switch_mode", "1 for each switch's effective position, 0 for the others.");
}

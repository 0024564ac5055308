//! The app's observers: metrics plus logs of the decisions an operator must see.

use drain_core::event::{Event, LeaseOp, MessageOutcome, TickOutcome};
use drain_core::ports::Observer;

/// Logs decisions at debug, one line each, and the few that no tick summary
/// carries as warnings. A tick's outcome (fail-open, messages abandoned because the
/// claim store failed, failed submits, dead letters, expired claims, a lost lease) is
/// logged once per tick by the beat, with counts (`beat::log_report`), never once per
/// message: an outage would otherwise log a line for every message it touched.
#[derive(Debug, Default)]
pub(crate) struct LogObserver;

impl Observer for LogObserver {
    fn observe(&self, event: &Event<'_>) {
        match *event {
            Event::Tick { queue, outcome: TickOutcome::FailOpen, .. } => {
                tracing::debug!(queue, "lease store unavailable on acquire; draining without the lease (fail-open)");
            }
            Event::LeaseOp { op: LeaseOp::Acquire, result: "acquired", .. } => tracing::debug!("lease acquired"),
            Event::LeaseOp { op: LeaseOp::Release, result: "released", .. } => tracing::debug!("lease released"),
            Event::LeaseOp { op: LeaseOp::Release, result: "not_owner", .. } => {
                tracing::debug!("lease release found the lease expired or taken; nothing deleted");
            }
            Event::LeaseOp { op: LeaseOp::Release, result: "error", .. } => {
                tracing::debug!("lease release failed or skipped (the store is down); the TTL will free it");
            }
            Event::LeaseOp { op: LeaseOp::Renew, result: "error", .. } => {
                tracing::warn!("lease renewal failed; retrying next period");
            }
            Event::LeaseLost { queue } => {
                tracing::debug!(queue, "lease lost while draining (expired or taken); drain cancelled");
            }
            Event::Message { queue, outcome, mode } if outcome != MessageOutcome::Submitted => {
                tracing::debug!(queue, outcome = outcome.as_str(), mode = mode.as_str(), "message settled");
            }
            Event::RetryOverflow => tracing::debug!("owner retry timers at the cap; intent handed back"),
            _ => {}
        }
    }
}

/// Sends every event to each observer in turn.
pub(crate) struct Fanout(pub(crate) Vec<Box<dyn Observer>>);

impl Observer for Fanout {
    fn observe(&self, event: &Event<'_>) {
        for o in &self.0 {
            o.observe(event);
        }
    }
}

/// Start the Prometheus endpoint when `DRAIN_METRICS_ADDR` asks for one, and build
/// the observer every command uses: metrics plus the log of notable decisions.
///
/// # Errors
/// A one-line reason when the endpoint cannot start (the address is taken).
pub(crate) fn start(
    metrics_addr: Option<std::net::SocketAddr>,
    serve: bool,
) -> Result<std::sync::Arc<dyn Observer>, String> {
    if serve && let Some(addr) = metrics_addr {
        adapter_metrics::install(addr).map_err(|e| format!("{e}; set DRAIN_METRICS_ADDR to a free port, or `off`"))?;
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
    }
    Ok(std::sync::Arc::new(Fanout(vec![Box::new(adapter_metrics::MetricsObserver), Box::new(LogObserver)])))
}

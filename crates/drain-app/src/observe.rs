//! The app's observers: metrics plus logs of the decisions an operator must see.

use adapter_metrics::Known;
use drain_core::Switch;
use drain_core::event::{Event, LeaseOp, MessageOutcome, TickOutcome};
use drain_core::ports::Observer;

use crate::config::Effective;
use crate::config::registry::{Kind, SETTINGS};

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
            Event::LeaseLost { lease, loss } => {
                tracing::debug!(lease, why = loss.as_str(), "lease lost ({loss}): the work under it was stopped");
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
        let addr = adapter_metrics::install(addr)
            .map_err(|e| format!("{e}; set DRAIN_METRICS_ADDR to a free port, or `off`"))?;
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
    }
    Ok(std::sync::Arc::new(Fanout(vec![Box::new(adapter_metrics::MetricsObserver), Box::new(LogObserver)])))
}

/// Every switch of the registry with its effective position, in registry order (the
/// values `drain config` shows, so the gauge and `drain config` always agree).
pub(crate) fn switch_modes(effective: &[Effective]) -> Vec<(&'static str, Switch)> {
    SETTINGS
        .iter()
        .filter_map(|s| match s.kind {
            Kind::Switch(default) => Some((s.name, default)),
            _ => None,
        })
        .map(|(name, default)| {
            let shown = effective.iter().find(|e| e.name == name).map(|e| e.value.as_str());
            (name, crate::config::settings::parse_switch(name, shown, default).value)
        })
        .collect()
}

/// What an operator's dashboards and alerts need from the first scrape: every
/// switch's position (`drain_switch_mode`) and every counter this process can move,
/// at 0 for each label set it can produce.
pub(crate) fn announce(observer: &dyn Observer, effective: &[Effective], known: &Known<'_>) {
    for (switch, mode) in switch_modes(effective) {
        observer.observe(&Event::SwitchMode { switch, mode });
    }
    adapter_metrics::export_known(known);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn modes(env: &[(&str, &str)]) -> Vec<(&'static str, Switch)> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        switch_modes(&crate::config::resolve(&env, None, "test-1").expect("resolves").effective)
    }

    #[test]
    fn every_registry_switch_is_reported_with_its_effective_position() {
        let names: Vec<&str> = SETTINGS.iter().filter(|s| matches!(s.kind, Kind::Switch(_))).map(|s| s.name).collect();
        let got = modes(&[]);
        assert_eq!(got.iter().map(|(n, _)| *n).collect::<Vec<_>>(), names, "every switch, in registry order");
        assert!(got.contains(&("PROJECTION_DRAIN_RELEASE_WAKE", Switch::On)), "{got:?}");
        assert!(got.contains(&("SERVICEBUS_DRAIN_SINGLEFLIGHT", Switch::Off)), "{got:?}");

        let got = modes(&[
            ("SERVICEBUS_DRAIN_SINGLEFLIGHT", "shadow"),
            ("PROJECTION_DRAIN_RELEASE_WAKE", "off"),
            ("SERVICEBUS_ATOMIC_CLAIM", "nonsense"),
        ]);
        assert!(got.contains(&("SERVICEBUS_DRAIN_SINGLEFLIGHT", Switch::Shadow)), "{got:?}");
        assert!(got.contains(&("PROJECTION_DRAIN_RELEASE_WAKE", Switch::Off)), "{got:?}");
        assert!(got.contains(&("SERVICEBUS_ATOMIC_CLAIM", Switch::On)), "a bad value is the default: {got:?}");
    }
}

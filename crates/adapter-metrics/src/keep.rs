use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Every metric name drain exports (docs/metrics.md). Nothing else reaches `/metrics`.
pub const KEEP_LIST: &[&str] = &[
    "drain_ticks_total",
    "drain_lease_ops_total",
    "drain_lease_lost_total",
    "drain_owner_skipped_total",
    "drain_owner_claim_busy_backoff_total",
    "drain_owner_retry_overflow_total",
    "drain_owner_peek_errors_total",
    "drain_owner_turns_total",
    "drain_messages_total",
    "drain_owner_queue_depth",
    "drain_owner_retry_timers",
    "drain_tick_duration_seconds",
    "drain_redis_op_duration_seconds",
    "drain_switch_mode",
];

/// A recorder that forwards only [`KEEP_LIST`] names to `inner`; other metrics
/// become no-ops.
#[derive(Debug)]
pub struct KeepList<R> {
    inner: R,
}

impl<R> KeepList<R> {
    /// Wrap `inner`.
    pub fn new(inner: R) -> Self {
        KeepList { inner }
    }
}

fn kept(name: &str) -> bool {
    KEEP_LIST.contains(&name)
}

impl<R: Recorder> Recorder for KeepList<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if kept(key.as_str()) {
            self.inner.describe_counter(key, unit, description);
        }
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if kept(key.as_str()) {
            self.inner.describe_gauge(key, unit, description);
        }
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if kept(key.as_str()) {
            self.inner.describe_histogram(key, unit, description);
        }
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if kept(key.name()) { self.inner.register_counter(key, metadata) } else { Counter::noop() }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if kept(key.name()) { self.inner.register_gauge(key, metadata) } else { Gauge::noop() }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if kept(key.name()) { self.inner.register_histogram(key, metadata) } else { Histogram::noop() }
    }
}

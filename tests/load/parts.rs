//! Small parts every workload shares: real time on Tokio, a seeded generator, an
//! observer that only counts, and the process's resident memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use drain_core::event::Event;
use drain_core::ports::Observer;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// SplitMix64: the workload's draws (request popularity, turn outcomes, phases).
pub(crate) struct Mix(u64);

impl Mix {
    pub(crate) fn new(seed: u64) -> Self {
        Mix(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[0, n)` (`n` ≥ 1).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Counts every core and store event by `(kind, label)`; keeps the largest gauge
/// values. Bounded: the keys are static labels.
#[derive(Default)]
pub(crate) struct Counting {
    counts: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    max_queue_depth: AtomicUsize,
    max_retry_timers: AtomicUsize,
}

impl Counting {
    /// The count of `(kind, label)`.
    pub(crate) fn get(&self, kind: &str, label: &str) -> u64 {
        lock(&self.counts).iter().filter(|((k, l), _)| *k == kind && *l == label).map(|(_, n)| *n).sum()
    }

    /// Every count of `kind`, by label.
    pub(crate) fn of(&self, kind: &str) -> BTreeMap<&'static str, u64> {
        lock(&self.counts).iter().filter(|((k, _), _)| *k == kind).map(|((_, l), n)| (*l, *n)).collect()
    }

    /// Everything, as `kind.label` -> count, and the largest gauges.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for ((kind, label), n) in lock(&self.counts).iter() {
            let name = if label.is_empty() { (*kind).to_owned() } else { format!("{kind}.{label}") };
            out.insert(name, (*n).into());
        }
        out.insert("max_owner_queue_depth".into(), self.max_queue_depth.load(Ordering::Relaxed).into());
        out.insert("max_retry_timers".into(), self.max_retry_timers.load(Ordering::Relaxed).into());
        serde_json::Value::Object(out)
    }

    fn bump(&self, kind: &'static str, label: &'static str) {
        *lock(&self.counts).entry((kind, label)).or_insert(0) += 1;
    }
}

impl Observer for Counting {
    fn observe(&self, event: &Event<'_>) {
        match event {
            Event::Tick { outcome, .. } => self.bump("tick", outcome.as_str()),
            Event::LeaseOp { op, result, .. } => self.bump(op.as_str(), result),
            Event::LeaseLost { .. } => self.bump("lease_lost", ""),
            Event::Message { outcome, .. } => self.bump("message", outcome.as_str()),
            Event::OwnerSkipped { reason, .. } => self.bump("owner_skipped", reason.as_str()),
            Event::ClaimBusyBackoff { .. } => self.bump("claim_busy_backoff", ""),
            Event::RetryOverflow => self.bump("retry_overflow", ""),
            Event::PeekError => self.bump("peek_error", ""),
            Event::OwnerTurn { outcome } => self.bump("turn", outcome.as_str()),
            Event::OwnerQueueDepth(n) => {
                self.max_queue_depth.fetch_max(*n, Ordering::Relaxed);
            }
            Event::RetryTimers(n) => {
                self.max_retry_timers.fetch_max(*n, Ordering::Relaxed);
            }
            Event::StoreOp { op, .. } => self.bump("round_trip", op),
            _ => self.bump("other", ""),
        }
    }
}

/// This process's resident set (`VmRSS` of `/proc/self/status`) in KiB; 0 where
/// there is no procfs.
pub(crate) fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

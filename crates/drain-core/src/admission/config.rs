//! The scheduler's configuration and the pure arithmetic of its two backoffs.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::switch::Switch;

/// How the [`Scheduler`](super::Scheduler) admits owners.
///
/// The drain binary builds it from `PROJECTION_DRAIN_CLAIM_AWARE`,
/// `PROJECTION_DRAIN_RELEASE_WAKE`, `PROJECTION_DRAIN_BACKOFF_MIN_SECONDS`/`_MAX_SECONDS` and
/// `PROJECTION_DRAIN_MAX_RETRY_TIMERS`; the scheduler itself reads nothing.
///
/// Durations are used at millisecond precision (the resolution of [`Time`](crate::Time)).
/// Out-of-range values never panic: `workers == 0` is used as 1, and a window whose
/// `backoff_min` is above its `backoff_max` is used with the two swapped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// Claim-aware admission and claim-busy backoff. [`Switch::On`] peeks before
    /// every initial launch and backs off from held claims and claim-busy turns;
    /// [`Switch::Shadow`] peeks and counts the same decisions but launches and
    /// re-enters at once; [`Switch::Off`] never peeks and re-enters a claim-busy
    /// owner at once (the legacy behaviour).
    pub claim_aware: Switch,
    /// Release wake-up: when the driver reports that an owner's claim was released
    /// elsewhere ([`Scheduler::on_release`](super::Scheduler::on_release), e.g. from a
    /// release notification that wakes one waiting instance), an owner waiting on a
    /// claim retry timer leaves it at once and is peeked again. [`Switch::Shadow`]
    /// reports what it would wake and changes nothing; [`Switch::Off`] ignores
    /// releases. It only acts when `claim_aware` is On (no claim timer exists
    /// otherwise), and only when the driver hears releases (it subscribes by itself
    /// when the store offers the wake-up: see [`drive`](super::drive)).
    pub release_wake: Switch,
    /// Skip served requests: when a peek answers the owner's drain stamp (a drain that
    /// began after the request was made and left nothing behind, see
    /// [`Peeked::drained`](super::Peeked::drained)), the request was served and the
    /// owner is forgotten instead of launched ([`Event::OwnerSkipped`](crate::Event::OwnerSkipped),
    /// reason `Served`). [`Switch::Shadow`] counts the same decisions and launches
    /// anyway; [`Switch::Off`] ignores marks (and the driver does not ask for them).
    /// It only acts on peeked owners, so only while `claim_aware` computes.
    pub skip_served: Switch,
    /// Turn slots: owners running or being peeked at the same time (at least 1).
    pub workers: usize,
    /// Lower bound of the claim-busy / claim-held retry window (inclusive).
    pub backoff_min: Duration,
    /// Upper bound of the claim-busy / claim-held retry window (inclusive).
    pub backoff_max: Duration,
    /// The most retry timers pending at once; the next one is handed off instead.
    /// Zero hands every retry off.
    pub max_retry_timers: usize,
    /// The first failure's backoff ceiling; it doubles with each consecutive failure.
    pub failure_base: Duration,
    /// The largest failure backoff ceiling.
    pub failure_cap: Duration,
}

impl SchedulerConfig {
    /// How long a release wake-up registration lives: well past the retry window
    /// (twice its upper bound, at least 30 s), whose timer is the backstop of a
    /// lost wake-up.
    #[must_use]
    pub fn waiter_ttl(&self) -> Duration {
        self.backoff_max.max(self.backoff_min).saturating_mul(2).max(Duration::from_secs(30))
    }
}

impl Default for SchedulerConfig {
    /// Claim-aware on, release wake-up on, served requests skipped, 4 workers, a 5–15 s claim-busy window,
    /// 1024 timers, and failure backoff from 1 s doubling up to 300 s.
    fn default() -> Self {
        SchedulerConfig {
            claim_aware: Switch::On,
            release_wake: Switch::On,
            skip_served: Switch::On,
            workers: 4,
            backoff_min: Duration::from_secs(5),
            backoff_max: Duration::from_secs(15),
            max_retry_timers: 1024,
            failure_base: Duration::from_secs(1),
            failure_cap: Duration::from_secs(300),
        }
    }
}

impl SchedulerConfig {
    /// The turn slots actually used: `workers`, but at least 1.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.workers.max(1)
    }

    /// The claim-busy retry window `(low, high)`, both inclusive, at millisecond
    /// precision and ordered (a reversed configuration is swapped, not rejected).
    #[must_use]
    pub fn claim_busy_window(&self) -> (Duration, Duration) {
        let (a, b) = (millis(self.backoff_min), millis(self.backoff_max));
        (Duration::from_millis(a.min(b)), Duration::from_millis(a.max(b)))
    }

    /// The back-off after failed turns: `failure_base` doubling to `failure_cap`.
    #[must_use]
    pub fn failure_backoff(&self) -> Backoff {
        Backoff { initial: self.failure_base, max: self.failure_cap }
    }

    /// The ceiling of the failure backoff after `consecutive_failures` failures in a
    /// row: `min(failure_cap, failure_base * 2^(consecutive_failures - 1))`,
    /// saturating instead of overflowing (at least 1 ms). Zero failures are treated
    /// as one. The actual delay is uniform in `[0, ceiling]` (full jitter,
    /// [`Backoff::full_delay`]).
    #[must_use]
    pub fn failure_ceiling(&self, consecutive_failures: u32) -> Duration {
        self.failure_backoff().cap(consecutive_failures.saturating_sub(1))
    }
}

/// Whole milliseconds of `d`, saturating.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[track_caller]
    fn check_ceiling(base: u64, cap: u64, failures: u32, expected: u64) {
        let config = SchedulerConfig { failure_base: ms(base), failure_cap: ms(cap), ..SchedulerConfig::default() };
        assert_eq!(config.failure_ceiling(failures), ms(expected), "base {base} cap {cap} failures {failures}");
    }

    #[test]
    fn failure_ceiling_doubles_up_to_the_cap() {
        check_ceiling(1000, 300_000, 0, 1000);
        check_ceiling(1000, 300_000, 1, 1000);
        check_ceiling(1000, 300_000, 2, 2000);
        check_ceiling(1000, 300_000, 3, 4000);
        check_ceiling(1000, 300_000, 9, 256_000);
        check_ceiling(1000, 300_000, 10, 300_000);
        check_ceiling(1000, 300_000, 64, 300_000);
        check_ceiling(1000, 300_000, u32::MAX, 300_000);
        check_ceiling(1000, 500, 1, 500);
        check_ceiling(0, 300_000, 40, 1); // a zero base still waits: never a hot loop
        check_ceiling(u64::MAX, u64::MAX, 70, u64::MAX);
    }

    #[track_caller]
    fn check_window(min: u64, max: u64, expected: (u64, u64)) {
        let config = SchedulerConfig { backoff_min: ms(min), backoff_max: ms(max), ..SchedulerConfig::default() };
        assert_eq!(config.claim_busy_window(), (ms(expected.0), ms(expected.1)));
    }

    #[test]
    fn claim_busy_window_is_ordered() {
        check_window(5000, 15_000, (5000, 15_000));
        check_window(15_000, 5000, (5000, 15_000));
        check_window(0, 0, (0, 0));
        check_window(7, 7, (7, 7));
    }

    #[test]
    fn defaults_follow_the_spec() {
        let config = SchedulerConfig::default();
        assert_eq!(config.claim_aware, Switch::On);
        assert_eq!(config.release_wake, Switch::On);
        assert_eq!(config.skip_served, Switch::On);
        assert_eq!(config.claim_busy_window(), (ms(5000), ms(15_000)));
        assert_eq!(config.max_retry_timers, 1024);
        assert_eq!(config.failure_ceiling(1), ms(1000));
        assert_eq!(config.failure_cap, ms(300_000));
        assert_eq!(SchedulerConfig { workers: 0, ..config }.slots(), 1);
    }
}

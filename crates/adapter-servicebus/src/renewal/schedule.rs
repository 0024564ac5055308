//! When to renew a lock: pure, so it is tested on its own.

use std::time::Duration;

/// How long before a lock expires it is renewed, at most.
pub(crate) const RENEW_AHEAD: Duration = Duration::from_secs(10);

/// When to renew: `min(10 s, half the remaining lock)` before it expires, and never
/// so late that the renewal would start at or after `max_duration` since the
/// delivery was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewSchedule {
    /// Stop renewing once this much time has passed since the delivery was received.
    pub max_duration: Duration,
}

impl RenewSchedule {
    /// How long to wait before the next renewal, given the time `elapsed` since the
    /// delivery was received and the lock's `remaining` life; `None` when the next
    /// renewal would fall at or past the maximum duration (let the lock run out).
    #[must_use]
    pub fn next(&self, elapsed: Duration, remaining: Duration) -> Option<Duration> {
        let ahead = (remaining / 2).min(RENEW_AHEAD);
        let wait = remaining - ahead;
        (elapsed + wait < self.max_duration).then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn schedule_table() {
        let check = |max: u64, elapsed: u64, remaining: u64, want: Option<u64>| {
            let got = RenewSchedule { max_duration: s(max) }.next(s(elapsed), s(remaining));
            assert_eq!(got, want.map(s), "max={max} elapsed={elapsed} remaining={remaining}");
        };
        // A 60 s lock is renewed 10 s before it expires.
        check(300, 0, 60, Some(50));
        check(300, 50, 60, Some(50));
        // A short lock is renewed halfway.
        check(300, 0, 8, Some(4));
        check(300, 0, 0, Some(0));
        // The renewal would start at or past the maximum: stop.
        check(300, 250, 60, None);
        check(300, 249, 60, Some(50));
        check(0, 0, 60, None);
    }
}

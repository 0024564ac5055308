//! Jittered exponential back-off: the one drain uses wherever it waits before
//! trying again (connecting at start, reconnects, a claim store that is down, a
//! failed owner turn, a failing pass). Sans-IO: it answers delays from the attempt
//! and a generator; the caller sleeps.

use std::time::Duration;

use rand::RngExt as _;

/// Retry delays: attempt `n` (from 0) waits a uniform random time in
/// `[cap/2, cap]` where `cap = min(max, initial * 2^n)`, so clients that retry
/// spread out and never retry in a tight loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The cap of the first delay.
    pub initial: Duration,
    /// The largest cap.
    pub max: Duration,
}

impl Default for Backoff {
    /// 100 ms doubling to 10 s.
    fn default() -> Self {
        Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(10) }
    }
}

impl Backoff {
    /// The cap for attempt `attempt`.
    #[must_use]
    pub fn cap(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max).max(Duration::from_millis(1))
    }

    /// The delay before attempt `attempt`, drawn from `rng`: uniform in
    /// `[cap/2, cap]`, never a retry at once.
    pub fn delay(&self, attempt: u32, rng: &mut impl rand::Rng) -> Duration {
        let ms = millis(self.cap(attempt));
        Duration::from_millis(rng.random_range(ms / 2..=ms))
    }

    /// The delay before attempt `attempt`, uniform in `[0, cap]` ("full jitter"):
    /// for many independent waiters (owners whose turns failed together), where
    /// spreading them over the whole window matters more than never retrying soon.
    pub fn full_delay(&self, attempt: u32, rng: &mut impl rand::Rng) -> Duration {
        Duration::from_millis(rng.random_range(0..=millis(self.cap(attempt))))
    }
}

/// Whole milliseconds of `d`, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::TestRng;

    #[test]
    fn caps_double_up_to_the_max() {
        let b = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(2) };
        let caps: Vec<u64> = (0..8).map(|n| b.cap(n).as_millis() as u64).collect();
        assert_eq!(caps, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        assert_eq!(b.cap(u32::MAX), Duration::from_secs(2), "no overflow");
        let zero = Backoff { initial: Duration::ZERO, max: Duration::ZERO };
        assert_eq!(zero.cap(3), Duration::from_millis(1), "never a hot loop");
    }

    #[test]
    fn delays_stay_within_half_cap_and_cap_and_spread() {
        let b = Backoff::default();
        let mut rng = TestRng::new(7);
        for attempt in 0..12 {
            let cap = b.cap(attempt);
            let delays: Vec<Duration> = (0..200).map(|_| b.delay(attempt, &mut rng)).collect();
            for d in &delays {
                assert!(*d >= cap / 2 && *d <= cap, "attempt {attempt}: {d:?} outside [{:?}, {cap:?}]", cap / 2);
            }
            let distinct: std::collections::BTreeSet<_> = delays.iter().collect();
            assert!(distinct.len() > 20, "attempt {attempt}: jitter spreads delays ({} distinct)", distinct.len());
        }
    }

    #[test]
    fn full_delays_spread_from_zero_to_the_cap() {
        let b = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(4) };
        let mut rng = TestRng::new(3);
        for (attempt, cap) in [(0, 1000), (1, 2000), (5, 4000)] {
            let delays: Vec<u64> = (0..500).map(|_| millis(b.full_delay(attempt, &mut rng))).collect();
            assert!(delays.iter().all(|&d| d <= cap), "attempt {attempt}: above {cap}");
            assert!(delays.iter().any(|&d| d < cap / 10), "attempt {attempt}: the low tenth is reached");
            assert!(delays.iter().any(|&d| d > cap * 9 / 10), "attempt {attempt}: the high tenth is reached");
        }
    }
}

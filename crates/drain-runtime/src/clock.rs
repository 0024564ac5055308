//! `TokioClock`: drain-core's `Clock` port on Tokio's timer.

use std::time::Duration;

use async_trait::async_trait;
use drain_core::Time;
use drain_core::ports::Clock;
use tokio::time::Instant;

/// drain-core's [`Clock`] on Tokio: milliseconds since the clock was made.
///
/// Cheap to copy; copies share the origin, so they agree on `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokioClock {
    origin: Instant,
}

impl TokioClock {
    /// A clock whose [`Time::ZERO`] is now.
    #[must_use]
    pub fn new() -> Self {
        TokioClock { origin: Instant::now() }
    }

    /// A clock whose [`Time::ZERO`] is `origin`.
    #[must_use]
    pub fn since(origin: Instant) -> Self {
        TokioClock { origin }
    }

    /// The instant this clock's [`Time::ZERO`] stands for.
    #[must_use]
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The Tokio instant of `time` on this clock.
    #[must_use]
    pub fn instant(&self, time: Time) -> Instant {
        self.origin + Duration::from_millis(time.as_millis())
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Clock for TokioClock {
    fn now(&self) -> Time {
        Time::from_millis(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    async fn sleep_until(&self, deadline: Time) {
        tokio::time::sleep_until(self.instant(deadline)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_tokio_time() {
        let c = TokioClock::new();
        assert_eq!(c.now(), Time::ZERO);
        c.sleep_until(Time::from_millis(1500)).await;
        assert_eq!(c.now(), Time::from_millis(1500));
        // A deadline that has passed returns at once, without moving time.
        c.sleep_until(Time::from_millis(10)).await;
        assert_eq!(c.now(), Time::from_millis(1500));
        // Copies share the origin.
        let copy = c;
        assert_eq!(copy.now(), c.now());
        assert_eq!(copy.instant(Time::ZERO), c.origin());
    }

    #[tokio::test(start_paused = true)]
    async fn sleeps_do_not_drift() {
        let c = TokioClock::new();
        let mut next = Time::ZERO;
        for _ in 0..100 {
            next += Duration::from_millis(7);
            c.sleep_until(next).await;
        }
        assert_eq!(c.now(), Time::from_millis(700), "absolute deadlines: no accumulated lag");
    }

    #[tokio::test(start_paused = true)]
    async fn since_an_earlier_origin() {
        let origin = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        let c = TokioClock::since(origin);
        assert_eq!(c.now(), Time::from_millis(2000));
    }
}

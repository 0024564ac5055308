//! The real clock for drain-core's `Clock` port, on tokio time.

use async_trait::async_trait;
use drain_core::Time;
use drain_core::ports::Clock;
use tokio::time::Instant;

/// Milliseconds since this clock was made (process start), on tokio's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub(crate) fn new() -> Self {
        SystemClock { origin: Instant::now() }
    }
}

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> Time {
        Time::from_millis(u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    async fn sleep_until(&self, deadline: Time) {
        let at = self.origin + std::time::Duration::from_millis(deadline.as_millis());
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_tokio_time() {
        let c = SystemClock::new();
        assert_eq!(c.now(), Time::ZERO);
        c.sleep_until(Time::from_millis(1500)).await;
        assert_eq!(c.now(), Time::from_millis(1500));
        c.sleep_until(Time::from_millis(10)).await; // already passed: returns at once
        assert_eq!(c.now(), Time::from_millis(1500));
    }
}

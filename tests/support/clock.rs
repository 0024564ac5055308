//! Real time for drain-core's [`Clock`] port in the in-process suites (the fault
//! suite, the load program): `now` counts from a start instant, sleeps run on Tokio.

use std::time::Instant;

use async_trait::async_trait;
use drain_core::Time;
use drain_core::ports::Clock;

/// drain-core's clock on real time and Tokio.
#[derive(Debug)]
pub struct TokioClock {
    start: Instant,
}

impl TokioClock {
    /// A clock whose time 0 is now.
    #[must_use]
    pub fn new() -> Self {
        TokioClock { start: Instant::now() }
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
        Time::from_millis(u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    async fn sleep_until(&self, deadline: Time) {
        let wait = deadline.saturating_since(self.now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

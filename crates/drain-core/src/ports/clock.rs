use async_trait::async_trait;

use crate::time::Time;

/// Time as a port: the binary gives a real clock, tests and the simulator a virtual one.
#[async_trait]
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Time;

    /// Resolve at or after `deadline`. Resolves at once when it has passed.
    async fn sleep_until(&self, deadline: Time);
}

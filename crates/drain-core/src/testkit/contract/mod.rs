//! Contract suites: one behaviour suite per port, run against the in-memory
//! implementations here and against the real adapters in their own tests.
//!
//! Each suite is an async function that panics with a message naming the broken
//! MUST clause. It needs a [`Clock`] to let TTLs and locks expire: a
//! [`super::ManualClock`] under [`super::block_on`] for in-memory ports, a real
//! clock for real servers (then keep `short_ttl` small, e.g. 300 ms).

mod claim;
mod lease;
mod source;

pub use claim::claim_store;
pub use lease::lease_store;
pub use source::message_source;

use std::time::Duration;

use crate::keys::KeySpace;
use crate::ports::Clock;
use crate::token::LeaseToken;

/// What a suite needs besides the implementation under test.
pub struct ContractEnv<'a> {
    /// Waits for TTLs to pass.
    pub clock: &'a dyn Clock,
    /// A key space no other test uses (a unique prefix per run).
    pub keys: KeySpace,
    /// A TTL short enough to wait out, long enough that the store will not expire it
    /// before the next call returns.
    pub short_ttl: Duration,
}

impl ContractEnv<'_> {
    async fn wait(&self, d: Duration) {
        let until = self.clock.now() + d;
        self.clock.sleep_until(until).await;
    }
}

fn token(instance: &str, n: u64) -> LeaseToken {
    LeaseToken::generate(instance, &mut super::TestRng::new(n))
}

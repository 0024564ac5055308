//! Doubles that tests share instead of writing them again: a claim store whose
//! settlements fail, and an outage made by two plain calls.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{ErrorKind, PortError};
use crate::layer::{Call, Hooks, Run};
use crate::ports::Clock;
use crate::testkit::contract::Outage;

/// [`Hooks`] for a [`Forward`](crate::testkit::Forward) claim store that forwards
/// claims and fails every settlement with a `Connection` error: what a tick meets
/// when the claim store goes away between claiming and settling. A settlement
/// followed by claims is made as the two calls, so those claims are not asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct FailSettle;

#[async_trait]
impl Hooks for FailSettle {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        match call {
            Call::SettleBatch(..) => Err(PortError::new(ErrorKind::Connection, "settle refused by the test")),
            _ => run.await,
        }
    }

    fn two_calls(&self) -> bool {
        true
    }
}

/// An [`Outage`] made by two calls, say freezing and thawing a private server's
/// processes; after the thaw it waits `settle` on `clock`, so that the server
/// works through what queued up before the suite goes on.
pub struct OutageBy<'a, B, E> {
    begin: B,
    end: E,
    clock: &'a dyn Clock,
    settle: Duration,
}

impl<'a, B: Fn() + Send + Sync, E: Fn() + Send + Sync> OutageBy<'a, B, E> {
    /// `begin` starts the outage, `end` ends it, then `settle` passes on `clock`.
    pub fn new(begin: B, end: E, clock: &'a dyn Clock, settle: Duration) -> Self {
        OutageBy { begin, end, clock, settle }
    }
}

#[async_trait]
impl<B: Fn() + Send + Sync, E: Fn() + Send + Sync> Outage for OutageBy<'_, B, E> {
    async fn begin(&self) {
        (self.begin)();
    }

    async fn end(&self) {
        (self.end)();
        self.clock.sleep_until(self.clock.now() + self.settle).await;
    }
}

/// Hooks that change nothing but make `settle_then_claim` as two calls: a store
/// without a one-call `settle_then_claim` of its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct TwoCalls;

impl Hooks for TwoCalls {
    fn two_calls(&self) -> bool {
        true
    }
}

//! Doubles that tests share instead of writing them again: a claim store whose
//! settlements fail, and an outage made by two plain calls.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{ErrorKind, PortError};
use crate::ports::{ClaimState, ClaimStore, Clock, MessageId, SettleResult, Settlement};
use crate::testkit::contract::Outage;
use crate::token::LeaseToken;

/// A [`ClaimStore`] that forwards claims to the store it wraps and fails every
/// settlement with a `Connection` error: what a tick meets when the claim store
/// goes away between claiming and settling.
#[derive(Debug, Clone)]
pub struct FailSettle<S>(pub Arc<S>);

#[async_trait]
impl<S: ClaimStore> ClaimStore for FailSettle<S> {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        self.0.claim_batch(queue, ids, token, ttl).await
    }

    async fn settle_batch(
        &self,
        _: &str,
        _: &[Settlement],
        _: &LeaseToken,
        _: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        Err(PortError::new(ErrorKind::Connection, "settle refused by the test"))
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

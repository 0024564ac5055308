//! A Redis store that connects on first use and keeps retrying, so a Redis that is
//! down when `drain` starts behaves like one that went down later: the lease fails
//! open, claims fail closed, and the process keeps serving once Redis answers.

use std::sync::Arc;
use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimState, ClaimStore, Holding, LeaseName, LeaseStore, MessageId, Observer, OwnerClaim, OwnerClaims,
    Release, Renew, SettleResult, Settlement,
};
use drain_core::{ErrorKind, LeaseToken, PortError};
use tokio::sync::Mutex;

/// Connects on the first call; a failed connect fails that call with a temporary
/// error, and calls within `retry_every` after it fail at once with the same error;
/// the first call after that tries again.
pub(crate) struct LazyRedis {
    config: RedisConfig,
    shown: String,
    observer: Arc<dyn Observer>,
    state: Mutex<State>,
    retry_every: Duration,
}

struct State {
    store: Option<RedisStore>,
    last_attempt: Option<tokio::time::Instant>,
    last_error: Option<PortError>,
}

impl LazyRedis {
    pub(crate) fn new(config: RedisConfig, shown: String, observer: Arc<dyn Observer>) -> Self {
        LazyRedis {
            config,
            shown,
            observer,
            state: Mutex::new(State { store: None, last_attempt: None, last_error: None }),
            retry_every: Duration::from_secs(1),
        }
    }

    /// The connected store, connecting now if due.
    pub(crate) async fn store(&self) -> Result<RedisStore, PortError> {
        let mut s = self.state.lock().await;
        if let Some(store) = &s.store {
            return Ok(store.clone());
        }
        let due = s.last_attempt.is_none_or(|t| t.elapsed() >= self.retry_every);
        if !due {
            return Err(s.last_error.clone().unwrap_or_else(|| PortError::new(ErrorKind::Connection, "not connected")));
        }
        let attempt = RedisStore::connect(self.config.clone()).await;
        // From the end of the attempt: a connect that waited out its timeout is not
        // retried by the very next call (a frozen Redis would make every operation
        // of a tick wait out a connect of its own).
        s.last_attempt = Some(tokio::time::Instant::now());
        match attempt {
            Ok(store) => {
                let store = store.with_observer(self.observer.clone());
                tracing::info!(redis = %self.shown, "connected to Redis; scripts loaded");
                s.store = Some(store.clone());
                s.last_error = None;
                Ok(store)
            }
            Err(e) => {
                if s.last_error.is_none() {
                    tracing::warn!(redis = %self.shown, "Redis unavailable ({e}); leases fail open, claims fail closed, retrying");
                }
                s.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Where it points, redacted.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

#[async_trait]
impl LeaseStore for LazyRedis {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.store().await?.acquire(lease, token, ttl).await
    }
    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.store().await?.release(lease, token).await
    }
    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.store().await?.renew(lease, token, ttl).await
    }
    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.store().await?.peek(lease).await
    }
}

#[async_trait]
impl OwnerClaims for LazyRedis {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.store().await?.peek_owners(owners).await
    }
}

#[async_trait]
impl ClaimStore for LazyRedis {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.store().await?.claim_batch(queue, ids, token, pending_ttl).await
    }
    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        self.store().await?.settle_batch(queue, settlements, token, done_ttl).await
    }
}

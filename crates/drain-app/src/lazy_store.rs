//! A store that connects on first use and keeps retrying, so a store that is down
//! when `drain` starts behaves like one that went down later: the lease fails open,
//! claims fail closed, and the process keeps serving once the store answers. One
//! type for every store: [`LazyStore`] over a [`Connect`] (Redis, PostgreSQL).

use std::sync::Arc;
use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use adapter_redis::{RedisConfig, RedisStore};
use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimState, ClaimStore, ClaimTtls, Holding, LeaseName, LeaseStore, MessageId, Observer, OwnerClaim,
    OwnerClaims, Release, Renew, SettleResult, SettledThenClaimed, Settlement,
};
use drain_core::{ErrorKind, LeaseToken, PortError};
use tokio::sync::Mutex;

/// How to connect one kind of store.
pub(crate) trait Connect: Send + Sync + 'static {
    /// The connected store.
    type Store: LeaseStore + ClaimStore + OwnerClaims + Clone + Send + Sync + 'static;
    /// Its name in logs.
    const NAME: &'static str;
    /// What connecting did, for the log line.
    const READY: &'static str;
    /// Connect, reporting round trips to `observer`.
    fn connect(&self, observer: Arc<dyn Observer>) -> impl Future<Output = Result<Self::Store, PortError>> + Send;
}

impl Connect for RedisConfig {
    type Store = RedisStore;
    const NAME: &'static str = "Redis";
    const READY: &'static str = "scripts loaded";
    async fn connect(&self, observer: Arc<dyn Observer>) -> Result<RedisStore, PortError> {
        Ok(RedisStore::connect(self.clone()).await?.with_observer(observer))
    }
}

impl Connect for PostgresConfig {
    type Store = PostgresStore;
    const NAME: &'static str = "PostgreSQL";
    const READY: &'static str = "schema checked, statements prepared";
    async fn connect(&self, observer: Arc<dyn Observer>) -> Result<PostgresStore, PortError> {
        Ok(PostgresStore::connect(self.clone()).await?.with_observer(observer))
    }
}

/// Redis, connected on first use.
pub(crate) type LazyRedis = LazyStore<RedisConfig>;
/// PostgreSQL, connected on first use.
pub(crate) type LazyPostgres = LazyStore<PostgresConfig>;

/// Connects on the first call; a failed connect fails that call with a temporary
/// error, and calls within `retry_every` after it fail at once with the same error;
/// the first call after that tries again.
pub(crate) struct LazyStore<C: Connect> {
    config: C,
    shown: String,
    observer: Arc<dyn Observer>,
    state: Mutex<State<C::Store>>,
    retry_every: Duration,
}

struct State<S> {
    store: Option<S>,
    last_attempt: Option<tokio::time::Instant>,
    last_error: Option<PortError>,
}

impl<C: Connect> LazyStore<C> {
    pub(crate) fn new(config: C, shown: String, observer: Arc<dyn Observer>) -> Self {
        LazyStore {
            config,
            shown,
            observer,
            state: Mutex::new(State { store: None, last_attempt: None, last_error: None }),
            retry_every: Duration::from_secs(1),
        }
    }

    /// The connected store, connecting now if due. Its error is the connect's,
    /// marked unsent: the operation that asked was never sent.
    pub(crate) async fn store(&self) -> Result<C::Store, PortError> {
        let mut s = self.state.lock().await;
        if let Some(store) = &s.store {
            return Ok(store.clone());
        }
        let due = s.last_attempt.is_none_or(|t| t.elapsed() >= self.retry_every);
        if !due {
            let e = s.last_error.clone().unwrap_or_else(|| PortError::new(ErrorKind::Connection, "not connected"));
            return Err(e.never_sent());
        }
        let attempt = self.config.connect(self.observer.clone()).await;
        // From the end of the attempt: a connect that waited out its timeout is not
        // retried by the very next call (a frozen store would make every operation
        // of a tick wait out a connect of its own).
        s.last_attempt = Some(tokio::time::Instant::now());
        match attempt {
            Ok(store) => {
                tracing::info!(store = %self.shown, "connected to {}; {}", C::NAME, C::READY);
                s.store = Some(store.clone());
                s.last_error = None;
                Ok(store)
            }
            Err(e) => {
                if s.last_error.is_none() {
                    tracing::warn!(store = %self.shown, "{} unavailable ({e}); leases fail open, claims fail closed, retrying", C::NAME);
                }
                s.last_error = Some(e.clone());
                Err(e.never_sent())
            }
        }
    }

    /// Where it points, redacted.
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

#[async_trait]
impl<C: Connect> LeaseStore for LazyStore<C> {
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
impl<C: Connect> OwnerClaims for LazyStore<C> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.store().await?.peek_owners(owners).await
    }
}

#[async_trait]
impl<C: Connect> ClaimStore for LazyStore<C> {
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
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        match self.store().await {
            Ok(store) => store.settle_then_claim(queue, settlements, ids, token, ttls).await,
            Err(e) => SettledThenClaimed::failed(e),
        }
    }
}

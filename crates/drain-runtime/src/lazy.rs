//! A store that connects on first use and keeps retrying, so that a store that is
//! down when the process starts behaves like one that went down later: the lease
//! fails open, claims fail closed, and the process serves once the store answers.
//! It offers the optional ports it was told to ([`LazyStore::offering`]): it cannot
//! ask a store it has not connected.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimState, ClaimStore, ClaimTtls, DrainStamps, Fence, FenceMarks, FenceVerdict, Holding, LeaseName,
    LeaseStore, MessageId, OwnerClaim, OwnerClaims, Release, ReleaseWake, Releases, Renew, SettleResult,
    SettledThenClaimed, Settlement, StampedClaim, StoreOffers, Waiter, WakeRelease,
};
use drain_core::{ErrorKind, LeaseToken, PortError};
use futures::future::BoxFuture;
use tokio::sync::Mutex;

/// How to connect: called on the first use and again after a failure.
pub type Connect<S> = Arc<dyn Fn() -> BoxFuture<'static, Result<S, PortError>> + Send + Sync>;

/// A store of type `S`, connected on the first call. A failed connect fails that call
/// with its error (marked never sent: the operation did not reach the store), and
/// calls within `retry_every` (1 s) fail at once with the same error; the first call
/// after that tries again. The first failure and the connect are logged, with `shown`
/// (where it points, secrets masked).
///
/// It is every store port `S` is. Of the optional ones reached through owner claims
/// (the release wake-up, the drain stamps) it offers those it was built with
/// ([`LazyStore::offering`]; none by default): the application knows what it
/// enabled, the wake-up say only where the store's user has its rights. While the
/// store is down every call fails as the others do; a port offered here that the
/// connected store does not offer fails its calls as unsupported.
///
/// ```no_run
/// # async fn demo() {
/// use std::sync::Arc;
///
/// use drain_core::memory::MemoryStore;
/// use drain_runtime::{LazyStore, TokioClock};
///
/// let clock = Arc::new(TokioClock::new());
/// let store = LazyStore::new("memory", "in this process", Arc::new(move || {
///     let clock = clock.clone();
///     Box::pin(async move { Ok(Arc::new(MemoryStore::new(clock))) })
/// }));
/// # }
/// ```
pub struct LazyStore<S> {
    name: &'static str,
    shown: String,
    connect: Connect<S>,
    state: Mutex<State<S>>,
    retry_every: Duration,
    offers: StoreOffers,
}

struct State<S> {
    store: Option<S>,
    last_attempt: Option<tokio::time::Instant>,
    last_error: Option<PortError>,
}

impl<S: Clone + Send + Sync + 'static> LazyStore<S> {
    /// A store named `name` in logs (`Redis`, `PostgreSQL`), pointing at `shown`,
    /// connected by `connect`.
    pub fn new(name: &'static str, shown: impl Into<String>, connect: Connect<S>) -> Self {
        LazyStore {
            name,
            shown: shown.into(),
            connect,
            state: Mutex::new(State { store: None, last_attempt: None, last_error: None }),
            retry_every: Duration::from_secs(1),
            offers: StoreOffers::NONE,
        }
    }

    /// The same store, offering `offers` of the optional owner-claim ports.
    #[must_use]
    pub fn offering(mut self, offers: StoreOffers) -> Self {
        self.offers = offers;
        self
    }

    /// Where it points, secrets masked.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The connected store, connecting now if due.
    ///
    /// # Errors
    /// The connect's error, marked never sent.
    pub async fn store(&self) -> Result<S, PortError> {
        let mut s = self.state.lock().await;
        if let Some(store) = &s.store {
            return Ok(store.clone());
        }
        let due = s.last_attempt.is_none_or(|t| t.elapsed() >= self.retry_every);
        if !due {
            let e = s.last_error.clone().unwrap_or_else(|| PortError::new(ErrorKind::Connection, "not connected"));
            return Err(e.never_sent());
        }
        let attempt = (self.connect)().await;
        // From the end of the attempt: a connect that waited out its timeout is not
        // retried by the very next call (a frozen store would make every operation
        // of a tick wait out a connect of its own).
        s.last_attempt = Some(tokio::time::Instant::now());
        match attempt {
            Ok(store) => {
                tracing::info!(store = %self.shown, "connected to {}", self.name);
                s.store = Some(store.clone());
                s.last_error = None;
                Ok(store)
            }
            Err(e) => {
                if s.last_error.is_none() {
                    tracing::warn!(store = %self.shown, "{} unavailable ({e}); leases fail open, claims fail closed, retrying", self.name);
                }
                s.last_error = Some(e.clone());
                Err(e.never_sent())
            }
        }
    }
}

#[async_trait]
impl<S: LeaseStore + Clone + 'static> LeaseStore for LazyStore<S> {
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
impl<S: OwnerClaims + Clone + 'static> OwnerClaims for LazyStore<S> {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.store().await?.peek_owners(owners).await
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        if self.offers.release_wake { Some(self) } else { None }
    }

    fn drain_stamps(&self) -> Option<&dyn DrainStamps> {
        if self.offers.drain_stamps { Some(self) } else { None }
    }

    fn offers(&self) -> StoreOffers {
        self.offers
    }
}

/// The connected store's release wake-up, or the error of a port it does not offer.
fn wake_of<S: OwnerClaims>(store: &S) -> Result<&dyn ReleaseWake, PortError> {
    store.release_wake().ok_or_else(|| PortError::not_offered("release wake-up"))
}

/// The connected store's drain stamps, or the error of a port it does not offer.
fn stamps_of<S: OwnerClaims>(store: &S) -> Result<&dyn DrainStamps, PortError> {
    store.drain_stamps().ok_or_else(|| PortError::not_offered("drain stamps"))
}

#[async_trait]
impl<S: OwnerClaims + Clone + 'static> ReleaseWake for LazyStore<S> {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        wake_of(&self.store().await?)?.subscribe(instance).await
    }
    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        wake_of(&self.store().await?)?.peek_and_wait(owners, waiter).await
    }
    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        wake_of(&self.store().await?)?.acquire_or_wait(owner, token, ttl, waiter).await
    }
    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        wake_of(&self.store().await?)?.release_and_wake(owner, token, wake).await
    }
}

#[async_trait]
impl<S: OwnerClaims + Clone + 'static> DrainStamps for LazyStore<S> {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        stamps_of(&self.store().await?)?.peek_stamped(owners, waiter).await
    }
    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        stamps_of(&self.store().await?)?.acquire_stamped(owner, token, ttl, waiter).await
    }
    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        stamps_of(&self.store().await?)?.release_drained(owner, token, drained, wake).await
    }
}

#[async_trait]
impl<S: FenceMarks + Clone + 'static> FenceMarks for LazyStore<S> {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        self.store().await?.admit(resource, fence).await
    }
    async fn admit_fence(&self, resource: &str, fence: &Fence) -> Result<FenceVerdict, PortError> {
        self.store().await?.admit_fence(resource, fence).await
    }
}

#[async_trait]
impl<S: ClaimStore + Clone + 'static> ClaimStore for LazyStore<S> {
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

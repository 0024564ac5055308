//! A store that connects on first use and keeps retrying, so that a store that is
//! down when the process starts behaves like one that went down later: the lease
//! fails open, claims fail closed, and the process serves once the store answers.
//! It is the way drain-core's one forwarding layer (`Forward`) reaches such a store,
//! not a forwarder of its own. It offers the optional ports it was told to
//! ([`LazyStore::offering`]): it cannot ask a store it has not connected.

use std::sync::Arc;
use std::time::Duration;

use drain_core::layer::{Forward, Wrapped};
use drain_core::ports::StoreOffers;
use drain_core::{ErrorKind, PortError};
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
/// Wrapped in drain-core's `Forward` (or made by [`LazyStore::layer`]), it is every
/// store port `S` is. Of the optional ones reached through owner claims (the release
/// wake-up, the drain stamps) it offers those it was built with
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
///     Box::pin(async move { Ok(MemoryStore::new(clock)) })
/// }))
/// .layer();
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
    store: Option<Arc<S>>,
    last_attempt: Option<tokio::time::Instant>,
    last_error: Option<PortError>,
}

impl<S: Send + Sync + 'static> LazyStore<S> {
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

    /// Every store port `S` is, through drain-core's one forwarding layer.
    #[must_use]
    pub fn layer(self) -> Forward<Self, ()> {
        Forward::new(self, ())
    }

    /// Where it points, secrets masked.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The connected store, connecting now if due.
    ///
    /// # Errors
    /// The connect's error, marked never sent.
    pub async fn store(&self) -> Result<Arc<S>, PortError> {
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
                let store = Arc::new(store);
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

impl<S: Send + Sync + 'static> Wrapped for LazyStore<S> {
    type Store = S;

    fn reach(&self) -> impl Future<Output = Result<Arc<S>, PortError>> + Send {
        self.store()
    }

    /// Never: the store behind a lock may be connecting.
    fn at_hand(&self) -> Option<&S> {
        None
    }

    fn offers(&self) -> StoreOffers {
        self.offers
    }
}

//! The one forwarding layer for stores: [`Forward`] passes every call of every store
//! port (leases, claims, owner claims, the release wake-up, drain stamps, fence
//! marks) to the store it wraps, through [`Hooks`] in which a wrapper says only what
//! it changes (a call that fails, waits, or is counted; an optional port it hides).
//! Counting, metering and the test doubles are hooks on it, not wrappers of their own.
//! It reaches the store through [`Wrapped`]: an `Arc` of the store at once, or a
//! store connected on first use (drain-runtime's `LazyStore`).

mod optional;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{
    Acquire, ClaimState, ClaimStore, ClaimTtls, FenceVerdict, Holding, LeaseName, LeaseStore, MessageId, OwnerClaim,
    Release, Releases, Renew, SettleResult, SettledThenClaimed, Settlement, StampedClaim, StoreOffers, WakeRelease,
    settle_then_claim_in_two_calls,
};
use crate::token::LeaseToken;

/// A store call as [`Hooks`] see it: which method, on which lease or queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Call<'a> {
    /// [`LeaseStore::acquire`] of the lease.
    Acquire(&'a LeaseName),
    /// [`LeaseStore::release`] of the lease.
    Release(&'a LeaseName),
    /// [`LeaseStore::renew`] of the lease.
    Renew(&'a LeaseName),
    /// [`LeaseStore::peek`] at the lease.
    Peek(&'a LeaseName),
    /// [`ClaimStore::claim_batch`] of the messages in the queue.
    ClaimBatch(&'a str, &'a [MessageId]),
    /// [`ClaimStore::settle_batch`] of the settlements in the queue.
    SettleBatch(&'a str, &'a [Settlement]),
    /// [`ClaimStore::settle_then_claim`] of the settlements, then the messages, in the
    /// queue, made as one call.
    SettleThenClaim(&'a str, &'a [Settlement], &'a [MessageId]),
    /// [`OwnerClaims::peek_owners`](crate::ports::OwnerClaims::peek_owners) of the owners.
    PeekOwners(&'a [OwnerId]),
    /// [`ReleaseWake::subscribe`](crate::ports::ReleaseWake::subscribe) of the instance.
    Subscribe(&'a str),
    /// [`ReleaseWake::peek_and_wait`](crate::ports::ReleaseWake::peek_and_wait) of the owners.
    PeekAndWait(&'a [OwnerId]),
    /// [`ReleaseWake::acquire_or_wait`](crate::ports::ReleaseWake::acquire_or_wait) of the owner.
    AcquireOrWait(&'a OwnerId),
    /// [`ReleaseWake::release_and_wake`](crate::ports::ReleaseWake::release_and_wake) of the owner.
    ReleaseAndWake(&'a OwnerId),
    /// [`DrainStamps::peek_stamped`](crate::ports::DrainStamps::peek_stamped) of the owners.
    PeekStamped(&'a [OwnerId]),
    /// [`DrainStamps::acquire_stamped`](crate::ports::DrainStamps::acquire_stamped) of the owner.
    AcquireStamped(&'a OwnerId),
    /// [`DrainStamps::release_drained`](crate::ports::DrainStamps::release_drained) of the owner.
    ReleaseDrained(&'a OwnerId),
    /// [`FenceMarks::admit`](crate::ports::FenceMarks::admit) (or `admit_fence`) to the resource.
    Admit(&'a str),
}

impl Call<'_> {
    /// The method's name: `"acquire"`, `"claim_batch"`, `"settle_then_claim"`, ...
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Call::Acquire(_) => "acquire",
            Call::Release(_) => "release",
            Call::Renew(_) => "renew",
            Call::Peek(_) => "peek",
            Call::ClaimBatch(..) => "claim_batch",
            Call::SettleBatch(..) => "settle_batch",
            Call::SettleThenClaim(..) => "settle_then_claim",
            Call::PeekOwners(_) => "peek_owners",
            Call::Subscribe(_) => "subscribe",
            Call::PeekAndWait(_) => "peek_and_wait",
            Call::AcquireOrWait(_) => "acquire_or_wait",
            Call::ReleaseAndWake(_) => "release_and_wake",
            Call::PeekStamped(_) => "peek_stamped",
            Call::AcquireStamped(_) => "acquire_stamped",
            Call::ReleaseDrained(_) => "release_drained",
            Call::Admit(_) => "admit",
        }
    }

    /// The owners of a peek at owners' claims (`peek_owners`, `peek_and_wait`,
    /// `peek_stamped`): what admission's peeks cost.
    #[must_use]
    pub const fn peeked(&self) -> Option<&[OwnerId]> {
        match self {
            Call::PeekOwners(o) | Call::PeekAndWait(o) | Call::PeekStamped(o) => Some(*o),
            _ => None,
        }
    }

    /// The lease of a lease call.
    #[must_use]
    pub const fn lease(&self) -> Option<&LeaseName> {
        match self {
            Call::Acquire(l) | Call::Release(l) | Call::Renew(l) | Call::Peek(l) => Some(*l),
            _ => None,
        }
    }
}

/// A store call's answer as [`Hooks::answered`] sees it: what the port method
/// answers, by the type it answers (one variant serves every method answering it).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Answer<'a> {
    /// Of `acquire`, `acquire_or_wait` and `acquire_stamped`.
    Acquire(&'a Result<Acquire, PortError>),
    /// Of `release`.
    Release(&'a Result<Release, PortError>),
    /// Of `renew`.
    Renew(&'a Result<Renew, PortError>),
    /// Of `peek`.
    Peek(&'a Result<Option<Holding>, PortError>),
    /// Of `claim_batch`: one state per message.
    Claimed(&'a Result<Vec<ClaimState>, PortError>),
    /// Of `settle_batch`: one result per settlement.
    Settled(&'a Result<Vec<SettleResult>, PortError>),
    /// Of `settle_then_claim`, made as one call.
    SettledThenClaimed(&'a SettledThenClaimed),
    /// Of `peek_owners` and `peek_and_wait`.
    Owners(&'a Result<Vec<OwnerClaim>, PortError>),
    /// Of `subscribe`: whether it subscribed.
    Subscribed(Result<(), &'a PortError>),
    /// Of `release_and_wake` and `release_drained`.
    WakeRelease(&'a Result<WakeRelease, PortError>),
    /// Of `peek_stamped`.
    Stamped(&'a Result<Vec<StampedClaim>, PortError>),
    /// Of `admit` and `admit_fence`.
    Admitted(&'a Result<FenceVerdict, PortError>),
}

/// The call on the wrapped store, handed to [`Hooks::around`]: awaiting it makes the
/// call and keeps the answer for the caller; it resolves to that answer's error, if
/// any (for `settle_then_claim`, the settlements' error, else the claims').
pub type Run<'a> = BoxFuture<'a, Result<(), PortError>>;

/// What a wrapper changes about the store a [`Forward`] wraps. Every default changes
/// nothing, so a wrapper implements only the hooks it needs.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Makes `call`. `Ok` answers it with what the wrapped store answered, so `run`
    /// must have been awaited (the wrapper panics otherwise). `Err` answers it with
    /// that error instead (for `settle_then_claim`, both halves), whether `run` was
    /// awaited or not; but the very error `run` resolved to, passed on with `?`,
    /// leaves the wrapped store's answer as it was. The default awaits `run`.
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        let _ = call;
        run.await
    }

    /// Sees what `call` answers, before the caller does: the wrapped store's answer,
    /// or the error [`Hooks::around`] answered instead. Not called for a call whose
    /// caller stopped waiting first.
    fn answered(&self, call: Call<'_>, answer: Answer<'_>) {
        let _ = (call, answer);
    }

    /// Whether `settle_then_claim` is made as the two calls, the settlements then the
    /// claims, each through these hooks (as [`ClaimStore`]'s default makes it),
    /// instead of as the wrapped store's one call. The default: one call.
    fn two_calls(&self) -> bool {
        false
    }

    /// What the wrapper offers of what the wrapped store offers (`inner`): a port
    /// left out is hidden, its accessor answers `None` and its calls fail as
    /// unsupported. The default: all of `inner`.
    fn offers(&self, inner: StoreOffers) -> StoreOffers {
        inner
    }
}

/// How a [`Forward`] reaches the store it wraps: an `Arc` of it at once; a store
/// connected on first use (drain-runtime's `LazyStore`) by connecting.
pub trait Wrapped: Send + Sync {
    /// The wrapped store.
    type Store: ?Sized + Send + Sync;

    /// The store, connected first when it must be. An error fails the call.
    fn reach(&self) -> impl Future<Output = Result<Arc<Self::Store>, PortError>> + Send;

    /// The store, when it is at hand without waiting: the optional ports it offers
    /// are read from it. `None` (not connected yet, say) answers them from
    /// [`Wrapped::offers`].
    fn at_hand(&self) -> Option<&Self::Store>;

    /// What a store not at hand offers of the optional owner-claim ports: nothing,
    /// unless the wrapper was told.
    fn offers(&self) -> StoreOffers {
        StoreOffers::NONE
    }
}

impl<S: ?Sized + Send + Sync> Wrapped for Arc<S> {
    type Store = S;

    fn reach(&self) -> impl Future<Output = Result<Arc<S>, PortError>> + Send {
        std::future::ready(Ok(Arc::clone(self)))
    }

    fn at_hand(&self) -> Option<&S> {
        Some(self)
    }
}

/// Hooks shared by several wrappers: each sees its own calls, recorded in one place.
#[async_trait]
impl<H: Hooks + ?Sized> Hooks for Arc<H> {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        (**self).around(call, run).await
    }

    fn answered(&self, call: Call<'_>, answer: Answer<'_>) {
        (**self).answered(call, answer);
    }

    fn two_calls(&self) -> bool {
        (**self).two_calls()
    }

    fn offers(&self, inner: StoreOffers) -> StoreOffers {
        (**self).offers(inner)
    }
}

/// Hooks that change nothing: the wrapped store as it is.
impl Hooks for () {}

/// Hooks that change nothing but what the wrapped store offers: at most these ports.
impl Hooks for StoreOffers {
    fn offers(&self, inner: StoreOffers) -> StoreOffers {
        inner.and(*self)
    }
}

/// Every store port the store `W` wraps has (leases, claims, owner claims and the
/// optional ports they offer, fence marks), forwarding every call to it through
/// `H`'s [`Hooks`].
///
/// ```
/// use std::sync::Arc;
///
/// use drain_core::layer::Forward;
/// use drain_core::memory::{ManualClock, MemoryStore};
/// use drain_core::ports::{OwnerClaims, StoreOffers};
///
/// let store = Arc::new(MemoryStore::new(Arc::new(ManualClock::new())));
/// // The memory store without its release wake-up.
/// let stamps_only = Forward::new(store, StoreOffers { release_wake: false, drain_stamps: true });
/// assert!(stamps_only.release_wake().is_none());
/// assert!(stamps_only.drain_stamps().is_some());
/// ```
#[derive(Debug, Clone)]
pub struct Forward<W, H> {
    inner: W,
    hooks: H,
}

impl<W, H> Forward<W, H> {
    /// `inner`'s calls, through `hooks`.
    pub fn new(inner: W, hooks: H) -> Self {
        Forward { inner, hooks }
    }

    /// The hooks, for what they recorded.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The wrapped store, as it was given.
    pub fn inner(&self) -> &W {
        &self.inner
    }
}

/// The answer of a store call, which a hook may replace by an error.
trait Reply: Send + Sized {
    fn error(&self) -> Option<&PortError>;
    fn failed(e: PortError) -> Self;
    fn view(&self) -> Answer<'_>;
}

/// A `Reply` for the answer type of a port method: a `Result` of `$t`, seen as
/// `$variant`.
macro_rules! reply {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl Reply for Result<$t, PortError> {
            fn error(&self) -> Option<&PortError> {
                self.as_ref().err()
            }

            fn failed(e: PortError) -> Self {
                Err(e)
            }

            fn view(&self) -> Answer<'_> {
                Answer::$variant(self)
            }
        }
    )*};
}

reply! {
    Acquire => Acquire,
    Release => Release,
    Renew => Renew,
    Option<Holding> => Peek,
    Vec<ClaimState> => Claimed,
    Vec<SettleResult> => Settled,
    Vec<OwnerClaim> => Owners,
    WakeRelease => WakeRelease,
    Vec<StampedClaim> => Stamped,
    FenceVerdict => Admitted,
}

impl Reply for Result<Releases, PortError> {
    fn error(&self) -> Option<&PortError> {
        self.as_ref().err()
    }

    fn failed(e: PortError) -> Self {
        Err(e)
    }

    fn view(&self) -> Answer<'_> {
        Answer::Subscribed(self.as_ref().map(|_| ()))
    }
}

impl Reply for SettledThenClaimed {
    fn error(&self) -> Option<&PortError> {
        self.settled.as_ref().err().or(self.claimed.as_ref().err())
    }

    fn failed(e: PortError) -> Self {
        SettledThenClaimed::failed(e)
    }

    fn view(&self) -> Answer<'_> {
        Answer::SettledThenClaimed(self)
    }
}

impl<W: Wrapped, H: Hooks> Forward<W, H> {
    /// `call`, made by `f` on the wrapped store, through [`Hooks::around`].
    async fn call<A: Reply>(&self, call: Call<'_>, f: impl Future<Output = A> + Send) -> A {
        let mut answer = None;
        let run: Run<'_> = Box::pin(async {
            let a = f.await;
            let e = a.error().cloned();
            answer = Some(a);
            e.map_or(Ok(()), Err)
        });
        let hooked = self.hooks.around(call, run).await;
        let answer = match (hooked, answer) {
            (Ok(()), Some(a)) => a,
            (Ok(()), None) => panic!("the hooks answered {} without making it", call.name()),
            (Err(e), Some(a)) if a.error() == Some(&e) => a,
            (Err(e), _) => A::failed(e),
        };
        self.hooks.answered(call, answer.view());
        answer
    }
}

#[async_trait]
impl<W: Wrapped<Store: LeaseStore>, H: Hooks> LeaseStore for Forward<W, H> {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.call(Call::Acquire(lease), async { self.inner.reach().await?.acquire(lease, token, ttl).await }).await
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.call(Call::Release(lease), async { self.inner.reach().await?.release(lease, token).await }).await
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.call(Call::Renew(lease), async { self.inner.reach().await?.renew(lease, token, ttl).await }).await
    }

    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.call(Call::Peek(lease), async { self.inner.reach().await?.peek(lease).await }).await
    }
}

#[async_trait]
impl<W: Wrapped<Store: ClaimStore>, H: Hooks> ClaimStore for Forward<W, H> {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        self.call(Call::ClaimBatch(queue, ids), async {
            self.inner.reach().await?.claim_batch(queue, ids, token, pending_ttl).await
        })
        .await
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        self.call(Call::SettleBatch(queue, settlements), async {
            self.inner.reach().await?.settle_batch(queue, settlements, token, done_ttl).await
        })
        .await
    }

    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        if self.hooks.two_calls() {
            return settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await;
        }
        let one = async {
            match self.inner.reach().await {
                Ok(store) => store.settle_then_claim(queue, settlements, ids, token, ttls).await,
                Err(e) => SettledThenClaimed::failed(e),
            }
        };
        self.call(Call::SettleThenClaim(queue, settlements, ids), one).await
    }
}

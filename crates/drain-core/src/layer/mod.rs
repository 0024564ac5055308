//! The one forwarding layer for stores: [`Forward`] passes every call of every store
//! port (leases, claims, owner claims, the release wake-up, drain stamps, fence
//! marks) to the store it wraps, through [`Hooks`] in which a wrapper says only what
//! it changes (a call that fails, waits, or is counted; an optional port it hides).
//! Counting, metering and the test doubles are hooks on it, not wrappers of their own.

mod optional;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::error::PortError;
use crate::owner::OwnerId;
use crate::ports::{
    Acquire, ClaimState, ClaimStore, ClaimTtls, Holding, LeaseName, LeaseStore, MessageId, Release, Renew,
    SettleResult, SettledThenClaimed, Settlement, StoreOffers, settle_then_claim_in_two_calls,
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
    /// [`ClaimStore::claim_batch`] in the queue.
    ClaimBatch(&'a str),
    /// [`ClaimStore::settle_batch`] in the queue.
    SettleBatch(&'a str),
    /// [`ClaimStore::settle_then_claim`] in the queue, made as one call.
    SettleThenClaim(&'a str),
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
            Call::ClaimBatch(_) => "claim_batch",
            Call::SettleBatch(_) => "settle_batch",
            Call::SettleThenClaim(_) => "settle_then_claim",
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

    /// Sees the states every claim answered (of `claim_batch`, and the claims of
    /// `settle_then_claim`) before the caller does.
    fn claimed(&self, states: &[ClaimState]) {
        let _ = states;
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

/// Hooks that change nothing: the wrapped store as it is.
impl Hooks for () {}

/// Hooks that change nothing but what the wrapped store offers: at most these ports.
impl Hooks for StoreOffers {
    fn offers(&self, inner: StoreOffers) -> StoreOffers {
        inner.and(*self)
    }
}

/// Every store port `S` has (leases, claims, owner claims and the optional ports
/// they offer, fence marks), forwarding every call to `S` through `H`'s [`Hooks`].
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
#[derive(Debug)]
pub struct Forward<S: ?Sized, H> {
    inner: Arc<S>,
    hooks: H,
}

/// A clone shares the wrapped store (whatever `S` is) and clones the hooks.
impl<S: ?Sized, H: Clone> Clone for Forward<S, H> {
    fn clone(&self) -> Self {
        Forward { inner: Arc::clone(&self.inner), hooks: self.hooks.clone() }
    }
}

impl<S: ?Sized, H> Forward<S, H> {
    /// `inner`'s calls, through `hooks`.
    pub fn new(inner: Arc<S>, hooks: H) -> Self {
        Forward { inner, hooks }
    }

    /// The hooks, for what they recorded.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }
}

/// The answer of a store call, which a hook may replace by an error.
trait Answer: Send {
    fn error(&self) -> Option<&PortError>;
    fn failed(e: PortError) -> Self;
}

impl<T: Send> Answer for Result<T, PortError> {
    fn error(&self) -> Option<&PortError> {
        self.as_ref().err()
    }

    fn failed(e: PortError) -> Self {
        Err(e)
    }
}

impl Answer for SettledThenClaimed {
    fn error(&self) -> Option<&PortError> {
        self.settled.as_ref().err().or(self.claimed.as_ref().err())
    }

    fn failed(e: PortError) -> Self {
        SettledThenClaimed::failed(e)
    }
}

impl<S: ?Sized + Send + Sync, H: Hooks> Forward<S, H> {
    /// `call`, made by `f` on the wrapped store, through [`Hooks::around`].
    async fn call<A: Answer>(&self, call: Call<'_>, f: impl Future<Output = A> + Send) -> A {
        let mut answer = None;
        let run: Run<'_> = Box::pin(async {
            let a = f.await;
            let e = a.error().cloned();
            answer = Some(a);
            e.map_or(Ok(()), Err)
        });
        let hooked = self.hooks.around(call, run).await;
        match (hooked, answer) {
            (Ok(()), Some(a)) => a,
            (Ok(()), None) => panic!("the hooks answered {} without making it", call.name()),
            (Err(e), Some(a)) if a.error() == Some(&e) => a,
            (Err(e), _) => A::failed(e),
        }
    }

    /// Shows the hooks the states of a claim that was answered.
    fn seen(&self, claimed: &Result<Vec<ClaimState>, PortError>) {
        if let Ok(states) = claimed {
            self.hooks.claimed(states);
        }
    }
}

#[async_trait]
impl<S: LeaseStore + ?Sized, H: Hooks> LeaseStore for Forward<S, H> {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.call(Call::Acquire(lease), self.inner.acquire(lease, token, ttl)).await
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.call(Call::Release(lease), self.inner.release(lease, token)).await
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.call(Call::Renew(lease), self.inner.renew(lease, token, ttl)).await
    }

    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.call(Call::Peek(lease), self.inner.peek(lease)).await
    }
}

#[async_trait]
impl<S: ClaimStore + ?Sized, H: Hooks> ClaimStore for Forward<S, H> {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        let claimed = self.call(Call::ClaimBatch(queue), self.inner.claim_batch(queue, ids, token, pending_ttl)).await;
        self.seen(&claimed);
        claimed
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        self.call(Call::SettleBatch(queue), self.inner.settle_batch(queue, settlements, token, done_ttl)).await
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
        let one = self.inner.settle_then_claim(queue, settlements, ids, token, ttls);
        let answer = self.call(Call::SettleThenClaim(queue), one).await;
        self.seen(&answer.claimed);
        answer
    }
}

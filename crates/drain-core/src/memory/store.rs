use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::channel::mpsc;

use crate::admission::OwnerId;
use crate::error::{ErrorKind, PortError};
use crate::ports::{
    Acquire, ClaimState, ClaimStore, Clock, FenceMarks, FenceVerdict, Holding, LeaseName, LeaseStore, MessageId,
    OwnerClaim, OwnerClaims, Release, ReleaseWake, Releases, Renew, SettleAction, SettleResult, Settlement, Waiter,
    WakeRelease,
};
use crate::time::Time;
use crate::token::LeaseToken;

/// One lease as the memory store keeps it: a row whose fence outlives its holders.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseRow {
    /// The holder's token and when its hold ends; a hold that ended is no hold.
    pub(crate) held: Option<(String, Time)>,
    /// The last fence handed out (0: never taken).
    pub(crate) fence: u64,
}

impl LeaseRow {
    pub(crate) fn holder(&self, now: Time) -> Option<(&str, Time)> {
        self.held.as_ref().filter(|(_, until)| *until > now).map(|(t, until)| (t.as_str(), *until))
    }
}

/// A message claim as the memory store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredClaim {
    /// A submit under way, by the holder of `token`.
    Pending {
        /// The holder's token.
        token: String,
    },
    /// The message was submitted (by the holder of `token`).
    Done {
        /// The token that marked it done.
        token: String,
    },
}

/// Registrations on one owner: instances oldest first, expiring together (each
/// registration renews them, as one list with one time to live).
#[derive(Debug, Default)]
pub(crate) struct WaiterList {
    pub(crate) instances: Vec<String>,
    pub(crate) until: Time,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) leases: HashMap<LeaseName, LeaseRow>,
    pub(crate) claims: HashMap<(String, MessageId), (StoredClaim, Time)>,
    pub(crate) waiters: HashMap<String, WaiterList>,
    pub(crate) subscribers: HashMap<String, Vec<mpsc::UnboundedSender<OwnerId>>>,
    /// Fence marks by resource: the highest fence accepted, and when it was raised
    /// (the broken stores of the testkit let marks lapse by it).
    pub(crate) marks: HashMap<String, (u64, Time)>,
    /// Drain stamps by owner (see `memory::drained`).
    pub(crate) drains: HashMap<String, super::drained::DrainRow>,
    /// Fenced writes' values by lease and key (see `memory::writes`).
    pub(crate) values: HashMap<(LeaseName, String), Vec<u8>>,
    calls: BTreeMap<&'static str, u64>,
    pub(crate) failing: Option<ErrorKind>,
    fail_next: u32,
}

/// An in-memory [`LeaseStore`], [`ClaimStore`], [`OwnerClaims`], [`ReleaseWake`] and
/// [`FenceMarks`] with real expiry on any [`Clock`] (virtual in tests and simulations, real in the
/// embedded single-process default).
///
/// Every call counts as one round trip ([`MemoryStore::calls`]); faults can be
/// injected ([`MemoryStore::set_failing`], [`MemoryStore::fail_next`]) to test the
/// fail-open and fail-closed paths; the `put_*` and `set_*` methods set up states a
/// test needs (a foreign holder, a done claim).
pub struct MemoryStore {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("MemoryStore").field("leases", &s.leases.len()).field("claims", &s.claims.len()).finish()
    }
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryStore { clock, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether calls fail now ([`MemoryStore::set_failing`]).
    #[cfg(feature = "testkit")]
    pub(crate) fn is_failing(&self) -> bool {
        self.lock().failing.is_some()
    }

    /// Make every call fail with `kind` (`None` heals the store).
    pub fn set_failing(&self, kind: Option<ErrorKind>) {
        self.lock().failing = kind;
    }

    /// Make the next `n` calls fail with a temporary connection error.
    pub fn fail_next(&self, n: u32) {
        self.lock().fail_next = n;
    }

    /// Round trips per operation so far, by method name (`acquire`, `peek_owners`,
    /// `claim_batch`, …).
    #[must_use]
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.lock().calls.clone()
    }

    /// Total round trips so far.
    #[must_use]
    pub fn total_calls(&self) -> u64 {
        self.lock().calls.values().sum()
    }

    /// Make `token` the holder of `lease` for `ttl` (a foreign holder, in a test),
    /// keeping the lease's fence.
    pub fn put_lease(&self, lease: &LeaseName, token: &str, ttl: Duration) {
        let until = self.clock.now() + ttl;
        self.lock().leases.entry(lease.clone()).or_default().held = Some((token.to_owned(), until));
    }

    /// Set the last fence handed out for `lease`; the next acquire hands out one more.
    pub fn set_fence(&self, lease: &LeaseName, fence: u64) {
        self.lock().leases.entry(lease.clone()).or_default().fence = fence;
    }

    /// The full token holding `lease`, if any.
    #[must_use]
    pub fn lease_token(&self, lease: &LeaseName) -> Option<String> {
        let now = self.clock.now();
        self.lock().leases.get(lease).and_then(|row| row.holder(now)).map(|(t, _)| t.to_owned())
    }

    /// The fence mark of `resource`: the highest fence it accepted, if any.
    #[must_use]
    pub fn mark(&self, resource: &str) -> Option<u64> {
        self.lock().marks.get(resource).map(|(mark, _)| *mark)
    }

    /// Put a claim on message `id` of `queue` for `ttl`.
    pub fn put_claim(&self, queue: &str, id: &MessageId, claim: StoredClaim, ttl: Duration) {
        let until = self.clock.now() + ttl;
        self.lock().claims.insert((queue.to_owned(), id.clone()), (claim, until));
    }

    /// The live claim on message `id` of `queue`, with its time left.
    #[must_use]
    pub fn claim(&self, queue: &str, id: &MessageId) -> Option<(StoredClaim, Duration)> {
        let now = self.clock.now();
        let s = self.lock();
        s.claims
            .get(&(queue.to_owned(), id.clone()))
            .filter(|(_, until)| *until > now)
            .map(|(c, until)| (c.clone(), until.saturating_since(now)))
    }

    /// Count the call, apply injected faults, then run `f` on the state at `now`.
    pub(crate) fn call<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut State, Time) -> Result<T, PortError>,
    ) -> Result<T, PortError> {
        let now = self.clock.now();
        let mut s = self.lock();
        *s.calls.entry(op).or_default() += 1;
        if let Some(kind) = s.failing {
            return Err(PortError::new(kind, format!("memory store: injected {kind} failure on {op}")));
        }
        if s.fail_next > 0 {
            s.fail_next -= 1;
            return Err(PortError::new(ErrorKind::Connection, format!("memory store: injected failure on {op}")));
        }
        s.claims.retain(|_, (_, until)| *until > now);
        s.waiters.retain(|_, w| w.until > now);
        f(&mut s, now)
    }
}

pub(crate) fn acquire(s: &mut State, now: Time, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Acquire {
    let row = s.leases.entry(lease.clone()).or_default();
    if let Some((holder, until)) = row.holder(now) {
        return Acquire::Busy {
            holder: LeaseToken::holder_of(holder).to_owned(),
            remaining: until.saturating_since(now),
        };
    }
    row.fence += 1;
    row.held = Some((token.as_str().to_owned(), now + ttl));
    Acquire::Acquired { fence: row.fence }
}

/// Admit `fence` to `resource`'s mark (see [`FenceMarks::admit`]).
pub(crate) fn admit(s: &mut State, now: Time, resource: &str, fence: u64) -> FenceVerdict {
    match s.marks.get(resource) {
        Some(&(mark, _)) if mark > fence => FenceVerdict::Stale { mark },
        _ => {
            s.marks.insert(resource.to_owned(), (fence, now));
            FenceVerdict::Accepted
        }
    }
}

pub(crate) fn release(s: &mut State, now: Time, lease: &LeaseName, token: &LeaseToken) -> Release {
    match s.leases.get_mut(lease) {
        Some(row) if row.holder(now).is_some_and(|(t, _)| t == token.as_str()) => {
            row.held = None;
            Release::Released
        }
        _ => Release::NotOwner,
    }
}

pub(crate) fn peek(s: &State, now: Time, lease: &LeaseName) -> Option<Holding> {
    let row = s.leases.get(lease)?;
    let (token, until) = row.holder(now)?;
    Some(Holding {
        holder: LeaseToken::holder_of(token).to_owned(),
        remaining: until.saturating_since(now),
        fence: row.fence,
    })
}

pub(crate) fn owner_claim(s: &State, now: Time, owner: &OwnerId) -> OwnerClaim {
    match peek(s, now, &LeaseName::owner(owner.as_str())) {
        Some(h) => OwnerClaim::Busy { holder: h.holder, remaining: h.remaining },
        None => OwnerClaim::Free,
    }
}

pub(crate) fn register(s: &mut State, now: Time, owner: &OwnerId, waiter: &Waiter) {
    let list = s.waiters.entry(owner.as_str().to_owned()).or_default();
    list.instances.retain(|i| *i != waiter.instance);
    list.instances.push(waiter.instance.clone());
    list.until = now + waiter.ttl;
}

pub(crate) fn unregister(s: &mut State, owner: &OwnerId, instance: &str) {
    if let Some(list) = s.waiters.get_mut(owner.as_str()) {
        list.instances.retain(|i| i != instance);
    }
}

/// Notify the oldest registered waiter that listens; waiters nobody listens for any
/// more (a stopped instance) are dropped on the way.
pub(crate) fn wake_one(s: &mut State, owner: &OwnerId) -> bool {
    let Some(list) = s.waiters.get_mut(owner.as_str()) else { return false };
    while !list.instances.is_empty() {
        let instance = list.instances.remove(0);
        if let Some(subs) = s.subscribers.get_mut(&instance) {
            subs.retain(|tx| tx.unbounded_send(owner.clone()).is_ok());
            if !subs.is_empty() {
                return true;
            }
        }
    }
    false
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.call("acquire", |s, now| Ok(acquire(s, now, lease, token, ttl)))
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.call("release", |s, now| Ok(release(s, now, lease, token)))
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.call("renew", |s, now| match s.leases.get_mut(lease) {
            Some(row) if row.holder(now).is_some_and(|(t, _)| t == token.as_str()) => {
                row.held = Some((token.as_str().to_owned(), now + ttl));
                Ok(Renew::Renewed)
            }
            _ => Ok(Renew::Lost),
        })
    }

    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.call("peek", |s, now| Ok(peek(s, now, lease)))
    }
}

#[async_trait]
impl FenceMarks for MemoryStore {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        self.call("admit", |s, now| Ok(admit(s, now, resource, fence)))
    }
}

#[async_trait]
impl OwnerClaims for MemoryStore {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.call("peek_owners", |s, now| Ok(owners.iter().map(|o| owner_claim(s, now, o)).collect()))
    }

    fn release_wake(&self) -> Option<&dyn ReleaseWake> {
        Some(self)
    }

    fn drain_stamps(&self) -> Option<&dyn crate::ports::DrainStamps> {
        Some(self)
    }
}

#[async_trait]
impl ClaimStore for MemoryStore {
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
        self.call("claim_batch", |s, now| {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let key = (queue.to_owned(), id.clone());
                let state = match s.claims.get(&key) {
                    None => {
                        let claim = StoredClaim::Pending { token: token.as_str().to_owned() };
                        s.claims.insert(key, (claim, now + pending_ttl));
                        ClaimState::Claimed
                    }
                    Some((StoredClaim::Done { .. }, _)) => ClaimState::Done,
                    Some((StoredClaim::Pending { token }, _)) => {
                        ClaimState::PendingElsewhere { holder: LeaseToken::holder_of(token).to_owned() }
                    }
                };
                out.push(state);
            }
            Ok(out)
        })
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
        self.call("settle_batch", |s, now| {
            let mine = StoredClaim::Pending { token: token.as_str().to_owned() };
            let mut out = Vec::with_capacity(settlements.len());
            for st in settlements {
                let key = (queue.to_owned(), st.id.clone());
                if s.claims.get(&key).is_none_or(|(c, _)| *c != mine) {
                    out.push(SettleResult::NotOwner);
                    continue;
                }
                match st.action {
                    SettleAction::Done => {
                        let done = StoredClaim::Done { token: token.as_str().to_owned() };
                        s.claims.insert(key, (done, now + done_ttl));
                    }
                    SettleAction::Release => {
                        s.claims.remove(&key);
                    }
                }
                out.push(SettleResult::Settled);
            }
            Ok(out)
        })
    }
}

#[async_trait]
impl ReleaseWake for MemoryStore {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        self.call("subscribe", |s, _| {
            let (tx, rx) = mpsc::unbounded();
            s.subscribers.entry(instance.to_owned()).or_default().push(tx);
            Ok(Box::pin(rx) as Releases)
        })
    }

    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.call("peek_and_wait", |s, now| {
            let mut out = Vec::with_capacity(owners.len());
            for owner in owners {
                let claim = owner_claim(s, now, owner);
                if matches!(claim, OwnerClaim::Busy { .. }) {
                    register(s, now, owner, waiter);
                }
                out.push(claim);
            }
            Ok(out)
        })
    }

    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        self.call("acquire_or_wait", |s, now| {
            let got = acquire(s, now, &LeaseName::owner(owner.as_str()), token, ttl);
            match got {
                Acquire::Acquired { .. } => unregister(s, owner, &waiter.instance),
                Acquire::Busy { .. } => register(s, now, owner, waiter),
            }
            Ok(got)
        })
    }

    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.call("release_and_wake", |s, now| {
            let release = release(s, now, &LeaseName::owner(owner.as_str()), token);
            let woke = wake && release == Release::Released && wake_one(s, owner);
            Ok(WakeRelease { release, woke })
        })
    }
}

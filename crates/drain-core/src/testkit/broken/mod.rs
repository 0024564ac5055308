//! Deliberately broken stores: each has one defect that a store written from the
//! port docs could plausibly have, and breaks exactly one rule. drain-core's tests
//! run every contract suite against each of them and assert that the suite fails
//! naming that rule, so a suite that stopped catching one would be noticed.
//!
//! Without a defect ([`BrokenStore::sound`]) the store is the in-memory store and
//! passes every suite: a suite fails a broken store because of its defect.
//!
//! [`BrokenStore::instance`] makes another instance of the same store (the state
//! shared, as a fleet's processes share a server), with a connection of its own and
//! a clock of its own ([`BrokenStore::clock_skew`]): some defects show only when
//! calls come through several instances.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::lock::Mutex;

use super::contract::Outage;
use crate::admission::OwnerId;
use crate::error::{ErrorKind, PortError};
use crate::memory::MemoryStore;
use crate::memory::store::{self as mem, State, StoredClaim};
use crate::ports::{
    Acquire, ClaimState, ClaimStore, ClaimTtls, Clock, Holding, LeaseName, LeaseStore, MessageId, OwnerClaim,
    OwnerClaims, Release, Renew, SettleAction, SettleResult, SettledThenClaimed, Settlement,
    settle_then_claim_in_two_calls,
};
use crate::time::Time;
use crate::token::LeaseToken;

mod defect;
mod drained;
mod fence;
mod wake;
mod writes;

pub use defect::Defect;

/// The in-memory store with one [`Defect`] (or none).
pub struct BrokenStore {
    inner: Arc<MemoryStore>,
    defect: Option<Defect>,
    calls: Arc<AtomicU64>,
    /// This instance's one connection: the one-connection defects queue their
    /// calls on it, so that calls through one instance never interleave.
    connection: Mutex<()>,
    /// How far this instance's own clock reads ahead of the store's, in
    /// milliseconds (behind when negative); only `ExpiryOnCallerClock` reads it.
    skew_ms: i64,
    /// Each claim's last pending holder's token, kept as a row keeps it after its
    /// time ran out; only `SettleExpiredOwn` reads it.
    expired_rows: Arc<std::sync::Mutex<HashMap<(String, MessageId), String>>>,
    /// Acquires and claims a frozen store got during an outage and runs when it
    /// thaws; only `TimeoutReportedUnsent` keeps them.
    thawing: Arc<std::sync::Mutex<Vec<Thawing>>>,
}

/// A call a frozen store runs when it thaws.
enum Thawing {
    Acquire(LeaseName, LeaseToken, Duration),
    Claim(String, Vec<MessageId>, LeaseToken, Duration),
}

impl std::fmt::Debug for BrokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokenStore").field("defect", &self.defect).finish()
    }
}

const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

impl BrokenStore {
    /// A store with `defect`, reading time from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>, defect: Defect) -> Self {
        Self::with(clock, Some(defect))
    }

    /// The same store without a defect: it passes every suite.
    #[must_use]
    pub fn sound(clock: Arc<dyn Clock>) -> Self {
        Self::with(clock, None)
    }

    fn with(clock: Arc<dyn Clock>, defect: Option<Defect>) -> Self {
        BrokenStore {
            inner: Arc::new(MemoryStore::new(clock)),
            defect,
            calls: Arc::new(AtomicU64::new(0)),
            connection: Mutex::new(()),
            skew_ms: 0,
            expired_rows: Arc::default(),
            thawing: Arc::default(),
        }
    }

    /// Another instance of this store: the same leases and claims, the same defect,
    /// a connection of its own.
    #[must_use]
    pub fn instance(&self) -> Self {
        BrokenStore {
            inner: Arc::clone(&self.inner),
            defect: self.defect,
            calls: Arc::clone(&self.calls),
            connection: Mutex::new(()),
            skew_ms: 0,
            expired_rows: Arc::clone(&self.expired_rows),
            thawing: Arc::clone(&self.thawing),
        }
    }

    /// This instance with its own clock `ms` milliseconds ahead of the store's
    /// (behind when negative), as the clocks of a fleet's machines disagree. A store
    /// judges expiry on its own clock, so only `ExpiryOnCallerClock` notices.
    #[must_use]
    pub fn clock_skew(mut self, ms: i64) -> Self {
        self.skew_ms = ms;
        self
    }

    fn is(&self, d: Defect) -> bool {
        self.defect == Some(d)
    }

    /// Whether the store cannot answer right now, for the defects that hide it.
    fn failing(&self, d: Defect) -> bool {
        self.is(d) && self.inner.is_failing()
    }

    /// A call to a store without a timeout of its own: while the store cannot
    /// answer, it never comes back.
    async fn stall(&self) {
        if self.failing(Defect::HangsInOutage) || self.is(Defect::NeverAnswers) {
            futures::future::pending::<()>().await;
        }
    }

    /// Count the call; the flaky store fails one in seven.
    fn flake(&self) -> Result<(), PortError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if self.is(Defect::Flaky) && n.is_multiple_of(7) {
            return Err(PortError::new(ErrorKind::Connection, "flaky store: dropped a call"));
        }
        Ok(())
    }

    fn call<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut State, Time) -> Result<T, PortError>,
    ) -> Result<T, PortError> {
        self.flake()?;
        self.inner.call(op, |s, now| f(s, self.judged_at(now)))
    }

    /// The rows `SettleExpiredOwn` keeps.
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<(String, MessageId), String>> {
        self.expired_rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The time expiry is computed and judged at: the store's, or with
    /// `ExpiryOnCallerClock` this instance's own.
    fn judged_at(&self, now: Time) -> Time {
        if !self.is(Defect::ExpiryOnCallerClock) {
            return now;
        }
        let ms = now.as_millis().saturating_add_signed(self.skew_ms);
        Time::from_millis(ms)
    }

    /// The lease a name stands for (kinds merge with `KindsShareLeases`).
    fn lease(&self, lease: &LeaseName) -> LeaseName {
        if self.is(Defect::KindsShareLeases) { LeaseName::queue(lease.name()) } else { lease.clone() }
    }

    /// A lease's time to live as the store keeps it.
    fn ttl(&self, ttl: Duration) -> Duration {
        if self.is(Defect::LeaseWholeSeconds) { Duration::from_secs(ttl.as_secs()) } else { ttl }
    }

    fn acquire_in(&self, s: &mut State, now: Time, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Acquire {
        let lease = self.lease(lease);
        let row = s.leases.entry(lease.clone()).or_default();
        if self.is(Defect::FenceExpiresWithLease) && row.held.is_some() && row.holder(now).is_none() {
            row.fence = 0;
        }
        if self.is(Defect::HeldBumpsFence) && row.holder(now).is_some() {
            row.fence += 1;
        }
        if self.is(Defect::LeaseNeverExpires)
            && row.holder(now).is_none()
            && let Some((t, _)) = &row.held
        {
            return Acquire::Busy { holder: LeaseToken::holder_of(t).to_owned(), remaining: Duration::from_millis(1) };
        }
        match mem::acquire(s, now, &lease, token, self.ttl(ttl)) {
            Acquire::Acquired { .. } if self.is(Defect::FenceDoesNotMove) => {
                s.leases.entry(lease).or_default().fence = 1;
                Acquire::Acquired { fence: 1 }
            }
            Acquire::Busy { holder, .. } if self.is(Defect::HeldWithoutRemaining) => {
                Acquire::Busy { holder, remaining: Duration::ZERO }
            }
            other => other,
        }
    }

    fn release_in(&self, s: &mut State, now: Time, lease: &LeaseName, token: &LeaseToken) -> Release {
        let lease = self.lease(lease);
        let Some(row) = s.leases.get_mut(&lease) else { return Release::NotOwner };
        let last = row.held.as_ref().map(|(t, _)| t.clone());
        let live = row.holder(now).map(|(t, _)| t.to_owned());
        match live {
            Some(_) if self.is(Defect::ReleaseIgnoresToken) => {
                row.held = None;
                Release::Released
            }
            Some(t) if t == token.as_str() && self.is(Defect::ReleaseKeepsLease) => Release::Released,
            None if self.is(Defect::ReleaseExpiredReleased) && last.as_deref() == Some(token.as_str()) => {
                row.held = None;
                Release::Released
            }
            _ => mem::release(s, now, &lease, token),
        }
    }

    fn peek_in(&self, s: &State, now: Time, lease: &LeaseName) -> Option<Holding> {
        let lease = self.lease(lease);
        if self.is(Defect::PeekShowsExpired)
            && let Some(row) = s.leases.get(&lease)
            && let Some((t, until)) = &row.held
        {
            let remaining = until.saturating_since(now).max(Duration::from_millis(1));
            return Some(Holding { holder: LeaseToken::holder_of(t).to_owned(), remaining, fence: row.fence });
        }
        let mut h = mem::peek(s, now, &lease)?;
        if self.is(Defect::PeekStaleFence) {
            h.fence = h.fence.saturating_sub(1);
        }
        Some(h)
    }

    fn owner_in(&self, s: &State, now: Time, owner: &OwnerId) -> OwnerClaim {
        if self.is(Defect::OwnersMissHeld) {
            return OwnerClaim::Free;
        }
        let mut names = vec![LeaseName::owner(owner.as_str())];
        if self.is(Defect::OwnersSeeQueueLeases) {
            names.push(LeaseName::queue(owner.as_str()));
        }
        for name in names {
            let row = s.leases.get(&name);
            let held = match row {
                Some(row) if self.is(Defect::OwnersShowExpired) => row.held.clone(),
                Some(row) => row.holder(now).map(|(t, until)| (t.to_owned(), until)),
                None => None,
            };
            if let Some((t, until)) = held {
                let mut remaining = until.saturating_since(now).max(Duration::from_millis(1));
                if self.is(Defect::OwnersWholeSeconds) {
                    remaining = Duration::from_secs(remaining.as_secs());
                    if remaining.is_zero() {
                        return OwnerClaim::Free;
                    }
                }
                return OwnerClaim::Busy { holder: LeaseToken::holder_of(&t).to_owned(), remaining };
            }
        }
        OwnerClaim::Free
    }

    /// The key a claim is kept under: typed, or by text with `IdTypesCollide`.
    fn claim_key(&self, queue: &str, id: &MessageId) -> (String, MessageId) {
        let id = if self.is(Defect::IdTypesCollide) {
            MessageId::String(match id {
                MessageId::String(s) => s.clone(),
                MessageId::Ulong(n) => n.to_string(),
                MessageId::Uuid(b) => String::from_utf8_lossy(b).into_owned(),
                MessageId::Binary(b) => String::from_utf8_lossy(b).into_owned(),
            })
        } else {
            id.clone()
        };
        (queue.to_owned(), id)
    }
}

/// Returns `Pending` once, waking itself: the second step of a non-atomic write.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[async_trait]
impl LeaseStore for BrokenStore {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.stall().await;
        if self.failing(Defect::TimeoutReportedUnsent) {
            let mut thawing = self.thawing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            thawing.push(Thawing::Acquire(lease.clone(), token.clone(), ttl));
            return Err(PortError::new(ErrorKind::Timeout, "no answer in time").never_sent());
        }
        if self.failing(Defect::AcquireErrorAsHeld) {
            return Ok(Acquire::Busy { holder: "unknown".to_owned(), remaining: Duration::from_secs(1) });
        }
        if self.is(Defect::NonAtomicAcquire) || self.is(Defect::OneConnectionAcquire) {
            // One connection per instance: its calls wait for each other.
            let _connection =
                if self.is(Defect::OneConnectionAcquire) { Some(self.connection.lock().await) } else { None };
            let free = self.call("acquire", |s, now| Ok(self.peek_in(s, now, lease).is_none()))?;
            YieldNow(false).await;
            return self.call("acquire", |s, now| {
                if !free {
                    return Ok(self.acquire_in(s, now, lease, token, ttl));
                }
                let row = s.leases.entry(lease.clone()).or_default();
                row.fence += 1;
                row.held = Some((token.as_str().to_owned(), now + ttl));
                Ok(Acquire::Acquired { fence: row.fence })
            });
        }
        self.call("acquire", |s, now| Ok(self.acquire_in(s, now, lease, token, ttl)))
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        self.stall().await;
        if self.failing(Defect::ReleaseErrorAsNotOwner) {
            return Ok(Release::NotOwner);
        }
        self.call("release", |s, now| Ok(self.release_in(s, now, lease, token)))
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.stall().await;
        if self.failing(Defect::RenewErrorAsLost) {
            return Ok(Renew::Lost);
        }
        self.call("renew", |s, now| {
            let lease = self.lease(lease);
            let Some(row) = s.leases.get_mut(&lease) else { return Ok(Renew::Lost) };
            let last = row.held.as_ref().map(|(t, _)| t.clone());
            let live = row.holder(now).map(|(t, _)| t.to_owned());
            let ours = live.as_deref() == Some(token.as_str());
            let renew = match live {
                Some(_) => ours || self.is(Defect::RenewIgnoresToken),
                None => self.is(Defect::RenewRevivesExpired) && last.as_deref() == Some(token.as_str()),
            };
            if !renew {
                return Ok(Renew::Lost);
            }
            if !self.is(Defect::RenewDoesNotExtend) {
                let (holder, until) = row.held.clone().unwrap_or_else(|| (token.as_str().to_owned(), now));
                let from = if self.is(Defect::RenewFromOldExpiry) { until } else { now };
                row.held = Some((holder, from + self.ttl(ttl)));
            }
            Ok(Renew::Renewed)
        })
    }

    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.stall().await;
        if self.failing(Defect::PeekErrorAsFree) {
            return Ok(None);
        }
        self.call("peek", |s, now| Ok(self.peek_in(s, now, lease)))
    }
}

#[async_trait]
impl OwnerClaims for BrokenStore {
    async fn peek_owners(&self, owners: &[OwnerId]) -> Result<Vec<OwnerClaim>, PortError> {
        self.stall().await;
        if self.failing(Defect::OwnersErrorAsFree) {
            return Ok(vec![OwnerClaim::Free; owners.len()]);
        }
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let mut out =
            self.call("peek_owners", |s, now| Ok(owners.iter().map(|o| self.owner_in(s, now, o)).collect::<Vec<_>>()))?;
        if self.is(Defect::OwnersOutOfOrder) {
            out.reverse();
        }
        Ok(out)
    }

    fn release_wake(&self) -> Option<&dyn crate::ports::ReleaseWake> {
        if self.is(Defect::WakeNotOffered) { None } else { Some(self) }
    }

    fn drain_stamps(&self) -> Option<&dyn crate::ports::DrainStamps> {
        if self.is(Defect::StampsNotOffered) { None } else { Some(self) }
    }
}

#[async_trait]
impl ClaimStore for BrokenStore {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        self.stall().await;
        if self.failing(Defect::TimeoutReportedUnsent) {
            let mut thawing = self.thawing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            thawing.push(Thawing::Claim(queue.to_owned(), ids.to_vec(), token.clone(), pending_ttl));
            return Err(PortError::new(ErrorKind::Timeout, "no answer in time").never_sent());
        }
        if self.failing(Defect::ClaimErrorAsPending) {
            return Ok(vec![ClaimState::PendingElsewhere { holder: "unknown".to_owned() }; ids.len()]);
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let pending_ttl = match self.defect {
            Some(Defect::PendingNeverExpires) => FAR,
            Some(Defect::ClaimWholeSeconds) => Duration::from_secs(pending_ttl.as_secs()),
            _ => pending_ttl,
        };
        let mine = StoredClaim::Pending { token: token.as_str().to_owned() };
        let answer = |found: Option<&StoredClaim>| match found {
            None => ClaimState::Claimed,
            Some(StoredClaim::Done { .. }) if self.is(Defect::DoneAnsweredClaimed) => ClaimState::Claimed,
            Some(StoredClaim::Done { .. }) => ClaimState::Done,
            Some(StoredClaim::Pending { .. }) if self.is(Defect::PendingWithoutHolder) => {
                ClaimState::PendingElsewhere { holder: String::new() }
            }
            Some(StoredClaim::Pending { token }) => {
                ClaimState::PendingElsewhere { holder: LeaseToken::holder_of(token).to_owned() }
            }
        };
        let snapshot = |s: &State, now: Time| -> Vec<Option<StoredClaim>> {
            ids.iter()
                .map(|id| {
                    s.claims.get(&self.claim_key(queue, id)).filter(|(_, until)| *until > now).map(|(c, _)| c.clone())
                })
                .collect()
        };
        let non_atomic = self.is(Defect::NonAtomicClaim) || self.is(Defect::OneConnectionClaim);
        let _connection = if self.is(Defect::OneConnectionClaim) { Some(self.connection.lock().await) } else { None };
        let before = if non_atomic {
            let before = self.call("claim_batch", |s, now| Ok(snapshot(s, now)))?;
            YieldNow(false).await;
            Some(before)
        } else {
            None
        };
        let mut out = self.call("claim_batch", |s, now| {
            let start = before.unwrap_or_else(|| snapshot(s, now));
            let mut out = Vec::with_capacity(ids.len());
            let mut seen = Vec::new();
            for (id, was) in ids.iter().zip(start) {
                let key = self.claim_key(queue, id);
                // The non-atomic store still sees its own call's claims: its race is
                // with other callers.
                let repeat = non_atomic && seen.contains(&key);
                seen.push(key.clone());
                let found = if self.is(Defect::ClaimRepeatTwice) || (non_atomic && !repeat) {
                    was
                } else {
                    s.claims.get(&key).filter(|(_, until)| *until > now).map(|(c, _)| c.clone())
                };
                let state = answer(found.as_ref());
                if state == ClaimState::Claimed {
                    if self.is(Defect::SettleExpiredOwn) {
                        self.rows().insert(key.clone(), token.as_str().to_owned());
                    }
                    s.claims.insert(key, (mine.clone(), now + pending_ttl));
                }
                out.push(state);
            }
            Ok(out)
        })?;
        if self.is(Defect::ClaimOutOfOrder) {
            out.reverse();
        }
        Ok(out)
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        self.stall().await;
        if self.failing(Defect::SettleErrorAsSettled) {
            return Ok(vec![SettleResult::Settled; settlements.len()]);
        }
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        let done_ttl = match self.defect {
            Some(Defect::DoneNeverExpires) => FAR,
            Some(Defect::ClaimWholeSeconds) => Duration::from_secs(done_ttl.as_secs()),
            _ => done_ttl,
        };
        let mut out = self.call("settle_batch", |s, now| {
            let mine = StoredClaim::Pending { token: token.as_str().to_owned() };
            let mut out = Vec::with_capacity(settlements.len());
            for st in settlements {
                let key = self.claim_key(queue, &st.id);
                let found = s.claims.get(&key).filter(|(_, until)| *until > now).map(|(c, _)| c.clone());
                let ours = match &found {
                    Some(c) => *c == mine || self.is(Defect::SettleIgnoresToken),
                    None => {
                        self.is(Defect::SettleExpiredOwn)
                            && self.rows().get(&key).is_some_and(|t| t.as_str() == token.as_str())
                    }
                };
                if !ours {
                    out.push(SettleResult::NotOwner);
                    continue;
                }
                match st.action {
                    SettleAction::Done => {
                        let done = StoredClaim::Done { token: token.as_str().to_owned() };
                        s.claims.insert(key, (done, now + done_ttl));
                    }
                    SettleAction::Release if self.is(Defect::ReleaseKeepsClaim) => {}
                    SettleAction::Release => {
                        s.claims.remove(&key);
                    }
                }
                out.push(SettleResult::Settled);
            }
            Ok(out)
        })?;
        if self.is(Defect::SettleOutOfOrder) {
            out.reverse();
        }
        Ok(out)
    }

    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        if self.is(Defect::ClaimsBeforeSettling) {
            let claimed = self.claim_batch(queue, ids, token, ttls.pending).await;
            let settled = self.settle_batch(queue, settlements, token, ttls.done).await;
            return SettledThenClaimed { settled, claimed };
        }
        settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await
    }
}

#[async_trait]
impl Outage for BrokenStore {
    async fn begin(&self) {
        self.inner.set_failing(Some(ErrorKind::Connection));
    }

    async fn end(&self) {
        self.inner.set_failing(None);
        let thawed = std::mem::take(&mut *self.thawing.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for call in thawed {
            let _ = match call {
                Thawing::Acquire(lease, token, ttl) => self.inner.acquire(&lease, &token, ttl).await.map(drop),
                Thawing::Claim(queue, ids, token, ttl) => {
                    self.inner.claim_batch(&queue, &ids, &token, ttl).await.map(drop)
                }
            };
        }
    }
}

//! Owner turns that take their own claim: the ready-made [`OwnerWork`] around your
//! work function.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::driver::OwnerWork;
use super::{Entry, OwnerId, TurnOutcome};
use crate::error::PortError;
use crate::guard::{Ended, LeaseGuard, Start};
use crate::ports::{Clock, DrainStamps, Fence, LeaseName, LeaseStore, OwnerClaims, ReleaseWake, Waiter};
use crate::token::LeaseToken;

/// What one turn of an owner's work did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Worked {
    /// Items (or any unit of your own) the turn worked; zero: there was nothing to do.
    pub items: u64,
    /// Work remains: the owner continues at once, and the release wakes nobody.
    pub more: bool,
}

/// Owner turns that take the owner's claim (the [`LeaseName::owner`] lease) around
/// `work`, as admission's [`OwnerWork`].
///
/// Each turn draws a fresh token, takes the claim (a lost race is
/// [`TurnOutcome::ClaimBusy`]; when the driver says this instance waits for releases,
/// the lost race registers it as a waiter in the same step), runs `work(owner, fence)`
/// under a [`LeaseGuard`] that renews the claim every TTL/3 and drops the work when the
/// claim is lost (hand the fence to what receives the work's writes), and releases the claim, waking one waiter unless `more` (the store's
/// [`ReleaseWake`], when it offers one). When the store keeps drain stamps
/// ([`DrainStamps`]), the claim is taken with the store noting when, and a turn whose
/// work left nothing behind (`more` false, no error) publishes that time as the
/// owner's drain stamp in its release: admission elsewhere then drops the requests
/// made before it. A panicking work is caught: the claim is
/// released, the panic counted ([`OwnerTurns::panics`]) and the turn failed, and the
/// driver goes on. A permanent error (a missing right, a wrong setting: retrying cannot
/// mend it) stops the driver ([`OwnerWork::must_stop`]); a temporary one fails the
/// turn, which admission backs off. Intents the scheduler hands back wait in
/// [`OwnerTurns::take_handed_off`] for your next serving pass.
pub struct OwnerTurns<'a, F, R> {
    leases: &'a dyn LeaseStore,
    wake: Option<&'a dyn ReleaseWake>,
    marks: Option<&'a dyn DrainStamps>,
    clock: &'a dyn Clock,
    instance: String,
    ttl: Duration,
    work: F,
    rng: Mutex<R>,
    fatal: Mutex<Option<PortError>>,
    handed_off: Mutex<Vec<OwnerId>>,
    panics: AtomicU64,
    wakes_sent: AtomicU64,
    /// Turns by outcome, in `TurnOutcome::ALL`'s order.
    outcomes: [AtomicU64; 5],
}

impl<'a, F, Fut, R> OwnerTurns<'a, F, R>
where
    F: Fn(OwnerId, Fence) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Worked, PortError>> + Send,
    R: rand::CryptoRng + Send,
{
    /// Turns of `instance` over the owner claims in `store`, each claim taken for
    /// `ttl` and renewed while `work` runs; tokens drawn from `rng` (for example
    /// `drain_core::rand::make_rng::<drain_core::rand::rngs::StdRng>()`).
    pub fn new<S>(
        store: &'a S,
        clock: &'a dyn Clock,
        instance: impl Into<String>,
        ttl: Duration,
        rng: R,
        work: F,
    ) -> Self
    where
        S: LeaseStore + OwnerClaims,
    {
        OwnerTurns {
            leases: store,
            wake: store.release_wake(),
            marks: store.drain_stamps(),
            clock,
            instance: instance.into(),
            ttl,
            work,
            rng: Mutex::new(rng),
            fatal: Mutex::new(None),
            handed_off: Mutex::new(Vec::new()),
            panics: AtomicU64::new(0),
            wakes_sent: AtomicU64::new(0),
            outcomes: Default::default(),
        }
    }

    /// Turns off the store's release wake-up for these turns (claims taken and
    /// released plainly), for example when the store's user lacks its rights; the
    /// driver uses it only while [`SchedulerConfig::release_wake`](super::SchedulerConfig::release_wake)
    /// is not Off, so turn that off too.
    #[must_use]
    pub fn without_wake(mut self) -> Self {
        self.wake = None;
        self
    }

    /// Turns off the store's drain stamps for these turns (claims taken and released
    /// without them), as [`SchedulerConfig::skip_served`](super::SchedulerConfig::skip_served)
    /// Off wants: nothing is written that today's turns do not write.
    #[must_use]
    pub fn without_marks(mut self) -> Self {
        self.marks = None;
        self
    }

    /// Turns so far by outcome, named as the metric labels them (`claim_busy`, …).
    #[must_use]
    pub fn outcomes(&self) -> BTreeMap<&'static str, u64> {
        TurnOutcome::ALL.iter().zip(&self.outcomes).map(|(o, n)| (o.as_str(), n.load(Ordering::Relaxed))).collect()
    }

    /// Releases of these turns that woke a waiting instance.
    #[must_use]
    pub fn wakes_sent(&self) -> u64 {
        self.wakes_sent.load(Ordering::Relaxed)
    }

    /// The permanent error that stopped the turns, if one did.
    #[must_use]
    pub fn fatal(&self) -> Option<PortError> {
        self.fatal.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Turns whose work panicked (each was released and failed).
    #[must_use]
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// The owners the scheduler handed back since the last call (its retry timers were
    /// at the cap, or it closed): request them again in your next pass.
    pub fn take_handed_off(&self) -> Vec<OwnerId> {
        std::mem::take(&mut *self.handed_off.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn token(&self) -> LeaseToken {
        LeaseToken::generate(&self.instance, &mut *self.rng.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A permanent error stops the turns; either way the turn failed.
    fn failed(&self, e: PortError) -> TurnOutcome {
        if !e.is_temporary() {
            self.fatal.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(e);
        }
        TurnOutcome::Failed
    }

    /// Release the claim; `drained`: the work left nothing behind, so the drain stamp
    /// is published (with marks).
    async fn release(&self, guard: &LeaseGuard<'_>, owner: &OwnerId, token: &LeaseToken, more: bool, drained: bool) {
        if let Some(marks) = self.marks {
            if let Ok(done) = marks.release_drained(owner, token, drained, self.wake.is_some() && !more).await
                && done.woke
            {
                self.wakes_sent.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        match self.wake {
            // Unless the holder continues at once, the release wakes one waiter.
            Some(wake) => {
                if let Ok(done) = wake.release_and_wake(owner, token, !more).await
                    && done.woke
                {
                    self.wakes_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                guard.release(token).await;
            }
        }
    }
}

#[async_trait]
impl<F, Fut, R> OwnerWork for OwnerTurns<'_, F, R>
where
    F: Fn(OwnerId, Fence) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Worked, PortError>> + Send,
    R: rand::CryptoRng + Send,
{
    async fn turn(&self, owner: &OwnerId, entry: Entry, waiter: Option<&Waiter>) -> TurnOutcome {
        let outcome = self.take_turn(owner, entry, waiter).await;
        let i = TurnOutcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        outcome
    }

    fn hand_off(&self, owner: OwnerId) {
        self.handed_off.lock().unwrap_or_else(PoisonError::into_inner).push(owner);
    }

    fn must_stop(&self) -> bool {
        self.fatal.lock().unwrap_or_else(PoisonError::into_inner).is_some()
    }

    fn instance(&self) -> Option<&str> {
        Some(&self.instance)
    }
}

impl<F, Fut, R> OwnerTurns<'_, F, R>
where
    F: Fn(OwnerId, Fence) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Worked, PortError>> + Send,
    R: rand::CryptoRng + Send,
{
    async fn take_turn(&self, owner: &OwnerId, _entry: Entry, waiter: Option<&Waiter>) -> TurnOutcome {
        if self.must_stop() {
            return TurnOutcome::Failed;
        }
        let token = self.token();
        let guard = LeaseGuard::new(self.leases, self.clock, LeaseName::owner(owner.as_str()), self.ttl);
        let sent = self.clock.now();
        let answer = match (self.marks, self.wake, waiter) {
            (Some(marks), wake, waiter) => {
                marks.acquire_stamped(owner, &token, self.ttl, waiter.filter(|_| wake.is_some())).await
            }
            (None, Some(wake), Some(waiter)) => wake.acquire_or_wait(owner, &token, self.ttl, waiter).await,
            _ => self.leases.acquire(guard.lease(), &token, self.ttl).await,
        };
        let begun = match guard.start(Some(answer), sent) {
            Start::Run(begun) => begun,
            Start::Skipped { .. } => return TurnOutcome::ClaimBusy,
            Start::Refused { error, timed_out } => {
                if timed_out {
                    // The acquire may have landed: give the claim back at once.
                    self.release(&guard, owner, &token, false, false).await;
                }
                return self.failed(error);
            }
        };
        // An enforced guard's work always holds the claim's fence.
        let Some(fence) = begun.held.fence().cloned() else { return TurnOutcome::Failed };
        let (ended, _) = guard.keep_while(&begun, &token, (self.work)(owner.clone(), fence)).await;
        let more = matches!(ended, Ended::Done(Ok(Worked { more: true, .. })));
        let drained = matches!(ended, Ended::Done(Ok(Worked { more: false, .. })));
        self.release(&guard, owner, &token, more, drained).await;
        match ended {
            Ended::Done(Ok(Worked { items: 0, more: false })) => TurnOutcome::Done,
            Ended::Done(Ok(Worked { more, .. })) => TurnOutcome::Productive { more },
            Ended::Done(Err(e)) => self.failed(e),
            // The claim was lost mid-work: another instance may hold it now.
            Ended::Stopped(..) => TurnOutcome::Failed,
            Ended::Panicked(_) => {
                self.panics.fetch_add(1, Ordering::Relaxed);
                TurnOutcome::Failed
            }
        }
    }
}

//! The drain stamps of the broken stores.

use std::time::Duration;

use async_trait::async_trait;

use super::{BrokenStore, Defect, YieldNow};
use crate::admission::OwnerId;
use crate::error::PortError;
use crate::memory::store::{self as mem, State};
use crate::ports::{Acquire, DrainStamps, LeaseName, OwnerClaim, Release, StampedClaim, Waiter, WakeRelease};
use crate::time::Time;
use crate::token::LeaseToken;

/// How long after its drain began a stamp lives with [`Defect::StampsLapse`].
const STAMP_TTL: Duration = Duration::from_secs(1);

impl BrokenStore {
    /// The owner's stamp as this store reads it.
    fn stamp_in(&self, s: &State, now: Time, owner: &OwnerId) -> Option<Duration> {
        let stamp = s.drains.get(owner.as_str()).and_then(|row| row.mark)?;
        let age = now.saturating_since(stamp);
        (!(self.is(Defect::StampsLapse) && age >= STAMP_TTL)).then_some(age)
    }

    /// The answer for one owner, registering `waiter` on a held claim.
    fn stamped_in(&self, s: &mut State, now: Time, owner: &OwnerId, waiter: Option<&Waiter>) -> StampedClaim {
        let claim = mem::owner_claim(s, now, owner);
        if let (OwnerClaim::Busy { .. }, Some(waiter)) = (&claim, waiter) {
            mem::register(s, now, owner, waiter);
        }
        let drained = self.stamp_in(s, now, owner);
        StampedClaim { claim, drained }
    }
}

#[async_trait]
impl DrainStamps for BrokenStore {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        self.stall().await;
        if self.failing(Defect::StampsErrorAsAnswer) {
            return Ok(vec![StampedClaim { claim: OwnerClaim::Free, drained: None }; owners.len()]);
        }
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = if self.is(Defect::StampedPeekTwoTrips) {
            let claims = self.call("peek_stamped", |s, now| {
                Ok(owners.iter().map(|o| self.stamped_in(s, now, o, waiter).claim).collect::<Vec<_>>())
            })?;
            YieldNow(false).await;
            self.call("peek_stamped", |s, now| {
                Ok(owners
                    .iter()
                    .zip(claims)
                    .map(|(o, claim)| StampedClaim { claim, drained: self.stamp_in(s, now, o) })
                    .collect::<Vec<_>>())
            })?
        } else {
            self.call("peek_stamped", |s, now| {
                Ok(owners.iter().map(|o| self.stamped_in(s, now, o, waiter)).collect::<Vec<_>>())
            })?
        };
        for m in &mut out {
            if self.is(Defect::StampedPeekMissesHeld) {
                m.claim = OwnerClaim::Free;
            }
            if self.is(Defect::UnstampedAnswersZero) && m.drained.is_none() {
                m.drained = Some(Duration::ZERO);
            }
        }
        Ok(out)
    }

    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        self.stall().await;
        if self.failing(Defect::StampsErrorAsAnswer) {
            return Ok(Acquire::Acquired { fence: 1 });
        }
        let lease = LeaseName::owner(owner.as_str());
        // The upsert of a peek-then-upsert store: whatever the claim holds now.
        let mut upsert = false;
        if self.is(Defect::StampedAcquirePeekThenUpsert) {
            let claim = self.call("acquire_stamped", |s, now| Ok(mem::owner_claim(s, now, owner)))?;
            if let OwnerClaim::Busy { holder, remaining } = claim {
                return Ok(Acquire::Busy { holder, remaining });
            }
            YieldNow(false).await;
            upsert = true;
        }
        self.call("acquire_stamped", |s, now| {
            if let Some(row) = s.leases.get_mut(&lease) {
                if self.is(Defect::StampedAcquireIgnoresHolder) || upsert {
                    row.held = None;
                }
                if self.is(Defect::StampedAcquireRestartsFence) && row.holder(now).is_none() {
                    row.fence = 0;
                }
            }
            let got = mem::acquire(s, now, &lease, token, ttl);
            match (&got, waiter) {
                (Acquire::Acquired { .. }, _) => {
                    if let Some(waiter) = waiter {
                        mem::unregister(s, owner, &waiter.instance);
                    }
                    let row = s.drains.entry(owner.as_str().to_owned()).or_default();
                    row.start = Some((token.as_str().to_owned(), now));
                    if self.is(Defect::StampAtAcquire) {
                        row.mark = Some(now);
                    }
                }
                (Acquire::Busy { .. }, Some(waiter)) => mem::register(s, now, owner, waiter),
                (Acquire::Busy { .. }, None) => {}
            }
            Ok(got)
        })
    }

    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        self.stall().await;
        self.flake()?;
        self.call("release_drained", |s, now| {
            let lease = LeaseName::owner(owner.as_str());
            if self.is(Defect::DrainedReleaseIgnoresToken)
                && let Some(row) = s.leases.get_mut(&lease)
                && row.holder(now).is_some()
            {
                row.held = Some((token.as_str().to_owned(), row.holder(now).map_or(now, |(_, until)| until)));
            }
            let release = mem::release(s, now, &lease, token);
            if release == Release::Released
                && self.is(Defect::StampedReleaseResetsFence)
                && let Some(row) = s.leases.get_mut(&lease)
            {
                row.fence = 0;
            }
            // Whether this store publishes: ours and released (or, with the defects,
            // not ours, or not released), drained (or not).
            let publishes = |holder: &str| {
                let ours = holder == token.as_str() || self.is(Defect::StampAfterPlainAcquire);
                let released = release == Release::Released || self.is(Defect::StampOnExpiredOwn);
                ours && released && (drained || self.is(Defect::StampWithoutDrained))
            };
            if let Some(row) = s.drains.get_mut(owner.as_str())
                && let Some((holder, start)) = row.start.clone()
                && (release == Release::Released || publishes(&holder))
            {
                row.start = None;
                if publishes(&holder) {
                    let at = if self.is(Defect::StampAtRelease) { now } else { start };
                    row.mark = Some(row.mark.map_or(at, |m| m.max(at)));
                }
            }
            let woke = wake && release == Release::Released && mem::wake_one(s, owner);
            Ok(WakeRelease { release, woke })
        })
    }
}

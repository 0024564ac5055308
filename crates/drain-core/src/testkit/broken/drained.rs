//! The drain stamps of the broken stores.

use std::time::Duration;

use async_trait::async_trait;

use super::{BrokenStore, Defect};
use crate::admission::OwnerId;
use crate::error::PortError;
use crate::memory::store as mem;
use crate::ports::{Acquire, DrainStamps, LeaseName, OwnerClaim, Release, StampedClaim, Waiter, WakeRelease};
use crate::token::LeaseToken;

#[async_trait]
impl DrainStamps for BrokenStore {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        self.stall().await;
        if self.failing(Defect::MarksErrorAsAnswer) {
            return Ok(vec![StampedClaim { claim: OwnerClaim::Free, drained: None }; owners.len()]);
        }
        self.flake()?;
        let mut out = self.inner.peek_stamped(owners, waiter).await?;
        for m in &mut out {
            if self.is(Defect::MarkedPeekMissesHeld) {
                m.claim = OwnerClaim::Free;
            }
            if self.is(Defect::UnmarkedAnswersZero) && m.drained.is_none() {
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
        if self.failing(Defect::MarksErrorAsAnswer) {
            return Ok(Acquire::Acquired { fence: 1 });
        }
        self.call("acquire_stamped", |s, now| {
            let lease = LeaseName::owner(owner.as_str());
            if self.is(Defect::MarkedAcquireIgnoresHolder)
                && let Some(row) = s.leases.get_mut(&lease)
            {
                row.held = None;
            }
            let got = mem::acquire(s, now, &lease, token, ttl);
            match (&got, waiter) {
                (Acquire::Acquired { .. }, _) => {
                    if let Some(waiter) = waiter {
                        mem::unregister(s, owner, &waiter.instance);
                    }
                    let row = s.drains.entry(owner.as_str().to_owned()).or_default();
                    row.start = Some((token.as_str().to_owned(), now));
                    if self.is(Defect::MarkAtAcquire) {
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
                && let Some(row) = s.drains.get_mut(owner.as_str())
                && let Some((holder, start)) = row.start.take()
                && (drained || self.is(Defect::MarkWithoutDrained))
                && holder == token.as_str()
            {
                let at = if self.is(Defect::MarkAtRelease) { now } else { start };
                row.mark = Some(row.mark.map_or(at, |m| m.max(at)));
            }
            let woke = wake && release == Release::Released && mem::wake_one(s, owner);
            Ok(WakeRelease { release, woke })
        })
    }
}

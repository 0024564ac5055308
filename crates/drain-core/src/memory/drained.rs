//! [`DrainStamps`] on the memory store: per owner, the start of the current holder's
//! turn (by token) and the published stamp.

use std::time::Duration;

use async_trait::async_trait;

use super::store::{MemoryStore, acquire, owner_claim, register, release, unregister, wake_one};
use crate::admission::OwnerId;
use crate::error::PortError;
use crate::ports::{Acquire, DrainStamps, LeaseName, OwnerClaim, Release, StampedClaim, Waiter, WakeRelease};
use crate::time::Time;
use crate::token::LeaseToken;

/// One owner's drain stamps.
#[derive(Debug, Clone, Default)]
pub(crate) struct DrainRow {
    /// The token that took the claim with `acquire_stamped`, and when.
    pub(crate) start: Option<(String, Time)>,
    /// When the latest drained turn took the claim.
    pub(crate) mark: Option<Time>,
}

#[async_trait]
impl DrainStamps for MemoryStore {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.call("peek_stamped", |s, now| {
            let mut out = Vec::with_capacity(owners.len());
            for owner in owners {
                let claim = owner_claim(s, now, owner);
                if let (OwnerClaim::Busy { .. }, Some(waiter)) = (&claim, waiter) {
                    register(s, now, owner, waiter);
                }
                let mark = s.drains.get(owner.as_str()).and_then(|row| row.mark);
                out.push(StampedClaim { claim, drained: mark.map(|m| now.saturating_since(m)) });
            }
            Ok(out)
        })
    }

    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        self.call("acquire_stamped", |s, now| {
            let got = acquire(s, now, &LeaseName::owner(owner.as_str()), token, ttl);
            match (&got, waiter) {
                (Acquire::Acquired { .. }, _) => {
                    if let Some(waiter) = waiter {
                        unregister(s, owner, &waiter.instance);
                    }
                    s.drains.entry(owner.as_str().to_owned()).or_default().start =
                        Some((token.as_str().to_owned(), now));
                }
                (Acquire::Busy { .. }, Some(waiter)) => register(s, now, owner, waiter),
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
        self.call("release_drained", |s, now| {
            let release = release(s, now, &LeaseName::owner(owner.as_str()), token);
            if release == Release::Released
                && let Some(row) = s.drains.get_mut(owner.as_str())
                && let Some((holder, start)) = row.start.take()
                && drained
                && holder == token.as_str()
            {
                row.mark = Some(row.mark.map_or(start, |m| m.max(start)));
            }
            let woke = wake && release == Release::Released && wake_one(s, owner);
            Ok(WakeRelease { release, woke })
        })
    }
}

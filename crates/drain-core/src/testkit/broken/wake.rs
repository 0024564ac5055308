//! The release wake-up of the broken stores.

use std::time::Duration;

use async_trait::async_trait;
use futures::channel::mpsc;

use super::{BrokenStore, Defect, FAR, YieldNow};
use crate::admission::OwnerId;
use crate::error::PortError;
use crate::memory::store::{self as mem, State};
use crate::ports::{Acquire, LeaseName, OwnerClaim, Release, ReleaseWake, Releases, Waiter, WakeRelease};
use crate::time::Time;
use crate::token::LeaseToken;

impl BrokenStore {
    fn register_in(&self, s: &mut State, now: Time, owner: &OwnerId, waiter: &Waiter) {
        if self.is(Defect::RegisterTwice) {
            let list = s.waiters.entry(owner.as_str().to_owned()).or_default();
            list.instances.push(waiter.instance.clone());
            list.until = now + waiter.ttl;
        } else {
            mem::register(s, now, owner, waiter);
        }
        if self.is(Defect::RegistrationsNeverExpire)
            && let Some(list) = s.waiters.get_mut(owner.as_str())
        {
            list.until = now + FAR;
        }
    }

    fn wake_in(&self, s: &mut State, owner: &OwnerId) -> bool {
        let broadcast = self.is(Defect::WakeBroadcast);
        let Some(list) = s.waiters.get_mut(owner.as_str()) else { return false };
        let chosen: Vec<String> = if self.is(Defect::WakeEveryone) {
            std::mem::take(&mut list.instances)
        } else if self.is(Defect::WakeNewest) {
            list.instances.pop().into_iter().collect()
        } else if broadcast {
            if list.instances.is_empty() { Vec::new() } else { vec![list.instances.remove(0)] }
        } else {
            return mem::wake_one(s, owner);
        };
        if chosen.is_empty() {
            return false;
        }
        let targets: Vec<String> = if broadcast { s.subscribers.keys().cloned().collect() } else { chosen };
        let mut woke = false;
        for instance in targets {
            if let Some(subs) = s.subscribers.get_mut(&instance) {
                subs.retain(|tx: &mpsc::UnboundedSender<OwnerId>| tx.unbounded_send(owner.clone()).is_ok());
                woke |= !subs.is_empty();
            }
        }
        woke
    }
}

#[async_trait]
impl ReleaseWake for BrokenStore {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        self.stall().await;
        self.flake()?;
        self.inner.subscribe(instance).await
    }

    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        self.stall().await;
        if self.failing(Defect::WakeErrorAsAnswer) {
            return Ok(vec![OwnerClaim::Free; owners.len()]);
        }
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        self.call("peek_and_wait", |s, now| {
            let mut out = Vec::with_capacity(owners.len());
            for owner in owners {
                let claim = mem::owner_claim(s, now, owner);
                let held = matches!(claim, OwnerClaim::Busy { .. });
                if (held && !self.is(Defect::PeekDoesNotRegister)) || self.is(Defect::PeekRegistersFree) {
                    self.register_in(s, now, owner, waiter);
                }
                out.push(if self.is(Defect::PeekAndWaitAnswersFree) { OwnerClaim::Free } else { claim });
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
        self.stall().await;
        if self.failing(Defect::WakeErrorAsAnswer) {
            return Ok(Acquire::Acquired { fence: 1 });
        }
        let lease = LeaseName::owner(owner.as_str());
        if self.is(Defect::NonAtomicAcquireOrWait) {
            let held = self.call("acquire_or_wait", |s, now| Ok(mem::owner_claim(s, now, owner)))?;
            if let OwnerClaim::Busy { holder, remaining } = held {
                self.call("acquire_or_wait", |s, now| {
                    self.register_in(s, now, owner, waiter);
                    Ok(())
                })?;
                return Ok(Acquire::Busy { holder, remaining });
            }
            YieldNow(false).await;
            return self.call("acquire_or_wait", |s, now| {
                let row = s.leases.entry(lease.clone()).or_default();
                row.fence += 1;
                row.held = Some((token.as_str().to_owned(), now + ttl));
                let fence = row.fence;
                mem::unregister(s, owner, &waiter.instance);
                Ok(Acquire::Acquired { fence })
            });
        }
        self.call("acquire_or_wait", |s, now| {
            let got = mem::acquire(s, now, &LeaseName::owner(owner.as_str()), token, ttl);
            match got {
                Acquire::Acquired { .. } if self.is(Defect::AcquireKeepsRegistration) => {}
                Acquire::Acquired { .. } => mem::unregister(s, owner, &waiter.instance),
                Acquire::Busy { .. } if self.is(Defect::AcquireDoesNotRegister) => {}
                Acquire::Busy { .. } => self.register_in(s, now, owner, waiter),
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
        self.stall().await;
        if self.failing(Defect::WakeErrorAsAnswer) {
            return Ok(WakeRelease { release: Release::Released, woke: false });
        }
        if self.is(Defect::WakeBeforeRelease) {
            let woke = self.call("release_and_wake", |s, now| {
                let ours =
                    mem::peek(s, now, &LeaseName::owner(owner.as_str())).is_some_and(|h| h.holder == token.holder());
                Ok(wake && ours && self.wake_in(s, owner))
            })?;
            YieldNow(false).await;
            let release = self.call("release_and_wake", |s, now| {
                Ok(mem::release(s, now, &LeaseName::owner(owner.as_str()), token))
            })?;
            return Ok(WakeRelease { release, woke });
        }
        self.call("release_and_wake", |s, now| {
            let lease = LeaseName::owner(owner.as_str());
            let release = if self.is(Defect::WakeReleaseKeepsClaim) {
                let ours = s.leases.get(&lease).and_then(|r| r.holder(now)).is_some_and(|(t, _)| t == token.as_str());
                if ours { Release::Released } else { Release::NotOwner }
            } else {
                mem::release(s, now, &lease, token)
            };
            if release == Release::Released
                && self.is(Defect::WakeReleaseResetsFence)
                && let Some(row) = s.leases.get_mut(&lease)
            {
                row.fence = 0;
            }
            let may_wake = (wake || self.is(Defect::WakeWithoutFlag))
                && (release == Release::Released || self.is(Defect::WakeOnForeignRelease));
            if may_wake && self.is(Defect::WokeWithoutNotifying) {
                // The registration is taken, the notification never sent.
                let taken = s.waiters.get_mut(owner.as_str()).is_some_and(|l| {
                    let had = !l.instances.is_empty();
                    if had {
                        l.instances.remove(0);
                    }
                    had
                });
                return Ok(WakeRelease { release, woke: taken });
            }
            let woke = may_wake && self.wake_in(s, owner);
            Ok(WakeRelease { release, woke: woke && !self.is(Defect::WokeNeverReported) })
        })
    }
}

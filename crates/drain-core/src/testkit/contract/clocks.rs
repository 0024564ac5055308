//! Time in the lease and claim suites: how precisely a store keeps a time to live,
//! and whose clock judges expiry.
//!
//! A store keeps times to live to the millisecond: one that keeps whole seconds
//! frees a 300 ms lease at once and a 1.5 s one after a second. And it judges expiry
//! on its one clock: every instance of the store must agree on whether a lease or
//! claim still holds, whichever instance took it and however far the instances' own
//! clocks are apart (instances of one fleet run on machines whose clocks disagree).

use std::time::Duration;

use super::{Rule, Suite, Violation, token};
use crate::ports::{Acquire, ClaimState, ClaimStore, LeaseName, LeaseStore, MessageId, Release};
use crate::ports::{SettleAction, SettleResult, Settlement};
use crate::token::LeaseToken;

/// Long enough that no instance whose clock agrees with the store's sees it expire.
const LONG: Duration = Duration::from_secs(60);

/// The instances to compare, or `None` (the rule skipped) when there is only one.
fn fleet<'a: 's, 's, S: ?Sized>(s: &mut Suite<'a, S>, store: &'s S) -> Option<Vec<&'s S>> {
    let pool = s.env.pool(store);
    if pool.len() < 2 {
        s.skip(&[Rule::StoreOneClock], "one instance: give ContractEnv::instances two or more");
        return None;
    }
    Some(pool)
}

/// The suite's token for instance `i`'s leases and claims, and a stranger's.
fn takers(n: usize, seed: u64) -> (Vec<LeaseToken>, LeaseToken) {
    let takers = (0..n).map(|i| token(&format!("clock{i}"), seed + i as u64)).collect();
    (takers, token("clock-stranger", seed + 99))
}

/// A long lease taken through one instance is held through every other; a short
/// one that expired is free through every other.
pub(super) async fn leases<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let Some(pool) = fleet(s, store) else { return Ok(()) };
    let n = pool.len();
    let (takers, stranger) = takers(n, 1100);
    let names: Vec<LeaseName> = (0..n).map(|i| LeaseName::queue(s.env.name(&format!("contract-clock-{i}")))).collect();

    for i in 0..n {
        let got = s.call("acquire", pool[i].acquire(&names[i], &takers[i], LONG)).await?;
        s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseAcquireExclusive, || {
            format!("a free lease answered {got:?}")
        })?;
    }
    for (i, j) in pairs(n) {
        let holder = takers[i].holder();
        let peeked = s.call("peek", pool[j].peek(&names[i])).await?;
        let got = s.call("acquire", pool[j].acquire(&names[i], &stranger, LONG)).await?;
        let held = peeked.as_ref().is_some_and(|h| h.holder == holder)
            && matches!(&got, Acquire::Busy { holder: h, .. } if h == holder);
        s.ensure(held, Rule::StoreOneClock, || {
            format!(
                "a {LONG:?} lease taken through instance {i} just before reads {peeked:?} through instance {j}, \
                 whose acquire answered {got:?} (expiry judged on an instance's own clock?)"
            )
        })?;
    }
    for i in 0..n {
        let got = s.call("release", pool[i].release(&names[i], &takers[i])).await?;
        s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || {
            format!("the holder's release answered {got:?}")
        })?;
    }

    let short = s.env.short_ttl;
    for i in 0..n {
        let got = s.call("acquire", pool[i].acquire(&names[i], &takers[i], short)).await?;
        s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseReleaseFrees, || {
            format!("a released lease answered {got:?}")
        })?;
    }
    s.env.wait(short * 3).await;
    for (i, j) in pairs(n) {
        let peeked = s.call("peek", pool[j].peek(&names[i])).await?;
        s.ensure(peeked.is_none(), Rule::StoreOneClock, || {
            format!(
                "a {short:?} lease taken through instance {i} still reads {peeked:?} through instance {j} {:?} later",
                short * 3
            )
        })?;
    }
    for (i, name) in names.iter().enumerate() {
        let j = (i + 1) % n;
        let got = s.call("acquire", pool[j].acquire(name, &stranger, LONG)).await?;
        s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::StoreOneClock, || {
            format!(
                "a {short:?} lease taken through instance {i} answered {got:?} through instance {j} once it expired"
            )
        })?;
        let got = s.call("release", pool[j].release(name, &stranger)).await?;
        s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || {
            format!("the holder's release answered {got:?}")
        })?;
    }
    Ok(())
}

/// A long claim taken through one instance is pending through every other; a short
/// one that expired can be taken through another.
pub(super) async fn claims<S: ClaimStore + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    queue: &str,
) -> Result<(), Violation> {
    let Some(pool) = fleet(s, store) else { return Ok(()) };
    let n = pool.len();
    let (takers, stranger) = takers(n, 1200);
    let id = |what: &str, i: usize| MessageId::String(format!("clock-{what}-{i}"));
    let release = |id: &MessageId| [Settlement { id: id.clone(), action: SettleAction::Release }];

    for i in 0..n {
        let got = s.call("claim_batch", pool[i].claim_batch(queue, &[id("long", i)], &takers[i], LONG)).await?;
        s.ensure(got == [ClaimState::Claimed], Rule::ClaimExclusive, || format!("a free claim answered {got:?}"))?;
    }
    for (i, j) in pairs(n) {
        let got = s.call("claim_batch", pool[j].claim_batch(queue, &[id("long", i)], &stranger, LONG)).await?;
        let want = ClaimState::PendingElsewhere { holder: takers[i].holder().to_owned() };
        s.ensure(got == [want], Rule::StoreOneClock, || {
            format!(
                "a {LONG:?} claim taken through instance {i} just before answered {got:?} through instance {j} \
                 (expiry judged on an instance's own clock?)"
            )
        })?;
    }
    for i in 0..n {
        let got =
            s.call("settle_batch", pool[i].settle_batch(queue, &release(&id("long", i)), &takers[i], LONG)).await?;
        s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
            format!("the holder's release answered {got:?}")
        })?;
    }

    let short = s.env.short_ttl;
    for i in 0..n {
        let got = s.call("claim_batch", pool[i].claim_batch(queue, &[id("short", i)], &takers[i], short)).await?;
        s.ensure(got == [ClaimState::Claimed], Rule::ClaimExclusive, || format!("a free claim answered {got:?}"))?;
    }
    s.env.wait(short * 3).await;
    for i in 0..n {
        let j = (i + 1) % n;
        let got = s.call("claim_batch", pool[j].claim_batch(queue, &[id("short", i)], &stranger, LONG)).await?;
        s.ensure(got == [ClaimState::Claimed], Rule::StoreOneClock, || {
            format!(
                "a {short:?} claim taken through instance {i} answered {got:?} through instance {j} {:?} later",
                short * 3
            )
        })?;
        let got =
            s.call("settle_batch", pool[j].settle_batch(queue, &release(&id("short", i)), &stranger, LONG)).await?;
        s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
            format!("the holder's release answered {got:?}")
        })?;
    }
    Ok(())
}

/// The times to live a store must keep to the millisecond: the suite's short one
/// (under a second unless the environment says otherwise), and a second and a half,
/// which whole seconds cut to one.
fn precise_ttls<S: ?Sized>(s: &Suite<'_, S>) -> [Duration; 2] {
    [s.env.short_ttl, Duration::from_millis(1500)]
}

/// When to ask whether something taken for `ttl` still holds: late enough that a
/// store keeping whole seconds has let it go, early enough that a call answers
/// before `ttl` has passed.
fn probe_at(ttl: Duration) -> Duration {
    ttl - (ttl / 2).min(Duration::from_millis(250))
}

/// A lease still holds shortly before its time to live ends. A `Busy` answer counts
/// only when it came back before the lease could have expired; a machine stalled
/// that long tries again, up to three times.
pub(super) async fn lease_ttls<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    for (k, ttl) in precise_ttls(s).into_iter().enumerate() {
        let lease = LeaseName::queue(s.env.name(&format!("contract-ttl-{k}")));
        let (a, b) = (token("ttl-alpha", 1300 + k as u64), token("ttl-beta", 1310 + k as u64));
        for _ in 0..3 {
            let sent = s.env.clock.now();
            let got = s.call("acquire", store.acquire(&lease, &a, ttl)).await?;
            s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseExpires, || {
                format!("a lease taken for {ttl:?} and let expire answered {got:?}")
            })?;
            s.env.clock.sleep_until(sent + probe_at(ttl)).await;
            let got = s.call("acquire", store.acquire(&lease, &b, LONG)).await?;
            let answered = s.env.clock.now().saturating_since(sent);
            match got {
                Acquire::Busy { .. } => {
                    s.call("release", store.release(&lease, &a)).await?;
                    break;
                }
                Acquire::Acquired { .. } => {
                    s.ensure(answered >= ttl, Rule::LeaseExpires, || {
                        format!(
                            "a lease taken for {ttl:?} was free again {answered:?} later \
                             (its time to live cut to whole seconds?)"
                        )
                    })?;
                    s.call("release", store.release(&lease, &b)).await?;
                }
            }
        }
    }
    Ok(())
}

/// A pending claim still holds shortly before its time to live ends; as for leases.
pub(super) async fn claim_ttls<S: ClaimStore + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    queue: &str,
) -> Result<(), Violation> {
    for (k, ttl) in precise_ttls(s).into_iter().enumerate() {
        let (a, b) = (token("ttl-alpha", 1400 + k as u64), token("ttl-beta", 1410 + k as u64));
        for attempt in 0..3 {
            let id = [MessageId::String(format!("ttl-{k}-{attempt}"))];
            let release = |id: &[MessageId; 1]| [Settlement { id: id[0].clone(), action: SettleAction::Release }];
            let sent = s.env.clock.now();
            let got = s.call("claim_batch", store.claim_batch(queue, &id, &a, ttl)).await?;
            s.ensure(got == [ClaimState::Claimed], Rule::ClaimExclusive, || format!("a free claim answered {got:?}"))?;
            s.env.clock.sleep_until(sent + probe_at(ttl)).await;
            let got = s.call("claim_batch", store.claim_batch(queue, &id, &b, LONG)).await?;
            let answered = s.env.clock.now().saturating_since(sent);
            if got != [ClaimState::Claimed] {
                s.call("settle_batch", store.settle_batch(queue, &release(&id), &a, LONG)).await?;
                break;
            }
            s.ensure(answered >= ttl, Rule::ClaimPendingExpires, || {
                format!(
                    "a claim taken for {ttl:?} was free again {answered:?} later (its time to live cut to whole seconds?)"
                )
            })?;
            s.call("settle_batch", store.settle_batch(queue, &release(&id), &b, LONG)).await?;
        }
    }
    Ok(())
}

/// Every ordered pair of two different instances.
fn pairs(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).flat_map(move |i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
}

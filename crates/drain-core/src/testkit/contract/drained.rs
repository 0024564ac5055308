use std::time::Duration;

use futures::future::join_all;

use super::{Checked, ContractEnv, Rule, Suite, Violation, token};
use crate::admission::OwnerId;
use crate::ports::{
    Acquire, DrainStamps, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release, StampedClaim, Waiter,
};
use crate::time::Time;
use crate::token::LeaseToken;

const LONG: Duration = Duration::from_secs(60);
/// How long a stamp must still be answered when the suite looks again: longer than
/// a store that lets stamps lapse after a second or two keeps them.
const KEEP: Duration = Duration::from_secs(5);
/// The store's rounding of a stamp's age to a millisecond, either way.
const ROUNDING: Duration = Duration::from_millis(2);

/// The [`DrainStamps`] contract, over a store that also holds the owners' claims as
/// [`LeaseName::owner`] leases: a stamped peek answers the claims as a plain peek, no
/// stamp for an owner never drained, and each owner's claim and stamp of one instant;
/// a stamped acquire answers as acquire (fences included), is exclusive against
/// concurrent stamped acquires through several instances, and stamps nothing; a release with `drained`
/// by the holder that took the claim with a stamped acquire publishes that acquire's
/// time (a later peek answers at least the time since the release and at most the
/// time since the acquire was sent) and keeps the fence; a release without `drained`,
/// by anyone else, of our own expired claim, or of a claim taken by a plain acquire,
/// leaves the stamp alone; a stamp is still answered seconds later; and (with an
/// outage hook) errors never pass for answers.
///
/// # Errors
/// The first rule the store broke.
pub async fn drain_stamps<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: LeaseStore + OwnerClaims + DrainStamps + ?Sized,
{
    let mut s = Suite::new(env);
    s.ensure(store.drain_stamps().is_some(), Rule::StampsOffered, || {
        "the store implements the drain stamps, but OwnerClaims::drain_stamps answers None".into()
    })?;
    let owner = |n: &str| OwnerId::from(env.name(n));
    let (a, b) = (token("stamp-alpha", 81), token("stamp-beta", 82));
    let (o1, o2, never) = (owner("stamp-o1"), owner("stamp-o2"), owner("stamp-never"));

    let got = s.call("peek_stamped", store.peek_stamped(&[], None)).await?;
    s.ensure(got.is_empty(), Rule::StampsPeekClaims, || format!("an empty peek answered {got:?}"))?;

    // A stamped acquire answers as acquire and stamps nothing.
    acquired(&mut s, store, &o1, &a).await?;
    let got = s.call("acquire_stamped", store.acquire_stamped(&o1, &b, LONG, None)).await?;
    s.ensure(matches!(&got, Acquire::Busy { holder, .. } if holder == a.holder()), Rule::StampsAcquire, || {
        format!("a second acquire of alpha's claim answered {got:?}")
    })?;
    let got = s.call("peek_stamped", store.peek_stamped(&[o1.clone(), never.clone()], None)).await?;
    let right = got.len() == 2
        && matches!(&got[0].claim, OwnerClaim::Busy { holder, .. } if holder == a.holder())
        && got[1].claim == OwnerClaim::Free;
    s.ensure(right, Rule::StampsPeekClaims, || format!("a held and a free owner answered {got:?}"))?;
    s.ensure(got.len() == 2 && got[1].drained.is_none(), Rule::StampsPeekNone, || {
        format!("an owner never taken answered {got:?}")
    })?;
    s.ensure(got.len() == 2 && got[0].drained.is_none(), Rule::StampsAcquireUnstamped, || {
        format!("after an acquire and no drain, the peek answered {got:?}")
    })?;

    // A release by someone else, or without `drained`, publishes nothing.
    let got = s.call("release_drained", store.release_drained(&o1, &b, true, false)).await?;
    s.ensure(got.release == Release::NotOwner, Rule::StampsRelease, || {
        format!("beta's release of alpha's claim answered {got:?}")
    })?;
    none(&mut s, store, &o1, Rule::StampsReleaseNotOwner, "a drained release by another token").await?;
    let got = s.call("release_drained", store.release_drained(&o1, &a, false, false)).await?;
    s.ensure(got.release == Release::Released, Rule::StampsRelease, || format!("alpha's release answered {got:?}"))?;
    let peeked = s.call("peek", store.peek(&LeaseName::owner(o1.as_str()))).await?;
    s.ensure(peeked.is_none(), Rule::StampsRelease, || format!("after alpha's release, peek answered {peeked:?}"))?;
    none(&mut s, store, &o1, Rule::StampsReleaseQuiet, "a release without drained").await?;

    fences(&mut s, store, &o1, &a, &b).await?;

    // A drained release publishes the acquire's time.
    let sent = s.env.clock.now();
    acquired(&mut s, store, &o2, &a).await?;
    let taken = s.env.clock.now();
    s.env.wait(s.env.short_ttl).await;
    let got = s.call("release_drained", store.release_drained(&o2, &a, true, false)).await?;
    s.ensure(got.release == Release::Released && !got.woke, Rule::StampsRelease, || {
        format!("alpha's drained release answered {got:?}")
    })?;
    let released = s.env.clock.now();
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(&o2), None)).await?;
    let answered = s.env.clock.now();
    // The stamp is the acquire's time: at least as old as the time from the
    // acquire's answer to the release's, at most the time since the acquire was sent.
    let (low, high) = (released.saturating_since(taken), answered.saturating_since(sent));
    let right = matches!(got.as_slice(), [StampedClaim { claim: OwnerClaim::Free, drained: Some(d) }]
        if *d + ROUNDING >= low && *d <= high + ROUNDING);
    s.ensure(right, Rule::StampsReleaseDrained, || {
        format!("a drain held for {low:?} and taken at most {high:?} before the answer answered {got:?}")
    })?;
    let first = got.first().and_then(|m| m.drained).unwrap_or_default();

    // A later turn that does not drain leaves the stamp where it was.
    acquired(&mut s, store, &o2, &b).await?;
    let got = s.call("release_drained", store.release_drained(&o2, &b, false, false)).await?;
    s.ensure(got.release == Release::Released, Rule::StampsRelease, || format!("beta's release answered {got:?}"))?;
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(&o2), None)).await?;
    let right = matches!(got.as_slice(), [StampedClaim { drained: Some(d), .. }] if *d + ROUNDING >= first);
    s.ensure(right, Rule::StampsReleaseQuiet, || {
        format!("after an undrained turn the stamp, {first:?} old before, answered {got:?}")
    })?;

    unstamped_releases(&mut s, store, &owner("stamp-o3"), &a, &b).await?;
    super::clocks::leases(&mut s, store).await?;
    exclusion(&mut s, store).await?;
    atomic_peeks(&mut s, store).await?;
    keeps(&mut s, store, &o2, released).await?;

    if let Some(outage) = s.begin_outage(&[Rule::StampsError]).await {
        let peeked = s.timed(store.peek_stamped(std::slice::from_ref(&o2), None)).await;
        let taken = s.timed(store.acquire_stamped(&o1, &a, LONG, None)).await;
        let released = s.timed(store.release_drained(&o1, &a, true, false)).await;
        outage.end().await;
        s.must_fail(Rule::StampsError, "peek_stamped", &peeked)?;
        s.must_fail(Rule::StampsError, "acquire_stamped", &taken)?;
        s.must_fail(Rule::StampsError, "release_drained", &released)?;
        // The acquire may have landed once the store answered again: give it back.
        let _ = s.call("release", store.release(&LeaseName::owner(o1.as_str()), &a)).await?;
    }
    Ok(s.finish())
}

/// Fences run on across plain and stamped acquires and releases: a stamped acquire
/// hands out a larger fence than a plain one before it, and the next acquire after a
/// drained release a larger one again.
async fn fences<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    o: &OwnerId,
    a: &LeaseToken,
    b: &LeaseToken,
) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let lease = LeaseName::owner(o.as_str());
    let f0 = plain(s, store, &lease, b).await?;
    let got = s.call("acquire_stamped", store.acquire_stamped(o, a, LONG, None)).await?;
    let right = matches!(got, Acquire::Acquired { fence } if fence > f0);
    s.ensure(right, Rule::StampsAcquire, || format!("after a plain acquire with fence {f0}, answered {got:?}"))?;
    let f1 = if let Acquire::Acquired { fence } = got { fence } else { f0 };
    let got = s.call("release_drained", store.release_drained(o, a, false, false)).await?;
    s.ensure(got.release == Release::Released, Rule::StampsRelease, || format!("alpha's release answered {got:?}"))?;
    let got = s.call("acquire", store.acquire(&lease, b, LONG)).await?;
    let right = matches!(got, Acquire::Acquired { fence } if fence > f1);
    s.ensure(right, Rule::StampsReleaseFence, || {
        format!("after a release of the claim taken with fence {f1}, the next acquire answered {got:?}")
    })?;
    let got = s.call("release", store.release(&lease, b)).await?;
    s.ensure(got == Release::Released, Rule::StampsRelease, || format!("beta's plain release answered {got:?}"))
}

/// A plain acquire of `lease` by `t`, released at once: its fence.
async fn plain<S>(s: &mut Suite<'_, S>, store: &S, lease: &LeaseName, t: &LeaseToken) -> Result<u64, Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let got = s.call("acquire", store.acquire(lease, t, LONG)).await?;
    let Acquire::Acquired { fence } = got else {
        return Err(Violation {
            rule: Rule::StampsRelease,
            detail: format!("a free claim's acquire answered {got:?}"),
        });
    };
    let got = s.call("release", store.release(lease, t)).await?;
    s.ensure(got == Release::Released, Rule::StampsRelease, || format!("a plain release answered {got:?}"))?;
    Ok(fence)
}

/// Our own expired claim's drained release answers `NotOwner` and stamps nothing;
/// then a claim taken by a plain acquire, released drained, stamps nothing either
/// (the expired turn's start is still all the store knows of).
async fn unstamped_releases<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    o: &OwnerId,
    a: &LeaseToken,
    b: &LeaseToken,
) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let short = s.env.short_ttl;
    let got = s.call("acquire_stamped", store.acquire_stamped(o, a, short, None)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::StampsAcquire, || {
        format!("a stamped acquire of a free claim answered {got:?}")
    })?;
    s.env.wait(short * 3).await;
    let got = s.call("release_drained", store.release_drained(o, a, true, false)).await?;
    s.ensure(got.release == Release::NotOwner, Rule::StampsRelease, || {
        format!("a drained release of our own claim {:?} after it expired answered {got:?}", short * 3)
    })?;
    none(s, store, o, Rule::StampsReleaseNotOwner, "a drained release of our own expired claim").await?;

    let lease = LeaseName::owner(o.as_str());
    let got = s.call("acquire", store.acquire(&lease, b, LONG)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::StampsRelease, || {
        format!("a plain acquire of an expired claim answered {got:?}")
    })?;
    let got = s.call("release_drained", store.release_drained(o, b, true, false)).await?;
    s.ensure(got.release == Release::Released, Rule::StampsRelease, || {
        format!("the plain holder's drained release answered {got:?}")
    })?;
    none(s, store, o, Rule::StampsReleaseUnstarted, "a drained release of a claim taken by a plain acquire").await
}

/// Rounds of concurrent stamped acquires of a fresh owner's claim, through every
/// instance: exactly one wins. The instances must agree on expiry first, or a claim
/// held for one is free for another and the race says nothing of atomicity.
async fn exclusion<S>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let pool = s.env.pool(store);
    let callers = s.env.callers;
    let tokens: Vec<LeaseToken> = (0..callers).map(|i| token(&format!("stamp-racer-{i}"), 300 + i as u64)).collect();
    for round in 0..s.env.rounds {
        let o = OwnerId::from(s.env.name(&format!("stamp-race-{round}")));
        let lease = LeaseName::owner(o.as_str());
        let env = s.env;
        let answers = join_all(tokens.iter().enumerate().map(|(i, t)| {
            let on = pool[i % pool.len()];
            let o = &o;
            async move { env.within(env.deadline, on.acquire_stamped(o, t, LONG, None)).await }
        }))
        .await;
        let mut winners = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let answer = s.timely("acquire_stamped", answer)?;
            if matches!(s.answer("acquire_stamped", answer)?, Acquire::Acquired { .. }) {
                winners.push(i);
            }
        }
        s.ensure(winners.len() == 1, Rule::StampsAcquireExclusive, || {
            format!(
                "round {round}: {} of {callers} concurrent acquires of a free claim answered Acquired",
                winners.len()
            )
        })?;
        for i in winners {
            let _ = s.call("release", store.release(&lease, &tokens[i])).await?;
        }
    }
    Ok(())
}

/// Rounds of a drained release racing stamped peeks of its owner, with a waiter and
/// without, through every instance: each peek answers the claim held and no stamp (before the release), or
/// the claim free and the stamp (after it), never one half of each.
async fn atomic_peeks<S>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let pool = s.env.pool(store);
    let peeks = s.env.callers.max(2);
    // Every other peek registers a waiter nobody listens for, as admission's do.
    let waiter = Waiter { instance: s.env.name("stamp-peeker"), ttl: s.env.short_ttl };
    for round in 0..s.env.rounds {
        let o = OwnerId::from(s.env.name(&format!("stamp-peek-{round}")));
        let h = token("stamp-peek-holder", 400 + round as u64);
        acquired(s, store, &o, &h).await?;
        // The release goes in at a place that turns with the round.
        let at = round % peeks;
        let env = s.env;
        let (o, h, waiter) = (&o, &h, &waiter);
        let calls = (0..=peeks).map(|i| {
            let on = pool[i % pool.len()];
            async move {
                if i == at {
                    let r = env.within(env.deadline, on.release_drained(o, h, true, false)).await;
                    (Some(r), None)
                } else {
                    let w = (i % 2 == 1).then_some(waiter);
                    let p = env.within(env.deadline, on.peek_stamped(std::slice::from_ref(o), w)).await;
                    (None, Some(p))
                }
            }
        });
        let mut released = false;
        let mut answers = Vec::new();
        for (r, p) in join_all(calls).await {
            if let Some(r) = r {
                let r = s.timely("release_drained", r)?;
                released = s.answer("release_drained", r)?.release == Release::Released;
            }
            if let Some(p) = p {
                let p = s.timely("peek_stamped", p)?;
                answers.push(s.answer("peek_stamped", p)?);
            }
        }
        s.ensure(released, Rule::StampsRelease, || {
            format!("round {round}: the holder's drained release did not release")
        })?;
        for got in answers {
            let right = match got.as_slice() {
                [StampedClaim { claim: OwnerClaim::Busy { holder, .. }, drained: None }] => holder == h.holder(),
                [StampedClaim { claim: OwnerClaim::Free, drained: Some(_) }] => true,
                _ => false,
            };
            s.ensure(right, Rule::StampsPeekAtomic, || {
                format!(
                    "round {round}: a peek racing the holder's drained release answered {got:?}, \
                     neither the claim held and no stamp nor the claim free and the stamp"
                )
            })?;
        }
    }
    Ok(())
}

/// The stamp published at `released` is still answered [`KEEP`] later.
async fn keeps<S>(s: &mut Suite<'_, S>, store: &S, o: &OwnerId, released: Time) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let until = released + KEEP;
    if s.env.clock.now() < until {
        s.env.clock.sleep_until(until).await;
    }
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(o), None)).await?;
    let waited = s.env.clock.now().saturating_since(released);
    let right = matches!(got.as_slice(), [StampedClaim { drained: Some(d), .. }] if *d + ROUNDING >= waited);
    s.ensure(right, Rule::StampsKeeps, || format!("{waited:?} after a drained release, the peek answered {got:?}"))
}

async fn acquired<S>(s: &mut Suite<'_, S>, store: &S, owner: &OwnerId, t: &LeaseToken) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let got = s.call("acquire_stamped", store.acquire_stamped(owner, t, LONG, None)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::StampsAcquire, || {
        format!("a stamped acquire of {owner}'s free claim answered {got:?}")
    })
}

async fn none<S>(s: &mut Suite<'_, S>, store: &S, owner: &OwnerId, rule: Rule, after: &str) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(owner), None)).await?;
    s.ensure(matches!(got.as_slice(), [StampedClaim { drained: None, .. }]), rule, || {
        format!("after {after}, the peek answered {got:?}")
    })
}

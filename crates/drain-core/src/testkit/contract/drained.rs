use std::time::Duration;

use super::{Checked, ContractEnv, Rule, Suite, Violation, token};
use crate::admission::OwnerId;
use crate::ports::{Acquire, DrainStamps, LeaseName, LeaseStore, OwnerClaim, Release, StampedClaim};
use crate::token::LeaseToken;

const LONG: Duration = Duration::from_secs(60);

/// The [`DrainStamps`] contract, over a store that also holds the owners' claims as
/// [`LeaseName::owner`] leases: a marked peek answers the claims as a plain peek and
/// no mark for an owner never drained; a marked acquire answers as acquire and marks
/// nothing; a release with `drained` by the holder publishes the acquire's time (a
/// later peek answers at least the time since the release and at most the time since
/// the acquire was sent); a release without `drained`, or by anyone else, leaves the
/// mark alone; and (with an outage hook) errors never pass for answers.
///
/// # Errors
/// The first rule the store broke.
pub async fn drain_stamps<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let mut s = Suite::new(env);
    let owner = |n: &str| OwnerId::from(env.name(n));
    let (a, b) = (token("mark-alpha", 81), token("mark-beta", 82));
    let (o1, o2, never) = (owner("mark-o1"), owner("mark-o2"), owner("mark-never"));

    let got = s.call("peek_stamped", store.peek_stamped(&[], None)).await?;
    s.ensure(got.is_empty(), Rule::MarksPeekClaims, || format!("an empty peek answered {got:?}"))?;

    // A marked acquire answers as acquire and marks nothing.
    acquired(&mut s, store, &o1, &a).await?;
    let got = s.call("acquire_stamped", store.acquire_stamped(&o1, &b, LONG, None)).await?;
    s.ensure(matches!(&got, Acquire::Busy { holder, .. } if holder == a.holder()), Rule::MarksAcquire, || {
        format!("a second acquire of alpha's claim answered {got:?}")
    })?;
    let got = s.call("peek_stamped", store.peek_stamped(&[o1.clone(), never.clone()], None)).await?;
    let right = got.len() == 2
        && matches!(&got[0].claim, OwnerClaim::Busy { holder, .. } if holder == a.holder())
        && got[1].claim == OwnerClaim::Free;
    s.ensure(right, Rule::MarksPeekClaims, || format!("a held and a free owner answered {got:?}"))?;
    s.ensure(got.len() == 2 && got[1].drained.is_none(), Rule::MarksPeekNone, || {
        format!("an owner never taken answered {got:?}")
    })?;
    s.ensure(got.len() == 2 && got[0].drained.is_none(), Rule::MarksAcquireUnmarked, || {
        format!("after an acquire and no drain, the peek answered {got:?}")
    })?;

    // A release without `drained`, or by someone else, publishes nothing.
    let got = s.call("release_drained", store.release_drained(&o1, &b, true, false)).await?;
    s.ensure(got.release == Release::NotOwner, Rule::MarksRelease, || {
        format!("beta's release of alpha's claim answered {got:?}")
    })?;
    none(&mut s, store, &o1, "a drained release by another token").await?;
    let got = s.call("release_drained", store.release_drained(&o1, &a, false, false)).await?;
    s.ensure(got.release == Release::Released, Rule::MarksRelease, || format!("alpha's release answered {got:?}"))?;
    let peeked = s.call("peek", store.peek(&LeaseName::owner(o1.as_str()))).await?;
    s.ensure(peeked.is_none(), Rule::MarksRelease, || format!("after alpha's release, peek answered {peeked:?}"))?;
    none(&mut s, store, &o1, "a release without drained").await?;

    // A drained release publishes the acquire's time.
    let sent = s.env.clock.now();
    acquired(&mut s, store, &o2, &a).await?;
    let taken = s.env.clock.now();
    s.env.wait(s.env.short_ttl).await;
    let got = s.call("release_drained", store.release_drained(&o2, &a, true, false)).await?;
    s.ensure(got.release == Release::Released && !got.woke, Rule::MarksRelease, || {
        format!("alpha's drained release answered {got:?}")
    })?;
    let released = s.env.clock.now();
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(&o2), None)).await?;
    let answered = s.env.clock.now();
    // The mark is the acquire's time: at least as old as the time from the acquire's
    // answer to the release's, at most the time since the acquire was sent (give or
    // take the store's rounding to a millisecond).
    let (low, high) = (released.saturating_since(taken), answered.saturating_since(sent));
    let rounding = Duration::from_millis(2);
    let right = matches!(got.as_slice(), [StampedClaim { claim: OwnerClaim::Free, drained: Some(d) }]
        if *d + rounding >= low && *d <= high + rounding);
    s.ensure(right, Rule::MarksReleaseStamps, || {
        format!("a drain held for {low:?} and taken at most {high:?} before the answer answered {got:?}")
    })?;
    let first = got.first().and_then(|m| m.drained).unwrap_or_default();

    // A later turn that does not drain leaves the mark where it was.
    acquired(&mut s, store, &o2, &b).await?;
    let got = s.call("release_drained", store.release_drained(&o2, &b, false, false)).await?;
    s.ensure(got.release == Release::Released, Rule::MarksRelease, || format!("beta's release answered {got:?}"))?;
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(&o2), None)).await?;
    let right =
        matches!(got.as_slice(), [StampedClaim { drained: Some(d), .. }] if *d + Duration::from_millis(2) >= first);
    s.ensure(right, Rule::MarksReleaseQuiet, || {
        format!("after an undrained turn the mark, {first:?} old before, answered {got:?}")
    })?;

    if let Some(outage) = s.begin_outage(&[Rule::MarksError]).await {
        let peeked = s.timed(store.peek_stamped(std::slice::from_ref(&o2), None)).await;
        let taken = s.timed(store.acquire_stamped(&o1, &a, LONG, None)).await;
        outage.end().await;
        s.must_fail(Rule::MarksError, "peek_stamped", &peeked)?;
        s.must_fail(Rule::MarksError, "acquire_stamped", &taken)?;
        // The acquire may have landed before the outage began: give it back.
        let _ = s.call("release", store.release(&LeaseName::owner(o1.as_str()), &a)).await?;
    }
    Ok(s.finish())
}

async fn acquired<S>(s: &mut Suite<'_, S>, store: &S, owner: &OwnerId, t: &LeaseToken) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let got = s.call("acquire_stamped", store.acquire_stamped(owner, t, LONG, None)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::MarksAcquire, || {
        format!("a marked acquire of {owner}'s free claim answered {got:?}")
    })
}

async fn none<S>(s: &mut Suite<'_, S>, store: &S, owner: &OwnerId, after: &str) -> Result<(), Violation>
where
    S: LeaseStore + DrainStamps + ?Sized,
{
    let got = s.call("peek_stamped", store.peek_stamped(std::slice::from_ref(owner), None)).await?;
    s.ensure(matches!(got.as_slice(), [StampedClaim { drained: None, .. }]), Rule::MarksReleaseQuiet, || {
        format!("after {after}, the peek answered {got:?}")
    })
}

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;

use super::{Checked, ContractEnv, Rule, Suite, Violation, ready_now, token};
use crate::admission::OwnerId;
use crate::error::PortError;
use crate::ports::{
    Acquire, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release, ReleaseWake, Releases, Waiter, WakeRelease,
};
use crate::token::LeaseToken;

const LONG: Duration = Duration::from_secs(60);

/// The subscribed instances of the suite, and how long to wait for a notification.
struct Listeners {
    alpha: Releases,
    beta: Releases,
    gamma: Releases,
    wait: Duration,
}

/// The [`ReleaseWake`] contract, over a store that also holds the owners' claims as
/// [`LeaseName::owner`] leases: a held peek and a lost acquire register the waiter
/// in the same step, a won acquire unregisters it, a release notifies exactly the
/// oldest registered waiter and says so, a release that is not ours or asks for no
/// wake notifies nobody, registrations are single and lapse, notifications reach
/// only their waiter, and (with an outage hook) errors never pass for answers.
///
/// # Errors
/// The first rule the store broke.
pub async fn release_wake<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: LeaseStore + OwnerClaims + ReleaseWake + ?Sized,
{
    let mut s = Suite::new(env);
    s.ensure(store.release_wake().is_some(), Rule::WakeOffered, || {
        "the store implements the release wake-up, but OwnerClaims::release_wake answers None".into()
    })?;
    let instance = |n: &str| env.name(n);
    let waiter = |n: &str| Waiter { instance: instance(n), ttl: LONG };
    let (wa, wb, wh) = (waiter("w-alpha"), waiter("w-beta"), waiter("w-holder"));
    let alpha = s.call("subscribe", store.subscribe(&wa.instance)).await?;
    let beta = s.call("subscribe", store.subscribe(&wb.instance)).await?;
    let gamma = s.call("subscribe", store.subscribe(&instance("w-gamma"))).await?;
    let mut l = Listeners { alpha, beta, gamma, wait: env.short_ttl.max(Duration::from_millis(200)) };
    let owner = |n: &str| OwnerId::from(env.name(n));
    let (h, ta, tb) = (token(&wh.instance, 71), token(&wa.instance, 72), token(&wb.instance, 73));

    // A held peek registers: the holder's release wakes alpha.
    let o0 = owner("wake-o0");
    let free = owner("wake-free");
    acquired(&mut s, store.acquire_or_wait(&o0, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let got = s.call("peek_and_wait", store.peek_and_wait(&[o0.clone(), free.clone()], &wa)).await?;
    let right = got.len() == 2
        && matches!(&got[0], OwnerClaim::Busy { holder, .. } if *holder == wh.instance)
        && got[1] == OwnerClaim::Free;
    s.ensure(right, Rule::WakePeekAnswers, || format!("a held and a free owner answered {got:?}"))?;
    let got = s.call("release_and_wake", store.release_and_wake(&o0, &h, true)).await?;
    s.ensure(got.release == Release::Released, Rule::WakeReleaseFrees, || {
        format!("the holder's release answered {got:?}")
    })?;
    let peeked = s.call("peek", store.peek(&LeaseName::owner(o0.as_str()))).await?;
    s.ensure(peeked.is_none(), Rule::WakeReleaseFrees, || {
        format!("after the holder's release, peek answered {peeked:?}")
    })?;
    let when = "the release of an owner alpha peeked at";
    expect_one_rule(&mut s, &mut l, ("alpha", &o0, got.woke), Rule::WakePeekRegisters, when).await?;
    s.ensure(got.woke, Rule::WakeReleaseReports, || format!("a release that woke alpha answered {got:?}"))?;

    // A lost acquire registers: the holder's release wakes beta.
    let o1 = owner("wake-o1");
    acquired(&mut s, store.acquire_or_wait(&o1, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let got = s.call("acquire_or_wait", store.acquire_or_wait(&o1, &tb, LONG, &wb)).await?;
    s.ensure(
        matches!(&got, Acquire::Busy { holder, .. } if *holder == wh.instance),
        Rule::WakeAcquireRegisters,
        || format!("beta's acquire of the holder's claim answered {got:?}"),
    )?;
    let got = s.call("release_and_wake", store.release_and_wake(&o1, &h, true)).await?;
    s.ensure(got.release == Release::Released, Rule::WakeReleaseFrees, || {
        format!("the holder's release answered {got:?}")
    })?;
    let when = "the release of an owner beta lost";
    expect_one_rule(&mut s, &mut l, ("beta", &o1, got.woke), Rule::WakeAcquireRegisters, when).await?;

    // The holder takes o; alpha peeks (registers), beta loses the acquire (registers).
    let o = owner("wake-o");
    acquired(&mut s, store.acquire_or_wait(&o, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let _ = s.call("peek_and_wait", store.peek_and_wait(std::slice::from_ref(&o), &wa)).await?;
    let got = s.call("acquire_or_wait", store.acquire_or_wait(&o, &tb, LONG, &wb)).await?;
    s.ensure(matches!(got, Acquire::Busy { .. }), Rule::WakeAcquireRegisters, || format!("answered {got:?}"))?;

    // A release that is not ours wakes nobody.
    let got = s.call("release_and_wake", store.release_and_wake(&o, &tb, true)).await?;
    s.ensure(got == quiet(Release::NotOwner), Rule::WakeReleaseQuiet, || {
        format!("a stranger's release answered {got:?}")
    })?;
    expect_none(&mut s, &mut l, Rule::WakeReleaseQuiet, "after a stranger's release").await?;

    // The holder's release wakes alpha, the oldest, and only alpha.
    let got = s.call("release_and_wake", store.release_and_wake(&o, &h, true)).await?;
    s.ensure(got.release == Release::Released, Rule::WakeReleaseFrees, || {
        format!("the holder's release answered {got:?}")
    })?;
    expect_one(&mut s, &mut l, ("alpha", &o, got.woke), "the release with alpha then beta registered").await?;
    s.ensure(got.woke, Rule::WakeReleaseReports, || format!("a release that woke alpha answered {got:?}"))?;

    // A peek registers only where it found the claim held: the free owner wakes nobody.
    acquired(&mut s, store.acquire_or_wait(&free, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let got = s.call("release_and_wake", store.release_and_wake(&free, &h, true)).await?;
    s.ensure(got == quiet(Release::Released), Rule::WakePeekRegisters, || {
        format!("the release of an owner alpha found free answered {got:?}")
    })?;
    expect_none(&mut s, &mut l, Rule::WakePeekRegisters, "after the release of an owner found free").await?;

    // Alpha takes o; a quiet release keeps beta registered; the next release wakes beta.
    acquired(&mut s, store.acquire_or_wait(&o, &ta, LONG, &wa), Rule::WakeReleaseFrees, "alpha").await?;
    let got = s.call("release_and_wake", store.release_and_wake(&o, &ta, false)).await?;
    s.ensure(got == quiet(Release::Released), Rule::WakeReleaseQuiet, || {
        format!("a release without wake answered {got:?}")
    })?;
    expect_none(&mut s, &mut l, Rule::WakeReleaseQuiet, "after a release without wake").await?;
    acquired(&mut s, store.acquire_or_wait(&o, &h, LONG, &wh), Rule::WakeReleaseFrees, "the holder").await?;
    let got = s.call("release_and_wake", store.release_and_wake(&o, &h, true)).await?;
    s.ensure(got.woke, Rule::WakeReleaseQuiet, || format!("beta was still registered, the release answered {got:?}"))?;
    expect_one(&mut s, &mut l, ("beta", &o, got.woke), "the release after a quiet one").await?;

    // A won acquire drops the winner's registration.
    let o2 = owner("wake-o2");
    acquired(&mut s, store.acquire_or_wait(&o2, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let _ = s.call("peek_and_wait", store.peek_and_wait(std::slice::from_ref(&o2), &wa)).await?;
    let got = s.call("release_and_wake", store.release_and_wake(&o2, &h, false)).await?;
    s.ensure(got.release == Release::Released, Rule::WakeReleaseFrees, || format!("the release answered {got:?}"))?;
    acquired(&mut s, store.acquire_or_wait(&o2, &ta, LONG, &wa), Rule::WakeReleaseFrees, "alpha").await?;
    let got = s.call("release_and_wake", store.release_and_wake(&o2, &ta, true)).await?;
    s.ensure(got == quiet(Release::Released), Rule::WakeAcquireUnregisters, || {
        format!("alpha registered, then won the claim; its release answered {got:?}")
    })?;
    expect_none(&mut s, &mut l, Rule::WakeAcquireUnregisters, "after alpha won the claim it waited for").await?;

    // Registering twice is one registration: alpha, alpha again, then beta; two
    // releases wake alpha, then beta (not alpha twice).
    let o3 = owner("wake-o3");
    acquired(&mut s, store.acquire_or_wait(&o3, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let _ = s.call("peek_and_wait", store.peek_and_wait(std::slice::from_ref(&o3), &wa)).await?;
    let _ = s.call("peek_and_wait", store.peek_and_wait(std::slice::from_ref(&o3), &wa)).await?;
    let got = s.call("acquire_or_wait", store.acquire_or_wait(&o3, &tb, LONG, &wb)).await?;
    s.ensure(matches!(got, Acquire::Busy { .. }), Rule::WakeAcquireRegisters, || format!("answered {got:?}"))?;
    let got = s.call("release_and_wake", store.release_and_wake(&o3, &h, true)).await?;
    s.ensure(got.woke, Rule::WakeReleaseReports, || format!("a release with waiters answered {got:?}"))?;
    expect_one(&mut s, &mut l, ("alpha", &o3, got.woke), "the first release of an owner alpha registered on twice")
        .await?;
    let h2 = token(&wh.instance, 74);
    acquired(&mut s, store.acquire_or_wait(&o3, &h2, LONG, &wh), Rule::WakeReleaseFrees, "the holder").await?;
    let got = s.call("release_and_wake", store.release_and_wake(&o3, &h2, true)).await?;
    s.ensure(got.woke, Rule::WakeRegisterOnce, || format!("beta was still registered, the release answered {got:?}"))?;
    expect_one_rule(&mut s, &mut l, ("beta", &o3, got.woke), Rule::WakeRegisterOnce, "the second release").await?;

    // A registration lapses.
    let o4 = owner("wake-o4");
    acquired(&mut s, store.acquire_or_wait(&o4, &h, LONG, &wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let brief = Waiter { instance: wa.instance.clone(), ttl: env.short_ttl };
    let _ = s.call("peek_and_wait", store.peek_and_wait(std::slice::from_ref(&o4), &brief)).await?;
    env.wait(env.short_ttl * 3).await;
    let got = s.call("release_and_wake", store.release_and_wake(&o4, &h, true)).await?;
    s.ensure(got == quiet(Release::Released), Rule::WakeRegisterExpires, || {
        format!("a release after the only registration lapsed answered {got:?}")
    })?;
    expect_none(&mut s, &mut l, Rule::WakeRegisterExpires, "after the only registration lapsed").await?;

    // Gamma never waited for anything.
    let stray = ready_now(l.gamma.next()).flatten();
    s.ensure(stray.is_none(), Rule::WakeDeliverOwn, || format!("gamma, which never waited, heard {stray:?}"))?;

    committed(&mut s, store, &mut l, (&owner("wake-o5"), &h, &wh), &wa).await?;
    fences(&mut s, store, &owner("wake-fence"), (&h, &wh), &tb).await?;
    super::clocks::leases(&mut s, store).await?;
    exclusion(&mut s, store).await?;

    errors(&mut s, store, &owner("wake-outage"), &wa).await?;
    Ok(s.finish())
}

/// Alpha, registered, hears the release while it is in flight and peeks at once:
/// the claim is free (a wake-up sent before the release took effect finds it held).
async fn committed<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    l: &mut Listeners,
    (o, h, wh): (&OwnerId, &LeaseToken, &Waiter),
    wa: &Waiter,
) -> Result<(), Violation>
where
    S: LeaseStore + ReleaseWake + ?Sized,
{
    acquired(s, store.acquire_or_wait(o, h, LONG, wh), Rule::WakeAcquireRegisters, "the holder").await?;
    let _ = s.call("peek_and_wait", store.peek_and_wait(std::slice::from_ref(o), wa)).await?;
    let (env, lease) = (s.env, LeaseName::owner(o.as_str()));
    let wait = l.wait * 10;
    let alpha = &mut l.alpha;
    let listen = async {
        let heard = env.within(wait, alpha.next()).await.flatten();
        let peeked = match heard {
            Some(_) => env.within(env.deadline, store.peek(&lease)).await,
            None => None,
        };
        (heard, peeked)
    };
    let (got, (heard, peeked)) = futures::join!(env.within(env.deadline, store.release_and_wake(o, h, true)), listen);
    let got = s.timely("release_and_wake", got)?;
    let got = s.answer("release_and_wake", got)?;
    s.ensure(got.release == Release::Released, Rule::WakeReleaseFrees, || {
        format!("the holder's release answered {got:?}")
    })?;
    s.ensure(heard.as_ref() == Some(o), Rule::WakeReleaseOne, || {
        format!("alpha, the only waiter, heard {heard:?} within {wait:?}, not {o}")
    })?;
    let peeked = s.timely("peek", peeked)?;
    let peeked = s.answer("peek", peeked)?;
    s.ensure(peeked.is_none(), Rule::WakeReleaseCommitted, || {
        format!("alpha heard the release of {o} and peeked at once: {peeked:?}")
    })
}

/// Fences run on across the wake-up's acquires and releases: `acquire_or_wait`
/// hands out a larger fence than a plain acquire before it, and the next acquire
/// after `release_and_wake` a larger one again.
async fn fences<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    o: &OwnerId,
    (h, wh): (&LeaseToken, &Waiter),
    other: &LeaseToken,
) -> Result<(), Violation>
where
    S: LeaseStore + ReleaseWake + ?Sized,
{
    let lease = LeaseName::owner(o.as_str());
    let mut last = 0;
    for wake in [true, false] {
        let got = s.call("acquire", store.acquire(&lease, other, LONG)).await?;
        let right = matches!(got, Acquire::Acquired { fence } if fence > last);
        s.ensure(right, Rule::WakeReleaseFence, || {
            format!("after a release of the claim taken with fence {last}, the next acquire answered {got:?}")
        })?;
        let f0 = if let Acquire::Acquired { fence } = got { fence } else { last };
        let got = s.call("release", store.release(&lease, other)).await?;
        s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;
        let got = s.call("acquire_or_wait", store.acquire_or_wait(o, h, LONG, wh)).await?;
        let right = matches!(got, Acquire::Acquired { fence } if fence > f0);
        s.ensure(right, Rule::WakeAcquireExclusive, || {
            format!("after a plain acquire with fence {f0}, acquire_or_wait answered {got:?}")
        })?;
        last = if let Acquire::Acquired { fence } = got { fence } else { f0 };
        let got = s.call("release_and_wake", store.release_and_wake(o, h, wake)).await?;
        s.ensure(got.release == Release::Released, Rule::WakeReleaseFrees, || {
            format!("the holder's release answered {got:?}")
        })?;
    }
    let got = s.call("acquire", store.acquire(&lease, other, LONG)).await?;
    let right = matches!(got, Acquire::Acquired { fence } if fence > last);
    s.ensure(right, Rule::WakeReleaseFence, || {
        format!("after a release of the claim taken with fence {last}, the next acquire answered {got:?}")
    })?;
    let got = s.call("release", store.release(&lease, other)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))
}

/// Rounds of concurrent `acquire_or_wait` of a fresh owner's claim, through every
/// instance: exactly one wins. The waiters are instances nobody listens for. The
/// instances must agree on expiry first, or a claim held for one is free for
/// another and the race says nothing of atomicity.
async fn exclusion<S>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation>
where
    S: LeaseStore + ReleaseWake + ?Sized,
{
    let pool = s.env.pool(store);
    let callers = s.env.callers;
    let racers: Vec<(LeaseToken, Waiter)> = (0..callers)
        .map(|i| {
            let instance = s.env.name(&format!("w-racer-{i}"));
            (token(&instance, 500 + i as u64), Waiter { instance, ttl: LONG })
        })
        .collect();
    for round in 0..s.env.rounds {
        let o = OwnerId::from(s.env.name(&format!("wake-race-{round}")));
        let env = s.env;
        let answers = join_all(racers.iter().enumerate().map(|(i, (t, w))| {
            let on = pool[i % pool.len()];
            let o = &o;
            async move { env.within(env.deadline, on.acquire_or_wait(o, t, LONG, w)).await }
        }))
        .await;
        let mut winners = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let answer = s.timely("acquire_or_wait", answer)?;
            if matches!(s.answer("acquire_or_wait", answer)?, Acquire::Acquired { .. }) {
                winners.push(i);
            }
        }
        s.ensure(winners.len() == 1, Rule::WakeAcquireExclusive, || {
            format!(
                "round {round}: {} of {callers} concurrent acquires of a free claim answered Acquired",
                winners.len()
            )
        })?;
        for i in winners {
            let _ = s.call("release_and_wake", store.release_and_wake(&o, &racers[i].0, false)).await?;
        }
    }
    Ok(())
}

fn quiet(release: Release) -> WakeRelease {
    WakeRelease { release, woke: false }
}

async fn acquired<S: ?Sized>(
    s: &mut Suite<'_, S>,
    got: impl Future<Output = Result<Acquire, PortError>>,
    rule: Rule,
    who: &str,
) -> Result<(), Violation> {
    let got = s.call("acquire_or_wait", got).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), rule, || {
        format!("{who}'s acquire of a free claim answered {got:?}")
    })
}

/// Nobody hears anything within the wait.
async fn expect_none<S: ?Sized>(
    s: &mut Suite<'_, S>,
    l: &mut Listeners,
    rule: Rule,
    when: &str,
) -> Result<(), Violation> {
    s.env.wait(l.wait).await;
    let heard = [("alpha", &mut l.alpha), ("beta", &mut l.beta), ("gamma", &mut l.gamma)]
        .into_iter()
        .filter_map(|(n, r)| ready_now(r.next()).flatten().map(|o| format!("{n} heard {o}")))
        .collect::<Vec<_>>();
    s.ensure(heard.is_empty(), rule, || format!("{when}: {}", heard.join(", ")))
}

async fn expect_one<S: ?Sized>(
    s: &mut Suite<'_, S>,
    l: &mut Listeners,
    heard: (&str, &OwnerId, bool),
    when: &str,
) -> Result<(), Violation> {
    expect_one_rule(s, l, heard, Rule::WakeReleaseOne, when).await
}

/// `who` hears `owner` (and nothing else), and nobody else hears anything, after a
/// release that answered `woke`. When nobody heard anything although the release
/// said it woke a waiter, the release's answer is what is wrong.
async fn expect_one_rule<S: ?Sized>(
    s: &mut Suite<'_, S>,
    l: &mut Listeners,
    (who, owner, woke): (&str, &OwnerId, bool),
    rule: Rule,
    when: &str,
) -> Result<(), Violation> {
    let wait = l.wait * 10;
    let (mine, others): (&mut Releases, [(&str, &mut Releases); 2]) = match who {
        "alpha" => (&mut l.alpha, [("beta", &mut l.beta), ("gamma", &mut l.gamma)]),
        _ => (&mut l.beta, [("alpha", &mut l.alpha), ("gamma", &mut l.gamma)]),
    };
    let heard = s.env.within(wait, mine.next()).await.flatten();
    let mut extra = Vec::new();
    if heard.as_ref() != Some(owner) {
        for (n, r) in others {
            if let Some(o) = ready_now(r.next()).flatten() {
                extra.push(format!("{n} heard {o}"));
            }
        }
        let rule = if heard.is_none() && extra.is_empty() && woke { Rule::WakeReleaseReports } else { rule };
        return Err(Violation {
            rule,
            detail: format!(
                "{when}: {who} heard {heard:?} within {wait:?}, not {owner}; the release answered woke = {woke}{}",
                extra.iter().map(|e| format!(", {e}")).collect::<String>()
            ),
        });
    }
    s.ensure(true, rule, String::new)?;
    s.env.wait(l.wait).await;
    if let Some(o) = ready_now(mine.next()).flatten() {
        extra.push(format!("{who} heard {o} again"));
    }
    for (n, r) in others {
        if let Some(o) = ready_now(r.next()).flatten() {
            extra.push(format!("{n} heard {o}"));
        }
    }
    let rule = if extra.iter().any(|e| e.starts_with("gamma")) { Rule::WakeDeliverOwn } else { rule };
    s.ensure(extra.is_empty(), rule, || format!("{when}: {who} was woken, and also {}", extra.join(", ")))
}

/// While the store cannot answer, every call answers `Err`.
async fn errors<S>(s: &mut Suite<'_, S>, store: &S, owner: &OwnerId, waiter: &Waiter) -> Result<(), Violation>
where
    S: LeaseStore + ReleaseWake + ?Sized,
{
    let t: LeaseToken = token(&waiter.instance, 79);
    let Some(outage) = s.begin_outage(&[Rule::WakeError]).await else { return Ok(()) };
    let peeked = s.timed(store.peek_and_wait(std::slice::from_ref(owner), waiter)).await;
    let acquired = s.timed(store.acquire_or_wait(owner, &t, LONG, waiter)).await;
    let released = s.timed(store.release_and_wake(owner, &t, true)).await;
    outage.end().await;
    s.must_fail(Rule::WakeError, "peek_and_wait", &peeked)?;
    s.must_fail(Rule::WakeError, "acquire_or_wait", &acquired)?;
    s.must_fail(Rule::WakeError, "release_and_wake", &released)?;
    // A timed-out acquire may have landed once the store answered again.
    let _ = s.timed(store.release_and_wake(owner, &t, false)).await;
    Ok(())
}

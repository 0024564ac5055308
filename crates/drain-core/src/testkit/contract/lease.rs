use std::time::Duration;

use futures::future::join_all;

use super::{Checked, ContractEnv, Rule, Suite, Violation, token};
use crate::ports::{Acquire, Holding, LeaseName, LeaseStore, Release, Renew};
use crate::token::LeaseToken;

/// The time to live of leases that must not expire during the suite.
const LONG: Duration = Duration::from_secs(60);
/// How much less than its time to live a fresh lease may report left: the calls
/// between taking it and asking, on a loaded machine.
const SLACK: Duration = Duration::from_secs(10);

/// The [`LeaseStore`] contract: mutual exclusion under concurrent acquires, fences
/// that increase across release, expiry and a short first lease, compare-and-delete
/// release and compare-and-extend renewal that never revive an expired lease, `Busy`
/// and `peek` agreeing, independent names, expiry every instance agrees on (with
/// several `ContractEnv::instances`), and (with an outage hook) errors that never
/// pass for answers.
///
/// # Errors
/// The first rule the store broke.
pub async fn lease_store<S: LeaseStore + ?Sized>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation> {
    let mut s = Suite::new(env);
    holders(&mut s, store).await?;
    expiry(&mut s, store).await?;
    super::clocks::lease_ttls(&mut s, store).await?;
    short_first_lease(&mut s, store).await?;
    renewal(&mut s, store).await?;
    renew_from_now(&mut s, store).await?;
    // Before the concurrent acquires, which instances disagreeing on expiry break too.
    super::clocks::leases(&mut s, store).await?;
    exclusion(&mut s, store).await?;
    names(&mut s, store).await?;
    errors(&mut s, store).await?;
    Ok(s.finish())
}

fn fence_of(a: &Acquire, rule: Rule, what: &str) -> Result<u64, Violation> {
    match a {
        Acquire::Acquired { fence } => Ok(*fence),
        other => Err(Violation { rule, detail: format!("{what}: a free lease answered {other:?}, not Acquired") }),
    }
}

/// `remaining` is what is left of `ttl`: above zero, at most `ttl`, not much less.
fn fresh(remaining: Duration, ttl: Duration) -> bool {
    remaining > Duration::ZERO && remaining <= ttl && remaining + SLACK >= ttl
}

/// Holder semantics on one long lease: `Busy` names the holder and changes nothing,
/// `peek` agrees, strangers can neither renew nor release, the holder can, once.
async fn holders<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let lease = LeaseName::queue(s.env.name("contract-holders"));
    let (a, b) = (token("alpha", 1), token("beta", 2));

    let got = s.call("acquire", store.acquire(&lease, &a, LONG)).await?;
    let f1 = fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    let before = s.call("peek", store.peek(&lease)).await?;
    s.ensure(
        before.as_ref().is_some_and(|h| h.holder == "alpha" && h.fence == f1 && fresh(h.remaining, LONG)),
        Rule::LeasePeekAgrees,
        || format!("peek after Acquired {{ fence: {f1} }} by alpha answered {before:?}"),
    )?;

    for (who, t) in [("another token", &b), ("the holder's own token", &a)] {
        let got = s.call("acquire", store.acquire(&lease, t, LONG)).await?;
        let Acquire::Busy { holder, remaining } = got else {
            return Err(Violation {
                rule: Rule::LeaseAcquireExclusive,
                detail: format!("an acquire by {who} of a held lease answered {got:?}"),
            });
        };
        s.ensure(holder == "alpha", Rule::LeaseHeldUnchanged, || {
            format!("Busy by {who} named {holder:?}, not the holder alpha")
        })?;
        s.ensure(fresh(remaining, LONG), Rule::LeaseHeldRemaining, || {
            format!("Busy reported {remaining:?} left of a {LONG:?} lease taken just before")
        })?;
        let peeked = s.call("peek", store.peek(&lease)).await?;
        s.ensure(
            peeked.as_ref().is_some_and(|h| h.holder == "alpha" && h.remaining <= remaining + Duration::from_millis(5)),
            Rule::LeasePeekAgrees,
            || format!("Busy {{ holder: alpha, remaining: {remaining:?} }}, but peek answered {peeked:?}"),
        )?;
        let unchanged = |h: &Option<Holding>| {
            h.as_ref().is_some_and(|h| {
                h.fence == f1 && before.as_ref().is_some_and(|b| h.remaining <= b.remaining + Duration::from_millis(5))
            })
        };
        s.ensure(unchanged(&peeked), Rule::LeaseHeldUnchanged, || {
            format!("after a Busy acquire by {who} the lease reads {peeked:?}, before {before:?}")
        })?;
    }

    let got = s.call("renew", store.renew(&lease, &b, LONG)).await?;
    s.ensure(got == Renew::Lost, Rule::LeaseRenewForeign, || format!("renew by another token answered {got:?}"))?;
    let got = s.call("release", store.release(&lease, &b)).await?;
    s.ensure(got == Release::NotOwner, Rule::LeaseReleaseForeign, || {
        format!("release by another token answered {got:?}")
    })?;
    let after = s.call("peek", store.peek(&lease)).await?;
    s.ensure(after.as_ref().is_some_and(|h| h.holder == "alpha" && h.fence == f1), Rule::LeaseReleaseForeign, || {
        format!("after a stranger's renew and release the lease reads {after:?}")
    })?;

    let got = s.call("renew", store.renew(&lease, &a, LONG)).await?;
    s.ensure(got == Renew::Renewed, Rule::LeaseRenewExtends, || format!("renew by the holder answered {got:?}"))?;
    let got = s.call("release", store.release(&lease, &a)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))?;
    let gone = s.call("peek", store.peek(&lease)).await?;
    s.ensure(gone.is_none(), Rule::LeaseReleaseFrees, || format!("after Released, peek answered {gone:?}"))?;
    let got = s.call("release", store.release(&lease, &a)).await?;
    s.ensure(got == Release::NotOwner, Rule::LeaseReleaseExpired, || {
        format!("a second release of a released lease answered {got:?}")
    })?;
    let got = s.call("renew", store.renew(&lease, &a, LONG)).await?;
    s.ensure(got == Renew::Lost, Rule::LeaseRenewExpired, || format!("renew of a released lease answered {got:?}"))?;
    let got = s.call("acquire", store.acquire(&lease, &b, LONG)).await?;
    let f2 = fence_of(&got, Rule::LeaseReleaseFrees, "an acquire after Released")?;
    s.ensure(f2 > f1, Rule::LeaseFenceIncreases, || format!("fence {f1}, then {f2} after a release"))?;
    let got = s.call("release", store.release(&lease, &b)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))
}

/// A lease that expires is free: the next acquire takes it with a larger fence and
/// peek says it is free; its holder can neither renew it (never revived) nor release
/// it, and cannot disturb the next holder.
async fn expiry<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let lease = LeaseName::queue(s.env.name("contract-expiry"));
    let (a, b, c) = (token("alpha", 3), token("beta", 4), token("gamma", 5));
    let short = s.env.short_ttl;

    let got = s.call("acquire", store.acquire(&lease, &a, LONG)).await?;
    let f1 = fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    let got = s.call("release", store.release(&lease, &a)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))?;
    let got = s.call("acquire", store.acquire(&lease, &b, short)).await?;
    let f2 = fence_of(&got, Rule::LeaseReleaseFrees, "an acquire after Released")?;
    s.ensure(f2 > f1, Rule::LeaseFenceIncreases, || format!("fence {f1}, then {f2} after a release"))?;

    // Whether it expired is the acquire's to say; then peek must have agreed.
    s.env.wait(short * 3).await;
    let peeked = s.call("peek", store.peek(&lease)).await?;
    let got = s.call("acquire", store.acquire(&lease, &c, LONG)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseExpires, || {
        format!("a {short:?} lease still answers {got:?} after {:?}", short * 3)
    })?;
    let f3 = fence_of(&got, Rule::LeaseExpires, "an acquire after expiry")?;
    s.ensure(peeked.is_none(), Rule::LeasePeekFree, || {
        format!("a {short:?} lease that had expired after {:?} read {peeked:?}", short * 3)
    })?;
    s.ensure(f3 > f2, Rule::LeaseFenceIncreases, || format!("fence {f2}, then {f3} after the lease expired"))?;
    let got = s.call("release", store.release(&lease, &b)).await?;
    s.ensure(got == Release::NotOwner, Rule::LeaseReleaseForeign, || {
        format!("the expired holder's release of the new lease answered {got:?}")
    })?;
    let got = s.call("renew", store.renew(&lease, &b, LONG)).await?;
    s.ensure(got == Renew::Lost, Rule::LeaseRenewForeign, || {
        format!("the expired holder's renew of the new lease answered {got:?}")
    })?;
    let peeked = s.call("peek", store.peek(&lease)).await?;
    s.ensure(peeked.as_ref().is_some_and(|h| h.holder == "gamma" && h.fence == f3), Rule::LeaseReleaseForeign, || {
        format!("the new holder gamma's lease (fence {f3}) reads {peeked:?} after the stale holder's calls")
    })?;
    let got = s.call("release", store.release(&lease, &c)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))?;

    // Our own expired lease, nobody else's yet: renew must not bring it back, and
    // release must not claim it.
    let own = LeaseName::queue(s.env.name("contract-expired-own"));
    let d = token("delta", 9);
    let got = s.call("acquire", store.acquire(&own, &d, short)).await?;
    fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    s.env.wait(short * 3).await;
    let got = s.call("renew", store.renew(&own, &d, LONG)).await?;
    s.ensure(got == Renew::Lost, Rule::LeaseRenewExpired, || {
        format!("renew of our own expired lease answered {got:?}")
    })?;
    let peeked = s.call("peek", store.peek(&own)).await?;
    s.ensure(peeked.is_none(), Rule::LeaseRenewExpired, || {
        format!("after a renew of our own expired lease, peek answered {peeked:?}")
    })?;
    let got = s.call("release", store.release(&own, &d)).await?;
    s.ensure(got == Release::NotOwner, Rule::LeaseReleaseExpired, || {
        format!("release of our own expired lease answered {got:?}")
    })
}

/// A fence must outlive a lease that expires early, also the very first one.
async fn short_first_lease<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let lease = LeaseName::queue(s.env.name("contract-short-first"));
    let (a, b) = (token("alpha", 6), token("beta", 7));
    let short = s.env.short_ttl;
    let got = s.call("acquire", store.acquire(&lease, &a, short)).await?;
    let f1 = fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    s.env.wait(short * 3).await;
    let got = s.call("acquire", store.acquire(&lease, &b, LONG)).await?;
    let f2 = fence_of(&got, Rule::LeaseExpires, "an acquire after the first, short lease expired")?;
    s.ensure(f2 > f1, Rule::LeaseFenceIncreases, || {
        format!("fence {f1} of a first {short:?} lease, then {f2} after it expired")
    })?;
    let got = s.call("release", store.release(&lease, &b)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))
}

/// Renewal really extends: renewed long, a short lease outlives its first time to
/// live.
async fn renewal<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let lease = LeaseName::queue(s.env.name("contract-renew"));
    let a = token("alpha", 8);
    let short = s.env.short_ttl;
    let got = s.call("acquire", store.acquire(&lease, &a, short)).await?;
    fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    let got = s.call("renew", store.renew(&lease, &a, LONG)).await?;
    s.ensure(got == Renew::Renewed, Rule::LeaseRenewExtends, || format!("renew by the holder answered {got:?}"))?;
    s.env.wait(short * 3).await;
    let peeked = s.call("peek", store.peek(&lease)).await?;
    s.ensure(peeked.as_ref().is_some_and(|h| h.holder == "alpha"), Rule::LeaseRenewExtends, || {
        format!("a {short:?} lease renewed for {LONG:?} reads {peeked:?} after {:?}", short * 3)
    })?;
    let got = s.call("renew", store.renew(&lease, &a, LONG)).await?;
    s.ensure(got == Renew::Renewed, Rule::LeaseRenewExtends, || format!("a second renew answered {got:?}"))?;
    let got = s.call("release", store.release(&lease, &a)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))
}

/// A renewal sets the expiry `ttl` from now, not `ttl` past the old expiry: a lease
/// taken for long and renewed for a short time has at most the short time left,
/// and expires by then.
async fn renew_from_now<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let lease = LeaseName::queue(s.env.name("contract-renew-from-now"));
    let (a, b) = (token("alpha", 14), token("beta", 15));
    let short = s.env.short_ttl;
    let got = s.call("acquire", store.acquire(&lease, &a, LONG)).await?;
    fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    let got = s.call("renew", store.renew(&lease, &a, short)).await?;
    s.ensure(got == Renew::Renewed, Rule::LeaseRenewExtends, || format!("renew by the holder answered {got:?}"))?;
    let peeked = s.call("peek", store.peek(&lease)).await?;
    s.ensure(
        peeked.as_ref().is_some_and(|h| h.holder == "alpha" && h.remaining <= short),
        Rule::LeaseRenewFromNow,
        || format!("a {LONG:?} lease renewed for {short:?} reads {peeked:?}: renewed from the old expiry?"),
    )?;
    s.env.wait(short * 3).await;
    let got = s.call("acquire", store.acquire(&lease, &b, LONG)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseRenewFromNow, || {
        format!("a {LONG:?} lease renewed for {short:?} still answers {got:?} {:?} later", short * 3)
    })?;
    let got = s.call("release", store.release(&lease, &b)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release by the holder answered {got:?}"))
}

/// Many callers acquire one lease at once, round after round, spread over the
/// store's instances: exactly one wins, every other answer names the winner, and
/// the fence grows from round to round.
async fn exclusion<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let lease = LeaseName::queue(s.env.name("contract-race"));
    let callers = s.env.callers;
    let pool = s.env.pool(store);
    let on = |i: usize| pool[i % pool.len()];
    let mut last_fence = 0;
    for round in 0..s.env.rounds {
        let tokens: Vec<LeaseToken> =
            (0..callers).map(|i| token(&format!("racer{i}"), (round * callers + i) as u64 + 100)).collect();
        let env = s.env;
        let answers =
            join_all(tokens.iter().enumerate().map(|(i, t)| env.within(env.deadline, on(i).acquire(&lease, t, LONG))))
                .await;
        let mut winners = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            let a = s.timely("acquire", a)?;
            match s.answer("acquire", a)? {
                Acquire::Acquired { fence } => winners.push((i, fence)),
                Acquire::Busy { .. } => {}
            }
        }
        s.ensure(winners.len() == 1, Rule::LeaseAcquireExclusive, || {
            format!(
                "round {round}: {} of {callers} concurrent acquires of a free lease answered Acquired",
                winners.len()
            )
        })?;
        let (winner, fence) = winners[0];
        s.ensure(fence > last_fence, Rule::LeaseFenceIncreases, || {
            format!("round {round}: fence {fence} after {last_fence} of the round before")
        })?;
        last_fence = fence;
        let peeked = s.call("peek", store.peek(&lease)).await?;
        let name = format!("racer{winner}");
        s.ensure(peeked.as_ref().is_some_and(|h| h.holder == name && h.fence == fence), Rule::LeasePeekAgrees, || {
            format!("round {round}: {name} won with fence {fence}, peek answered {peeked:?}")
        })?;
        let got = s.call("release", on(winner).release(&lease, &tokens[winner])).await?;
        s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || {
            format!("round {round}: the winner's release answered {got:?}")
        })?;
    }
    Ok(())
}

/// Names with characters a store must escape, the empty name, and a queue and an
/// owner of one name are all different leases.
async fn names<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let odd = ["we{ird}:name with spaces", "", "{", "}", "a:b", "ünïcødé/\\*?[]", "%7B", "contract-holders"];
    let mut leases: Vec<LeaseName> = Vec::new();
    for name in odd {
        let full = s.env.name(&format!("names.{name}"));
        leases.push(LeaseName::queue(full.clone()));
        leases.push(LeaseName::owner(full));
    }
    let tokens: Vec<LeaseToken> = (0..leases.len()).map(|i| token(&format!("n{i}"), 900 + i as u64)).collect();
    for (i, (lease, t)) in leases.iter().zip(&tokens).enumerate() {
        let got = s.call("acquire", store.acquire(lease, t, LONG)).await?;
        s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseNamesDistinct, || {
            format!("{lease:?}: a fresh lease answered {got:?} (taken before: {:?})", &leases[..i])
        })?;
    }
    for (lease, t) in leases.iter().zip(&tokens) {
        let peeked = s.call("peek", store.peek(lease)).await?;
        let name = t.holder().to_owned();
        s.ensure(peeked.as_ref().is_some_and(|h| h.holder == name), Rule::LeaseNamesDistinct, || {
            format!("{lease:?} taken by {name} reads {peeked:?}")
        })?;
        let got = s.call("release", store.release(lease, t)).await?;
        s.ensure(got == Release::Released, Rule::LeaseNamesDistinct, || {
            format!("{lease:?}: release answered {got:?}")
        })?;
    }
    Ok(())
}

/// While the store cannot answer, every call answers `Err`.
async fn errors<S: LeaseStore + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let rules = [
        Rule::LeaseAcquireError,
        Rule::LeaseReleaseError,
        Rule::LeaseRenewError,
        Rule::LeasePeekError,
        Rule::StoreNeverSent,
    ];
    let held = LeaseName::queue(s.env.name("contract-outage-held"));
    let free = LeaseName::queue(s.env.name("contract-outage-free"));
    let (a, b) = (token("alpha", 10), token("beta", 11));
    if s.env.outage.is_some() {
        let got = s.call("acquire", store.acquire(&held, &a, LONG)).await?;
        fence_of(&got, Rule::LeaseAcquireExclusive, "the first acquire")?;
    }
    let Some(outage) = s.begin_outage(&rules).await else { return Ok(()) };
    let acquired = s.timed(store.acquire(&free, &b, LONG)).await;
    let renewed = s.timed(store.renew(&held, &a, LONG)).await;
    let released = s.timed(store.release(&held, &a)).await;
    let peeked = s.timed(store.peek(&held)).await;
    outage.end().await;
    s.must_fail(Rule::LeaseAcquireError, "acquire", &acquired)?;
    s.must_fail(Rule::LeaseRenewError, "renew", &renewed)?;
    s.must_fail(Rule::LeaseReleaseError, "release", &released)?;
    s.must_fail(Rule::LeasePeekError, "peek", &peeked)?;
    // A request the server got runs when it answers again (a frozen server thaws):
    // an acquire reported never sent must not have taken the lease.
    s.env.wait(s.env.short_ttl / 3).await;
    let now = s.call("peek", store.peek(&free)).await?;
    let landed = now.as_ref().is_some_and(|h| h.holder == b.holder());
    s.unsent_landed("acquire", &acquired, landed)?;
    // A timed-out request may have landed once the store answered again: release
    // with the same tokens, whatever the answers.
    let _ = s.timed(store.release(&free, &b)).await;
    let _ = s.timed(store.release(&held, &a)).await;
    Ok(())
}

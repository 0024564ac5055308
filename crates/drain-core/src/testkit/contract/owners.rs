use std::time::Duration;

use super::{Checked, ContractEnv, Rule, Suite, Violation, token};
use crate::admission::OwnerId;
use crate::ports::{Acquire, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release};
use crate::token::LeaseToken;

const LONG: Duration = Duration::from_secs(60);
const SLACK: Duration = Duration::from_secs(10);
/// Under a second: a claim taken for it never has a whole second left.
const BRIEF: Duration = Duration::from_millis(900);

fn held_by(c: &OwnerClaim, holder: &str, ttl: Duration) -> bool {
    matches!(c, OwnerClaim::Busy { holder: h, remaining } if h == holder && *remaining > Duration::ZERO && *remaining <= ttl && *remaining + SLACK >= ttl)
}

/// The [`OwnerClaims`] contract, over a store that also holds the owners' claims as
/// [`LeaseName::owner`] leases: peeks answer in order, see held claims with their
/// holder and time left, see free, released and expired claims as free, ignore a
/// queue lease of the owner's name, and (with an outage hook) never answer `Free`
/// for an error.
///
/// # Errors
/// The first rule the store broke.
pub async fn owner_claims<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: LeaseStore + OwnerClaims + ?Sized,
{
    let mut s = Suite::new(env);
    let owner = |n: &str| OwnerId::from(env.name(n));
    let (a, b) = (token("alpha", 51), token("beta", 52));
    let (o1, o2, o3, o4) = (owner("o1"), owner("o2"), owner("we{ird}: o3"), owner("o4"));

    let got = s.call("peek_owners", store.peek_owners(&[])).await?;
    s.ensure(got.is_empty(), Rule::OwnersOrder, || format!("an empty peek answered {got:?}"))?;

    take(&mut s, store, &o1, &a, LONG).await?;
    take(&mut s, store, &o3, &b, LONG).await?;
    // A queue lease of o2's name is not o2's claim.
    let queue_lease = LeaseName::queue(o2.as_str());
    let got = s.call("acquire", store.acquire(&queue_lease, &b, LONG)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseNamesDistinct, || {
        format!("a queue lease of an owner's name answered {got:?}")
    })?;
    let asked = [o1.clone(), o2.clone(), o3.clone(), o4.clone(), o1.clone()];
    let got = s.call("peek_owners", store.peek_owners(&asked)).await?;
    s.ensure(got.len() == asked.len(), Rule::OwnersOrder, || format!("a peek of 5 owners answered {got:?}"))?;
    s.ensure(held_by(&got[0], "alpha", LONG) && held_by(&got[4], "alpha", LONG), Rule::OwnersHeld, || {
        format!("alpha's claim on o1 answered {:?} and {:?}", got[0], got[4])
    })?;
    s.ensure(held_by(&got[2], "beta", LONG), Rule::OwnersHeld, || format!("beta's claim answered {:?}", got[2]))?;
    s.ensure(got[1] == OwnerClaim::Free && got[3] == OwnerClaim::Free, Rule::OwnersFree, || {
        format!("o2 (only a queue lease of its name) and o4 (never taken) answered {:?} and {:?}", got[1], got[3])
    })?;
    let got = s.call("release", store.release(&queue_lease, &b)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;

    // Order holds however the held and free owners mix.
    let many: Vec<OwnerId> = (0..12).map(|i| owner(&format!("many-{i}"))).collect();
    let tokens: Vec<LeaseToken> = (0..12).map(|i| token(&format!("h{i}"), 60 + i)).collect();
    for (i, o) in many.iter().enumerate().filter(|(i, _)| i % 3 != 1) {
        take(&mut s, store, o, &tokens[i], LONG).await?;
    }
    let got = s.call("peek_owners", store.peek_owners(&many)).await?;
    let right = got.len() == many.len()
        && got
            .iter()
            .enumerate()
            .all(|(i, c)| if i % 3 == 1 { *c == OwnerClaim::Free } else { held_by(c, &format!("h{i}"), LONG) });
    s.ensure(right, Rule::OwnersOrder, || format!("12 owners, every third free from the second, answered {got:?}"))?;
    for (i, o) in many.iter().enumerate().filter(|(i, _)| i % 3 != 1) {
        let got = s.call("release", store.release(&LeaseName::owner(o.as_str()), &tokens[i])).await?;
        s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;
    }

    // Released and expired claims are free.
    let got = s.call("release", store.release(&LeaseName::owner(o1.as_str()), &a)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;
    let short = s.env.short_ttl;
    take(&mut s, store, &o4, &a, short).await?;
    s.env.wait(short * 3).await;
    let got = s.call("peek_owners", store.peek_owners(&[o1.clone(), o4.clone(), o3.clone()])).await?;
    s.ensure(got.len() == 3 && got[0] == OwnerClaim::Free && got[1] == OwnerClaim::Free, Rule::OwnersFree, || {
        format!("a released and an expired claim answered {got:?}")
    })?;
    s.ensure(got.len() == 3 && held_by(&got[2], "beta", LONG), Rule::OwnersHeld, || {
        format!("beta's claim answered {:?}", got.get(2))
    })?;

    brief(&mut s, store, &owner("o5-brief"), &a).await?;

    if let Some(outage) = s.begin_outage(&[Rule::OwnersError]).await {
        let peeked = s.timed(store.peek_owners(std::slice::from_ref(&o3))).await;
        outage.end().await;
        s.must_fail(Rule::OwnersError, "peek_owners", &peeked)?;
    }
    let got = s.call("release", store.release(&LeaseName::owner(o3.as_str()), &b)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;
    Ok(s.finish())
}

/// A claim with under a second left is `Busy`: a store that counted the time left
/// in whole seconds, rounded down, would read it as `Free`.
async fn brief<S>(s: &mut Suite<'_, S>, store: &S, owner: &OwnerId, t: &LeaseToken) -> Result<(), Violation>
where
    S: LeaseStore + OwnerClaims + ?Sized,
{
    let lease = LeaseName::owner(owner.as_str());
    // A `Free` is a violation only when the peek came back before the claim's time
    // could have run out; a machine stalled that long tries again.
    for _ in 0..3 {
        let sent = s.env.clock.now();
        take(s, store, owner, t, BRIEF).await?;
        let got = s.call("peek_owners", store.peek_owners(std::slice::from_ref(owner))).await?;
        let answered = s.env.clock.now().saturating_since(sent);
        match got.as_slice() {
            [OwnerClaim::Busy { holder, remaining }] => {
                s.ensure(
                    holder == t.holder() && *remaining > Duration::ZERO && *remaining <= BRIEF,
                    Rule::OwnersHeld,
                    || format!("a claim taken for {BRIEF:?} answered {got:?}"),
                )?;
            }
            [OwnerClaim::Free] if answered < BRIEF => {
                return Err(Violation {
                    rule: Rule::OwnersHeld,
                    detail: format!(
                        "a claim taken for {BRIEF:?} answered Free {answered:?} later, with time left                          (the time left counted in whole seconds?)"
                    ),
                });
            }
            [OwnerClaim::Free] => continue,
            _ => {
                return Err(Violation {
                    rule: Rule::OwnersOrder,
                    detail: format!("a peek of one owner answered {got:?}"),
                });
            }
        }
        let got = s.call("release", store.release(&lease, t)).await?;
        return s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"));
    }
    Ok(())
}

async fn take<S: LeaseStore + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    owner: &OwnerId,
    t: &LeaseToken,
    ttl: Duration,
) -> Result<(), Violation> {
    let got = s.call("acquire", store.acquire(&LeaseName::owner(owner.as_str()), t, ttl)).await?;
    s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseAcquireExclusive, || {
        format!("owner {owner}'s free claim answered {got:?}")
    })
}

use std::time::Duration;

use futures::future::join_all;

use super::{Checked, Rule, Suite, Violation};
use crate::error::ErrorKind;
use crate::ports::{FenceMarks, FenceVerdict};

/// A fence above 2^53, where a store that compares fences as floating-point numbers
/// sees it equal to the one below.
const HUGE: u64 = (1 << 53) + 1;
/// A fence above the largest signed 64-bit integer, which a store that keeps fences
/// as signed numbers reads as negative.
const WIDE: u64 = (1 << 63) + 5;
/// How long a resource stays quiet before its mark is checked again: longer than a
/// store that lets marks lapse after a quiet second or two would keep them.
const QUIET: Duration = Duration::from_secs(5);

/// The [`FenceMarks`] contract: fences not below the mark are accepted (equal ones
/// too) and raise it, lower ones are refused with the mark, also above 2^53; many
/// concurrent admits of different fences leave the mark at the largest; marks never
/// lapse, also after a resource was quiet for seconds; fences above 2^63 compare as
/// the numbers they are; resources with odd names keep marks of their own; and (with
/// an outage hook) an outage answers `Err`, never `Accepted`.
///
/// Marks never expire: run the suite on a fresh store, or under a fresh
/// [`ContractEnv::names`](super::ContractEnv::names) prefix each time.
///
/// # Errors
/// The first rule the store broke.
pub async fn fence_marks<S: FenceMarks + ?Sized>(
    store: &S,
    env: &super::ContractEnv<'_, S>,
) -> Result<Checked, Violation> {
    let mut s = Suite::new(env);
    // The quiet resource's mark is set first and checked last, so the wait overlaps
    // the other checks.
    let quiet = s.env.name("fence-keeps");
    let since = s.env.clock.now();
    let got = admit(&mut s, store, &quiet, 9).await?;
    s.ensure(got == FenceVerdict::Accepted, Rule::FenceAccepts, || {
        format!("fence 9 to a fresh resource answered {got:?}")
    })?;
    marks(&mut s, store).await?;
    units(&mut s, store).await?;
    exclusion(&mut s, store).await?;
    resources(&mut s, store).await?;
    keeps(&mut s, store, &quiet, since).await?;
    errors(&mut s, store).await?;
    Ok(s.finish())
}

async fn admit<S: FenceMarks + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    resource: &str,
    fence: u64,
) -> Result<FenceVerdict, Violation> {
    s.call("admit", store.admit(resource, fence)).await
}

/// One resource, one caller: equal and larger fences pass and raise the mark, lower
/// ones are refused with the mark and change nothing.
async fn marks<S: FenceMarks + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let r = s.env.name("fence-marks");
    for (fence, want) in [
        (5, FenceVerdict::Accepted),
        (5, FenceVerdict::Accepted),
        (4, FenceVerdict::Stale { mark: 5 }),
        (9, FenceVerdict::Accepted),
        (9, FenceVerdict::Accepted),
        (5, FenceVerdict::Stale { mark: 9 }),
        (0, FenceVerdict::Stale { mark: 9 }),
        (10, FenceVerdict::Accepted),
    ] {
        let got = admit(s, store, &r, fence).await?;
        let rule = if want == FenceVerdict::Accepted { Rule::FenceAccepts } else { Rule::FenceStale };
        s.ensure(got == want, rule, || format!("fence {fence} answered {got:?}, not {want:?}"))?;
    }
    Ok(())
}

/// Fences a floating-point or a signed 64-bit column cannot hold compare as the
/// numbers they are; a store may refuse a fence wider than it keeps with a `Config`
/// error instead, never with a verdict.
async fn units<S: FenceMarks + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    'pairs: for (name, low, high) in [("fence-units-float", HUGE - 1, HUGE), ("fence-units-wide", 7, WIDE)] {
        let r = s.env.name(name);
        for (fence, want, wider) in [
            (low, FenceVerdict::Accepted, false),
            (high, FenceVerdict::Accepted, true),
            (low, FenceVerdict::Stale { mark: high }, false),
            (u64::MAX, FenceVerdict::Accepted, true),
            (high, FenceVerdict::Stale { mark: u64::MAX }, false),
        ] {
            let got = match s.bounded("admit", store.admit(&r, fence)).await? {
                // Refused as wider than the store keeps: nothing above it to compare.
                Err(e) if wider && e.kind == ErrorKind::Config => continue 'pairs,
                other => s.answer("admit", other)?,
            };
            s.ensure(got == want, Rule::FenceUnits, || format!("fence {fence} answered {got:?}, not {want:?}"))?;
        }
    }
    Ok(())
}

/// Rounds of concurrent admits of different fences to one resource: the largest is
/// accepted, every refusal names a mark above its fence, and the mark ends at the
/// largest (a store that reads, then writes, lets a lower fence land last).
async fn exclusion<S: FenceMarks + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let callers = s.env.callers as u64;
    let pool = s.env.pool(store);
    let on = |i: usize| pool[i % pool.len()];
    for round in 0..s.env.rounds {
        let r = s.env.name(&format!("fence-race-{round}"));
        // The largest fence goes first and the smallest last, turning each round.
        let fences: Vec<u64> = (0..callers).map(|i| callers - (i + round as u64) % callers).collect();
        let env = s.env;
        let answers =
            join_all(fences.iter().enumerate().map(|(i, &f)| env.within(env.deadline, on(i).admit(&r, f)))).await;
        for (&fence, answer) in fences.iter().zip(answers) {
            let answer = s.timely("admit", answer)?;
            let got = s.answer("admit", answer)?;
            let right = match got {
                FenceVerdict::Accepted => true,
                FenceVerdict::Stale { mark } => fence < callers && mark > fence && mark <= callers,
            };
            s.ensure(right, Rule::FenceExclusive, || {
                format!("round {round}: fence {fence} of 1..={callers} admitted at once answered {got:?}")
            })?;
        }
        let got = admit(s, store, &r, callers - 1).await?;
        s.ensure(got == FenceVerdict::Stale { mark: callers }, Rule::FenceExclusive, || {
            format!(
                "round {round}: after fences 1..={callers} were admitted at once, fence {} answered {got:?}",
                callers - 1
            )
        })?;
    }
    Ok(())
}

/// Names a store must escape, the empty name, and names that differ only in such
/// characters: each keeps a mark of its own.
async fn resources<S: FenceMarks + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let names: Vec<String> =
        ["fence-res:a", "fence-res%3Aa", "fence-res{a}", "fence-resa", "fence res a}", "fence-rés-a", ""]
            .iter()
            .map(|n| s.env.name(n))
            .collect();
    // Each later name gets a lower fence: a mark shared with an earlier one refuses it.
    for (i, name) in names.iter().enumerate() {
        let fence = 100 - 10 * i as u64;
        let got = admit(s, store, name, fence).await?;
        s.ensure(got == FenceVerdict::Accepted, Rule::FenceResources, || {
            format!("fence {fence} to the fresh resource {name:?} (after lower fences to others) answered {got:?}")
        })?;
    }
    for (i, name) in names.iter().enumerate() {
        let fence = 100 - 10 * i as u64;
        let got = admit(s, store, name, fence).await?;
        s.ensure(got == FenceVerdict::Accepted, Rule::FenceResources, || {
            format!("fence {fence} to {name:?} again, after admits to other resources, answered {got:?}")
        })?;
    }
    Ok(())
}

/// A mark outlasts a time to live the store may keep: fence 9 went to `quiet` at
/// `since`, nothing since; after [`QUIET`] a lower fence is still refused.
async fn keeps<S: FenceMarks + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    quiet: &str,
    since: crate::time::Time,
) -> Result<(), Violation> {
    let until = since + QUIET.max(s.env.short_ttl * 3);
    if s.env.clock.now() < until {
        s.env.clock.sleep_until(until).await;
    }
    let waited = s.env.clock.now().saturating_since(since);
    let got = admit(s, store, quiet, 8).await?;
    s.ensure(got == FenceVerdict::Stale { mark: 9 }, Rule::FenceKeeps, || {
        format!("fence 8, {waited:?} after fence 9 was accepted and nothing since, answered {got:?}")
    })
}

async fn errors<S: FenceMarks + ?Sized>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation> {
    let r = s.env.name("fence-error");
    if let Some(outage) = s.begin_outage(&[Rule::FenceError]).await {
        let got = s.timed(store.admit(&r, 1)).await;
        outage.end().await;
        s.must_fail(Rule::FenceError, "admit", &got)?;
    }
    Ok(())
}

use std::time::Duration;

use futures::future::join_all;

use super::{Checked, ContractEnv, Rule, Suite, Violation, token};
use crate::ports::{Acquire, Fence, FencedWrites, LeaseName, Release, WriteVerdict};
use crate::token::LeaseToken;

const LONG: Duration = Duration::from_secs(60);

/// The [`FencedWrites`] contract, over the writes and the lease store they check
/// ([`FencedWrites::leases`]): the current fence writes, also after its lease expired or was
/// released while nobody took it; an earlier holder's fence, a larger one and one of
/// a lease never taken write nothing and answer the current fence; a write racing
/// another holder's acquire never lands after it; reads answer the last write, keys
/// of different leases and names apart; and (with an outage hook) errors never pass
/// for answers.
///
/// # Errors
/// The first rule the store broke.
pub async fn fenced_writes<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: FencedWrites + ?Sized,
{
    let mut s = Suite::new(env);
    let lease = LeaseName::job(env.name("write-lease"));
    let (a, b) = (token("write-alpha", 91), token("write-beta", 92));
    let key = "we{ird}: key";

    let never = Fence::new(LeaseName::job(env.name("write-never")), 1);
    let got = write(&mut s, store, &never, key, b"x").await?;
    s.ensure(got == WriteVerdict::Stale { current: 0 }, Rule::WriteStale, || {
        format!("a write with fence 1 of a lease never taken answered {got:?}")
    })?;
    read(&mut s, store, never.lease(), key, None, "after a refused write").await?;

    // The holder writes; a fence above the current writes nothing.
    let fa = take(&mut s, store, &lease, &a, LONG).await?;
    expect(&mut s, store, &Fence::new(lease.clone(), fa), key, b"a1", WriteVerdict::Written).await?;
    read(&mut s, store, &lease, key, Some(b"a1"), "after the holder's write").await?;
    let above = Fence::new(lease.clone(), fa + 1);
    expect(&mut s, store, &above, key, b"x", WriteVerdict::Stale { current: fa }).await?;
    read(&mut s, store, &lease, key, Some(b"a1"), "after a write with a fence never handed out").await?;

    // Released, nobody took it since: still current. Then beta takes it.
    let got = s.call("release", store.leases().release(&lease, &a)).await?;
    s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;
    expect(&mut s, store, &Fence::new(lease.clone(), fa), key, b"a2", WriteVerdict::Written).await?;
    let fb = take(&mut s, store, &lease, &b, env.short_ttl).await?;
    expect(&mut s, store, &Fence::new(lease.clone(), fa), key, b"x", WriteVerdict::Stale { current: fb }).await?;
    expect(&mut s, store, &Fence::new(lease.clone(), fb), key, b"b1", WriteVerdict::Written).await?;
    // Expired, nobody took it since: still current.
    s.env.wait(s.env.short_ttl * 3).await;
    expect(&mut s, store, &Fence::new(lease.clone(), fb), key, b"b2", WriteVerdict::Written).await?;
    read(&mut s, store, &lease, key, Some(b"b2"), "after the expired holder's write").await?;

    // Other keys and other leases are apart.
    read(&mut s, store, &lease, "another key", None, "for a key never written").await?;
    let other = LeaseName::queue(lease.name());
    read(&mut s, store, &other, key, None, "for a queue lease of the job's name").await?;

    atomic(&mut s, store).await?;

    if let Some(outage) = s.begin_outage(&[Rule::WriteError]).await {
        let written = s.timed(store.write_fenced(&Fence::new(lease.clone(), fb), key, b"x")).await;
        let read = s.timed(store.read_fenced(&lease, key)).await;
        outage.end().await;
        s.must_fail(Rule::WriteError, "write_fenced", &written)?;
        s.must_fail(Rule::WriteError, "read_fenced", &read)?;
    }
    Ok(s.finish())
}

async fn write<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    fence: &Fence,
    key: &str,
    v: &[u8],
) -> Result<WriteVerdict, Violation>
where
    S: FencedWrites + ?Sized,
{
    s.call("write_fenced", store.write_fenced(fence, key, v)).await
}

/// A write answers `want` (`write.current` for `Written`, else `write.stale`).
async fn expect<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    fence: &Fence,
    key: &str,
    v: &[u8],
    want: WriteVerdict,
) -> Result<(), Violation>
where
    S: FencedWrites + ?Sized,
{
    let got = write(s, store, fence, key, v).await?;
    let rule = if want == WriteVerdict::Written { Rule::WriteCurrent } else { Rule::WriteStale };
    s.ensure(got == want, rule, || format!("a write with {fence} answered {got:?}, not {want:?}"))
}

async fn read<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    lease: &LeaseName,
    key: &str,
    want: Option<&[u8]>,
    when: &str,
) -> Result<(), Violation>
where
    S: FencedWrites + ?Sized,
{
    let got = s.call("read_fenced", store.read_fenced(lease, key)).await?;
    let rule = if want.is_some() { Rule::WriteCurrent } else { Rule::WriteRead };
    s.ensure(got.as_deref() == want, rule, || format!("{when}, {key:?} of {lease} read {got:?}, not {want:?}"))
}

async fn take<S>(
    s: &mut Suite<'_, S>,
    store: &S,
    lease: &LeaseName,
    t: &LeaseToken,
    ttl: Duration,
) -> Result<u64, Violation>
where
    S: FencedWrites + ?Sized,
{
    match s.call("acquire", store.leases().acquire(lease, t, ttl)).await? {
        Acquire::Acquired { fence } => Ok(fence),
        got => Err(Violation { rule: Rule::LeaseAcquireExclusive, detail: format!("a free lease answered {got:?}") }),
    }
}

/// Rounds of the old holder's writes racing a new holder's acquire, through every
/// instance: what the new holder reads as soon as its acquire answered is what the
/// key holds once every write came back (a write checked before the acquire and
/// landed after it changes it).
async fn atomic<S>(s: &mut Suite<'_, S>, store: &S) -> Result<(), Violation>
where
    S: FencedWrites + ?Sized,
{
    let pool = s.env.pool(store);
    let writers = s.env.callers.max(2);
    for round in 0..s.env.rounds {
        let lease = LeaseName::job(s.env.name(&format!("write-race-{round}")));
        let (old, new) = (token("write-old", 600 + round as u64), token("write-new", 700 + round as u64));
        let f = take(s, store, &lease, &old, s.env.short_ttl).await?;
        let fence = Fence::new(lease.clone(), f);
        expect(s, store, &fence, "k", b"old-0", WriteVerdict::Written).await?;
        let got = s.call("release", store.leases().release(&lease, &old)).await?;
        s.ensure(got == Release::Released, Rule::LeaseReleaseFrees, || format!("release answered {got:?}"))?;
        // The acquire goes in at a place that turns with the round.
        let at = round % (writers + 1);
        let env = s.env;
        let (lease_ref, fence_ref, new_ref) = (&lease, &fence, &new);
        let calls = (0..=writers).map(|i| {
            let on = pool[i % pool.len()];
            async move {
                if i == at {
                    let got = env.within(env.deadline, on.leases().acquire(lease_ref, new_ref, LONG)).await;
                    let seen = env.within(env.deadline, on.read_fenced(lease_ref, "k")).await;
                    (Some((got, seen)), None)
                } else {
                    let v = format!("old-{}", i + 1).into_bytes();
                    (None, Some(env.within(env.deadline, on.write_fenced(fence_ref, "k", &v)).await))
                }
            }
        });
        let mut seen = None;
        for (taken, written) in join_all(calls).await {
            if let Some((got, read)) = taken {
                let got = s.timely("acquire", got)?;
                let got = s.answer("acquire", got)?;
                s.ensure(matches!(got, Acquire::Acquired { .. }), Rule::LeaseAcquireExclusive, || {
                    format!("round {round}: the new holder's acquire of a released lease answered {got:?}")
                })?;
                let read = s.timely("read_fenced", read)?;
                seen = Some(s.answer("read_fenced", read)?);
            }
            if let Some(w) = written {
                let w = s.timely("write_fenced", w)?;
                s.answer("write_fenced", w)?;
            }
        }
        let after = s.call("read_fenced", store.read_fenced(&lease, "k")).await?;
        s.ensure(seen.as_ref() == Some(&after), Rule::WriteAtomic, || {
            format!(
                "round {round}: the new holder read {:?} once its acquire answered, and the old holder's \
                 writes left {:?}",
                seen.flatten().map(|v| String::from_utf8_lossy(&v).into_owned()),
                after.map(|v| String::from_utf8_lossy(&v).into_owned())
            )
        })?;
        let _ = s.call("release", store.leases().release(&lease, &new)).await?;
    }
    Ok(())
}

use std::time::Duration;

use futures::future::join_all;

use super::{Checked, ContractEnv, Rule, Suite, Violation, token};
use crate::ports::{ClaimState, ClaimStore, ClaimTtls, MessageId, SettleAction, SettleResult, Settlement};
use crate::token::LeaseToken;

const LONG: Duration = Duration::from_secs(60);
const LONG_TTLS: ClaimTtls = ClaimTtls { pending: LONG, done: LONG };

fn settle(id: &MessageId, action: SettleAction) -> Settlement {
    Settlement { id: id.clone(), action }
}

fn s_id(id: &str) -> MessageId {
    MessageId::String(id.to_owned())
}

fn pending(holder: &str) -> ClaimState {
    ClaimState::PendingElsewhere { holder: holder.to_owned() }
}

/// The [`ClaimStore`] contract: one `Claimed` among concurrent claims of a message,
/// answers in order, done suppresses, another's pending claim abandons, pending and
/// done claims expire, settlements act only on our own pending claim, ids of
/// different types and queues are different claims, a settlement and the next
/// claims in one call answer as the two calls would, expiry every instance agrees on
/// (with several `ContractEnv::instances`), and (with an outage hook) errors never
/// pass for states.
///
/// # Errors
/// The first rule the store broke.
pub async fn claim_store<S: ClaimStore + ?Sized>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation> {
    let mut s = Suite::new(env);
    let queue = env.name("contract-q");
    lifecycle(&mut s, store, &queue).await?;
    expiry(&mut s, store, &queue).await?;
    shapes(&mut s, store, &queue).await?;
    // Before the concurrent claims, which instances disagreeing on expiry break too.
    super::clocks::claims(&mut s, store, &queue).await?;
    exclusion(&mut s, store, &queue).await?;
    settle_then_claim(&mut s, store, &queue).await?;
    errors(&mut s, store, &queue).await?;
    Ok(s.finish())
}

async fn claim<S: ClaimStore + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    queue: &str,
    ids: &[MessageId],
    t: &LeaseToken,
    ttl: Duration,
) -> Result<Vec<ClaimState>, Violation> {
    let got = s.call("claim_batch", store.claim_batch(queue, ids, t, ttl)).await?;
    s.ensure(got.len() == ids.len(), Rule::ClaimOrder, || {
        format!("claim_batch of {} ids answered {} states: {got:?}", ids.len(), got.len())
    })?;
    Ok(got)
}

async fn settle_all<S: ClaimStore + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    queue: &str,
    settlements: &[Settlement],
    t: &LeaseToken,
    ttl: Duration,
) -> Result<Vec<SettleResult>, Violation> {
    let got = s.call("settle_batch", store.settle_batch(queue, settlements, t, ttl)).await?;
    s.ensure(got.len() == settlements.len(), Rule::ClaimSettleOrder, || {
        format!("settle_batch of {} settlements answered {} results: {got:?}", settlements.len(), got.len())
    })?;
    Ok(got)
}

/// Claim, pending elsewhere, settle, done suppresses, a released claim is free, and
/// nobody settles a claim that is not their pending one.
async fn lifecycle<S: ClaimStore + ?Sized>(s: &mut Suite<'_, S>, store: &S, queue: &str) -> Result<(), Violation> {
    let (a, b, c) = (token("alpha", 11), token("beta", 12), token("gamma", 13));
    let (m1, m2) = (s_id("m1"), s_id("m2"));

    let got = claim(s, store, queue, &[], &a, LONG).await?;
    s.ensure(got.is_empty(), Rule::ClaimOrder, || format!("an empty claim answered {got:?}"))?;
    let got = settle_all(s, store, queue, &[], &a, LONG).await?;
    s.ensure(got.is_empty(), Rule::ClaimSettleOrder, || format!("an empty settle answered {got:?}"))?;

    let got = claim(s, store, queue, &[m1.clone(), m2.clone()], &a, LONG).await?;
    s.ensure(got == [ClaimState::Claimed, ClaimState::Claimed], Rule::ClaimExclusive, || {
        format!("claims of two free messages answered {got:?}")
    })?;
    let got = claim(s, store, queue, std::slice::from_ref(&m1), &b, LONG).await?;
    s.ensure(got == [pending("alpha")], Rule::ClaimPending, || format!("alpha's pending claim answered beta {got:?}"))?;

    let got =
        settle_all(s, store, queue, &[settle(&m1, SettleAction::Done), settle(&m2, SettleAction::Release)], &a, LONG)
            .await?;
    s.ensure(got == [SettleResult::Settled, SettleResult::Settled], Rule::ClaimSettleOwner, || {
        format!("the holder's settlements of its pending claims answered {got:?}")
    })?;
    let got = claim(s, store, queue, std::slice::from_ref(&m1), &b, LONG).await?;
    s.ensure(got == [ClaimState::Done], Rule::ClaimDone, || format!("a claim marked done answered {got:?}"))?;
    let got = claim(s, store, queue, std::slice::from_ref(&m2), &b, LONG).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimSettleRelease, || format!("a released claim answered {got:?}"))?;

    let got =
        settle_all(s, store, queue, &[settle(&m1, SettleAction::Release), settle(&m2, SettleAction::Done)], &a, LONG)
            .await?;
    s.ensure(got == [SettleResult::NotOwner, SettleResult::NotOwner], Rule::ClaimSettleOwner, || {
        format!("alpha's settlements of a done claim and of beta's pending claim answered {got:?}")
    })?;
    let got1 = claim(s, store, queue, std::slice::from_ref(&m1), &c, LONG).await?;
    let got2 = claim(s, store, queue, std::slice::from_ref(&m2), &c, LONG).await?;
    s.ensure(got1 == [ClaimState::Done] && got2 == [pending("beta")], Rule::ClaimSettleOwner, || {
        format!("after settlements that were not alpha's to make, the claims answered {got1:?} and {got2:?}")
    })?;
    let got = settle_all(s, store, queue, &[settle(&m2, SettleAction::Release)], &b, LONG).await?;
    s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || format!("beta's release answered {got:?}"))?;
    Ok(())
}

/// A crashed holder's pending claim expires and a redelivery takes it; the crashed
/// holder cannot settle the new claim, nor its own expired claim nobody took; the
/// dedup window ends.
async fn expiry<S: ClaimStore + ?Sized>(s: &mut Suite<'_, S>, store: &S, queue: &str) -> Result<(), Violation> {
    super::clocks::claim_ttls(s, store, queue).await?;
    let (a, b, c) = (token("alpha", 21), token("beta", 22), token("gamma", 23));
    let short = s.env.short_ttl;
    let m3 = s_id("m{3}:x y");

    let got = claim(s, store, queue, std::slice::from_ref(&m3), &a, short).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimExclusive, || format!("a free claim answered {got:?}"))?;
    s.env.wait(short * 3).await;
    let got = claim(s, store, queue, std::slice::from_ref(&m3), &b, LONG).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimPendingExpires, || {
        format!("a {short:?} pending claim answered {got:?} after {:?}", short * 3)
    })?;
    let got = settle_all(s, store, queue, &[settle(&m3, SettleAction::Done)], &a, LONG).await?;
    s.ensure(got == [SettleResult::NotOwner], Rule::ClaimSettleOwner, || {
        format!("the crashed holder's settlement of the new claim answered {got:?}")
    })?;

    // Three short times of window, so a stalled machine between the settle and the
    // check does not end it early.
    let got = settle_all(s, store, queue, &[settle(&m3, SettleAction::Done)], &b, short * 3).await?;
    s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
        format!("the holder's settlement answered {got:?}")
    })?;
    let got = claim(s, store, queue, std::slice::from_ref(&m3), &c, LONG).await?;
    s.ensure(got == [ClaimState::Done], Rule::ClaimDone, || format!("a claim marked done answered {got:?}"))?;
    s.env.wait(short * 6).await;
    let got = claim(s, store, queue, std::slice::from_ref(&m3), &c, LONG).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimDoneExpires, || {
        format!("a claim done for {:?} answered {got:?} after {:?}", short * 3, short * 6)
    })?;
    let got = settle_all(s, store, queue, &[settle(&m3, SettleAction::Release)], &c, LONG).await?;
    s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
        format!("the holder's release answered {got:?}")
    })?;

    // Our own pending claims that expired, nobody having taken them since: neither
    // settlement is ours to make any more, and neither changes anything.
    let (m6, m7) = (s_id("m6-expired"), s_id("m7-expired"));
    let got = claim(s, store, queue, &[m6.clone(), m7.clone()], &a, short).await?;
    s.ensure(got == [ClaimState::Claimed, ClaimState::Claimed], Rule::ClaimExclusive, || {
        format!("claims of two free messages answered {got:?}")
    })?;
    s.env.wait(short * 3).await;
    let got =
        settle_all(s, store, queue, &[settle(&m6, SettleAction::Done), settle(&m7, SettleAction::Release)], &a, LONG)
            .await?;
    s.ensure(got == [SettleResult::NotOwner, SettleResult::NotOwner], Rule::ClaimSettleExpired, || {
        format!(
            "settlements of our own {short:?} pending claims {:?} later, nobody having taken them, answered {got:?}",
            short * 3
        )
    })?;
    let got = claim(s, store, queue, std::slice::from_ref(&m6), &b, LONG).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimSettleExpired, || {
        format!("after a Done settle of our own expired claim, the next claim answered {got:?}")
    })?;
    let got = settle_all(s, store, queue, &[settle(&m6, SettleAction::Release)], &b, LONG).await?;
    s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
        format!("the holder's release answered {got:?}")
    })?;
    Ok(())
}

/// A repeated id, ids of every type, another queue, and answers in order in mixed
/// batches.
async fn shapes<S: ClaimStore + ?Sized>(s: &mut Suite<'_, S>, store: &S, queue: &str) -> Result<(), Violation> {
    let (a, b) = (token("alpha", 31), token("beta", 32));
    let (m4, m5) = (s_id("m4"), s_id("m5"));
    let got = claim(s, store, queue, std::slice::from_ref(&m5), &a, LONG).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimExclusive, || format!("a free claim answered {got:?}"))?;

    let typed = [
        s_id("42"),
        MessageId::Ulong(42),
        MessageId::Binary(b"42".to_vec()),
        MessageId::Uuid(*b"0123456789abcdef"),
        s_id("ulong:42"),
        s_id("binary:3432"),
        MessageId::Binary(Vec::new()),
        s_id(""),
    ];
    let got = claim(s, store, queue, &typed, &a, LONG).await?;
    s.ensure(got.iter().all(|c| *c == ClaimState::Claimed), Rule::ClaimDistinct, || {
        format!("ids of different types ({typed:?}) answered {got:?}")
    })?;
    let other_queue = s.env.name("contract-q2");
    let got = claim(s, store, &other_queue, &typed[..1], &b, LONG).await?;
    s.ensure(got == [ClaimState::Claimed], Rule::ClaimDistinct, || {
        format!("the same id in another queue answered {got:?}")
    })?;

    let (f1, f2, done) = (s_id("fresh-1"), s_id("fresh-2"), s_id("m1"));
    let got = claim(s, store, queue, &[f1.clone(), done.clone(), f2.clone(), m5.clone()], &b, LONG).await?;
    let want = [ClaimState::Claimed, ClaimState::Done, ClaimState::Claimed, pending("alpha")];
    s.ensure(got == want, Rule::ClaimOrder, || format!("a mixed batch answered {got:?}, not {want:?}"))?;
    let settlements = [
        settle(&f2, SettleAction::Release),
        settle(&m5, SettleAction::Done),
        settle(&f1, SettleAction::Done),
        settle(&typed[0], SettleAction::Release),
    ];
    let got = settle_all(s, store, queue, &settlements, &b, LONG).await?;
    let want = [SettleResult::Settled, SettleResult::NotOwner, SettleResult::Settled, SettleResult::NotOwner];
    s.ensure(got == want, Rule::ClaimSettleOrder, || format!("mixed settlements answered {got:?}, not {want:?}"))?;

    let got = claim(s, store, queue, &[m4.clone(), m4.clone()], &a, LONG).await?;
    s.ensure(got[0] == ClaimState::Claimed && got[1] != ClaimState::Claimed, Rule::ClaimRepeat, || {
        format!("an id twice in one call answered {got:?}")
    })?;

    // Clean up what alpha still holds.
    let mut mine: Vec<Settlement> = typed.iter().map(|id| settle(id, SettleAction::Release)).collect();
    mine.push(settle(&m4, SettleAction::Release));
    mine.push(settle(&m5, SettleAction::Release));
    let got = settle_all(s, store, queue, &mine, &a, LONG).await?;
    s.ensure(got.iter().all(|r| *r == SettleResult::Settled), Rule::ClaimSettleOwner, || {
        format!("the holder's releases answered {got:?}")
    })?;
    let got = settle_all(s, store, &other_queue, &[settle(&typed[0], SettleAction::Release)], &b, LONG).await?;
    s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
        format!("the holder's release answered {got:?}")
    })?;
    Ok(())
}

/// Many callers claim the same messages at once, in different orders, round after
/// round, spread over the store's instances: each message is `Claimed` exactly once.
async fn exclusion<S: ClaimStore + ?Sized>(s: &mut Suite<'_, S>, store: &S, queue: &str) -> Result<(), Violation> {
    let callers = s.env.callers;
    let pool = s.env.pool(store);
    let on = |i: usize| pool[i % pool.len()];
    for round in 0..s.env.rounds {
        let ids = [s_id(&format!("race-{round}-a")), s_id(&format!("race-{round}-b")), MessageId::Ulong(round as u64)];
        let tokens: Vec<LeaseToken> =
            (0..callers).map(|i| token(&format!("racer{i}"), (round * callers + i) as u64 + 500)).collect();
        let batches: Vec<Vec<MessageId>> = (0..callers)
            .map(|i| {
                let mut b = ids.to_vec();
                b.rotate_left(i % ids.len());
                b
            })
            .collect();
        let env = s.env;
        let answers = join_all(
            tokens
                .iter()
                .zip(&batches)
                .enumerate()
                .map(|(i, (t, ids))| env.within(env.deadline, on(i).claim_batch(queue, ids, t, LONG))),
        )
        .await;
        let mut claimed = vec![0usize; ids.len()];
        let mut owner = vec![None; ids.len()];
        for (i, a) in answers.into_iter().enumerate() {
            let a = s.timely("claim_batch", a)?;
            let states = s.answer("claim_batch", a)?;
            s.ensure(states.len() == ids.len(), Rule::ClaimOrder, || format!("round {round}: answered {states:?}"))?;
            for (id, state) in batches[i].iter().zip(states) {
                let k = ids.iter().position(|x| x == id).unwrap_or(0);
                if state == ClaimState::Claimed {
                    claimed[k] += 1;
                    owner[k] = Some(i);
                }
            }
        }
        s.ensure(claimed.iter().all(|&n| n == 1), Rule::ClaimExclusive, || {
            format!("round {round}: {callers} concurrent claims of {ids:?} answered Claimed {claimed:?} times")
        })?;
        for (k, id) in ids.iter().enumerate() {
            if let Some(i) = owner[k] {
                let got = settle_all(s, on(i), queue, &[settle(id, SettleAction::Release)], &tokens[i], LONG).await?;
                s.ensure(got == [SettleResult::Settled], Rule::ClaimSettleOwner, || {
                    format!("round {round}: the winner's release answered {got:?}")
                })?;
            }
        }
    }
    Ok(())
}

/// One call settles some claims and then takes others: the claims see the
/// settlements (done answers `Done`, released is free again), another holder's
/// claim stays theirs, and concurrent callers still take each free claim once.
async fn settle_then_claim<S: ClaimStore + ?Sized>(
    s: &mut Suite<'_, S>,
    store: &S,
    queue: &str,
) -> Result<(), Violation> {
    let (a, b) = (token("alpha", 51), token("beta", 52));
    let [m1, m2, m3, m4] = ["stc-1", "stc-2", "stc-3", "stc-4"].map(s_id);
    claim(s, store, queue, &[m1.clone(), m2.clone()], &a, LONG).await?;
    claim(s, store, queue, std::slice::from_ref(&m3), &b, LONG).await?;
    let settlements =
        [settle(&m1, SettleAction::Done), settle(&m2, SettleAction::Release), settle(&m3, SettleAction::Done)];
    let ids = [m1.clone(), m2.clone(), m3.clone(), m4.clone()];
    let got = s.bounded("settle_then_claim", store.settle_then_claim(queue, &settlements, &ids, &a, LONG_TTLS)).await?;
    let settled = s.answer("settle_then_claim", got.settled)?;
    let claimed = s.answer("settle_then_claim", got.claimed)?;
    s.ensure(
        settled == [SettleResult::Settled, SettleResult::Settled, SettleResult::NotOwner],
        Rule::ClaimSettleThenClaim,
        || format!("alpha's settlements of its two pending claims and of beta's answered {settled:?}"),
    )?;
    let want = [ClaimState::Done, ClaimState::Claimed, pending("beta"), ClaimState::Claimed];
    s.ensure(claimed == want, Rule::ClaimSettleThenClaim, || {
        format!("after marking m1 done and releasing m2 in the same call, claims of m1..m4 answered {claimed:?}, not {want:?}")
    })?;
    let got = s.bounded("settle_then_claim", store.settle_then_claim(queue, &[], &[], &a, LONG_TTLS)).await?;
    s.ensure(got.settled == Ok(Vec::new()) && got.claimed == Ok(Vec::new()), Rule::ClaimSettleThenClaim, || {
        format!("an empty settle_then_claim answered {got:?}")
    })?;

    // Concurrent callers on the store's instances, each settling a claim of its own
    // and taking the same free ones: each free claim is taken once.
    let pool = s.env.pool(store);
    let on = |i: usize| pool[i % pool.len()];
    let tokens: Vec<LeaseToken> = (0..6).map(|i| token(&format!("stc{i}"), 60 + i)).collect();
    let own: Vec<MessageId> = (0..tokens.len()).map(|i| s_id(&format!("stc-own-{i}"))).collect();
    for (t, id) in tokens.iter().zip(&own) {
        claim(s, store, queue, std::slice::from_ref(id), t, LONG).await?;
    }
    let shared: Vec<MessageId> = (0..4).map(|i| s_id(&format!("stc-shared-{i}"))).collect();
    let settles: Vec<[Settlement; 1]> = own.iter().map(|id| [settle(id, SettleAction::Release)]).collect();
    let env = s.env;
    let answers =
        join_all(
            tokens.iter().zip(&settles).enumerate().map(|(i, (t, st))| {
                env.within(env.deadline, on(i).settle_then_claim(queue, st, &shared, t, LONG_TTLS))
            }),
        )
        .await;
    let mut taken = vec![Vec::new(); shared.len()];
    for (i, got) in answers.into_iter().enumerate() {
        let got = s.timely("settle_then_claim", got)?;
        let settled = s.answer("settle_then_claim", got.settled)?;
        s.ensure(settled == [SettleResult::Settled], Rule::ClaimSettleThenClaim, || {
            format!("a concurrent caller's release of its own claim answered {settled:?}")
        })?;
        let claimed = s.answer("settle_then_claim", got.claimed)?;
        s.ensure(claimed.len() == shared.len(), Rule::ClaimOrder, || format!("answered {claimed:?}"))?;
        for (k, state) in claimed.iter().enumerate() {
            if *state == ClaimState::Claimed {
                taken[k].push(i);
            }
        }
    }
    s.ensure(taken.iter().all(|w| w.len() == 1), Rule::ClaimExclusive, || {
        format!(
            "{} concurrent settle_then_claim calls took each of {} free claims {taken:?} times",
            tokens.len(),
            shared.len()
        )
    })?;
    for (k, winners) in taken.iter().enumerate() {
        for &i in winners {
            settle_all(s, store, queue, &[settle(&shared[k], SettleAction::Release)], &tokens[i], LONG).await?;
        }
    }
    settle_all(s, store, queue, &[settle(&m2, SettleAction::Release), settle(&m4, SettleAction::Release)], &a, LONG)
        .await?;
    settle_all(s, store, queue, &[settle(&m3, SettleAction::Release)], &b, LONG).await?;
    Ok(())
}

/// While the store cannot answer, claims and settlements answer `Err`, also when
/// asked in one call.
async fn errors<S: ClaimStore + ?Sized>(s: &mut Suite<'_, S>, store: &S, queue: &str) -> Result<(), Violation> {
    let (a, b) = (token("alpha", 41), token("beta", 42));
    let (id, lone) = (s_id("outage"), s_id("outage-lone"));
    let rules = [Rule::ClaimError, Rule::ClaimSettleError, Rule::StoreNeverSent];
    let Some(outage) = s.begin_outage(&rules).await else { return Ok(()) };
    let alone = s.timed(store.claim_batch(queue, std::slice::from_ref(&lone), &a, LONG)).await;
    let claimed = s.timed(store.claim_batch(queue, std::slice::from_ref(&id), &a, LONG)).await;
    let settled = s.timed(store.settle_batch(queue, &[settle(&id, SettleAction::Release)], &a, LONG)).await;
    let both = s
        .timed(store.settle_then_claim(
            queue,
            &[settle(&id, SettleAction::Release)],
            std::slice::from_ref(&id),
            &a,
            LONG_TTLS,
        ))
        .await;
    outage.end().await;
    s.must_fail(Rule::ClaimError, "claim_batch", &alone)?;
    s.must_fail(Rule::ClaimError, "claim_batch", &claimed)?;
    s.must_fail(Rule::ClaimSettleError, "settle_batch", &settled)?;
    let (both_settled, both_claimed) = match both {
        Some(both) => (Some(both.settled), Some(both.claimed)),
        None => (None, None),
    };
    s.must_fail(Rule::ClaimSettleError, "settle_then_claim (its settlements)", &both_settled)?;
    s.must_fail(Rule::ClaimError, "settle_then_claim (its claims)", &both_claimed)?;
    // A request the server got runs when it answers again (a frozen server thaws):
    // a claim reported never sent must not have been taken.
    s.env.wait(s.env.short_ttl / 3).await;
    let now = s.call("claim_batch", store.claim_batch(queue, std::slice::from_ref(&lone), &b, LONG)).await?;
    let landed = matches!(now.as_slice(), [ClaimState::PendingElsewhere { holder }] if holder == a.holder());
    s.unsent_landed("claim_batch", &alone, landed)?;
    // A timed-out claim may have landed once the store answered again.
    for t in [&a, &b] {
        let release = [settle(&id, SettleAction::Release), settle(&lone, SettleAction::Release)];
        let _ = s.timed(store.settle_batch(queue, &release, t, LONG)).await;
    }
    Ok(())
}

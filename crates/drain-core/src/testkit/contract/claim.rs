use super::{ContractEnv, token};
use crate::ports::{ClaimState, ClaimStore, SettleAction, SettleResult, Settlement};

fn settle(key: &str, action: SettleAction) -> Settlement {
    Settlement { key: key.to_owned(), action }
}

/// The [`ClaimStore`] contract of SPEC §6: batch claim, done suppresses, foreign
/// pending abandons, compare-and-settle, pending and done expiry.
///
/// # Panics
/// On the first broken rule, naming it.
pub async fn claim_store<S: ClaimStore + ?Sized>(store: &S, env: &ContractEnv<'_>) {
    let long = std::time::Duration::from_secs(60);
    let a = token("alpha", 11);
    let b = token("beta", 12);
    let c = token("gamma", 13);
    let k = |id: &str| env.keys.message_claim("contract-q", id);
    let (k1, k2, k3, k4) = (k("m1"), k("m2"), k("m{3}:x"), k("m4"));

    assert_eq!(store.claim_batch(&[], &a, long).await.expect("empty claim"), Vec::new());
    assert_eq!(store.settle_batch(&[], &a, long).await.expect("empty settle"), Vec::new());

    let got = store.claim_batch(&[k1.clone(), k2.clone()], &a, long).await.expect("claim a");
    assert_eq!(got, vec![ClaimState::Claimed, ClaimState::Claimed], "absent keys MUST be Claimed, in order");
    let got = store.claim_batch(std::slice::from_ref(&k1), &b, long).await.expect("claim b");
    assert_eq!(
        got,
        vec![ClaimState::PendingElsewhere { holder: "alpha".into() }],
        "another's pending claim MUST be PendingElsewhere naming the holder"
    );

    let got = store
        .settle_batch(&[settle(&k1, SettleAction::MarkDone), settle(&k2, SettleAction::Release)], &a, long)
        .await
        .expect("settle a");
    assert_eq!(got, vec![SettleResult::Settled, SettleResult::Settled]);
    let got = store.claim_batch(&[k1.clone(), k2.clone()], &b, long).await.expect("claim b again");
    assert_eq!(got, vec![ClaimState::Done, ClaimState::Claimed], "done MUST suppress; a released claim MUST be free");

    // Compare-and-settle: nobody settles a claim that is not their pending one.
    let got = store
        .settle_batch(&[settle(&k1, SettleAction::Release), settle(&k2, SettleAction::MarkDone)], &a, long)
        .await
        .expect("foreign settle");
    assert_eq!(got, vec![SettleResult::NotOwner, SettleResult::NotOwner]);
    assert_eq!(
        store.claim_batch(&[k1.clone(), k2.clone()], &c, long).await.expect("claim c"),
        vec![ClaimState::Done, ClaimState::PendingElsewhere { holder: "beta".into() }],
        "a foreign settle MUST change nothing"
    );

    // A crashed submitter's pending claim expires and a redelivery can take it.
    assert_eq!(
        store.claim_batch(std::slice::from_ref(&k3), &a, env.short_ttl).await.expect("claim"),
        vec![ClaimState::Claimed]
    );
    env.wait(env.short_ttl * 3).await;
    assert_eq!(
        store.claim_batch(std::slice::from_ref(&k3), &b, long).await.expect("claim after expiry"),
        vec![ClaimState::Claimed],
        "an expired pending claim MUST be claimable"
    );
    assert_eq!(
        store.settle_batch(&[settle(&k3, SettleAction::MarkDone)], &a, long).await.expect("late settle"),
        vec![SettleResult::NotOwner],
        "the crashed holder MUST NOT settle the new claim"
    );

    // The dedup window ends. (Three short TTLs of window, so a stalled machine between
    // the settle and the check does not expire it early.)
    assert_eq!(
        store.settle_batch(&[settle(&k3, SettleAction::MarkDone)], &b, env.short_ttl * 3).await.expect("settle"),
        vec![SettleResult::Settled]
    );
    assert_eq!(store.claim_batch(std::slice::from_ref(&k3), &c, long).await.expect("claim"), vec![ClaimState::Done]);
    env.wait(env.short_ttl * 5).await;
    assert_eq!(store.claim_batch(std::slice::from_ref(&k3), &c, long).await.expect("claim"), vec![ClaimState::Claimed]);

    // A key twice in one call is claimed once.
    let got = store.claim_batch(&[k4.clone(), k4.clone()], &a, long).await.expect("dup claim");
    assert_eq!(got[0], ClaimState::Claimed);
    assert_ne!(got[1], ClaimState::Claimed, "a repeated key MUST be Claimed at most once");

    // Clean up.
    let _ = store.settle_batch(&[settle(&k4, SettleAction::Release)], &a, long).await;
    let _ = store.settle_batch(&[settle(&k3, SettleAction::Release)], &c, long).await;
    let _ = store.settle_batch(&[settle(&k2, SettleAction::Release)], &b, long).await;
}

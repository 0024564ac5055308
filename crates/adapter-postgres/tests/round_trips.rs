//! Round trips per operation, from the server's own pg_stat_statements (calls per
//! top-level statement) and the store's `StoreOp` events: every operation is one
//! call of one of drain's functions, nothing else is sent (the statements were
//! prepared at connect).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::ports::{
    ClaimState, ClaimStore, ClaimTtls, LeaseName, LeaseStore, MessageId, OwnerClaim, OwnerClaims, SettleAction,
    SettleResult, Settlement,
};
use drain_core::testkit::{RecordingObserver, half_done};
use test_servers::PostgresServer;

use support::{calls, calls_in, connect, observed, reset_stats, round_trips, server, token};

/// Run `op` once: (drain's statements the server ran, store round trips).
async fn measure<T>(
    pg: &PostgresServer,
    obs: &RecordingObserver,
    op: impl Future<Output = T>,
) -> (T, BTreeMap<String, u64>, usize) {
    reset_stats(pg);
    obs.clear();
    let out = op.await;
    (out, calls_in(pg, "drain"), round_trips(obs))
}

#[tokio::test]
async fn every_operation_is_one_function_call() {
    let pg = server();
    let (store, obs) = observed(connect(&pg.url()).await);
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    let ttl = Duration::from_secs(30);

    let (got, d, n) = measure(&pg, &obs, store.acquire(&lease, &me, ttl)).await;
    got.expect("acquire");
    assert_eq!((d, n), (calls(&[("acquire", 1)]), 1), "acquire = one call");
    let (got, d, n) = measure(&pg, &obs, store.acquire(&lease, &token("other", 2), ttl)).await;
    assert!(matches!(got.expect("acquire"), drain_core::ports::Acquire::Busy { .. }));
    assert_eq!((d, n), (calls(&[("acquire", 1)]), 1), "a held acquire = one call");
    let (got, d, n) = measure(&pg, &obs, store.renew(&lease, &me, ttl)).await;
    got.expect("renew");
    assert_eq!((d, n), (calls(&[("renew", 1)]), 1), "renew = one call");
    let (got, d, n) = measure(&pg, &obs, store.peek(&lease)).await;
    assert!(got.expect("peek").is_some());
    assert_eq!((d, n), (calls(&[("peek", 1)]), 1), "peek = one call");
    let (got, d, n) = measure(&pg, &obs, store.release(&lease, &me)).await;
    got.expect("release");
    assert_eq!((d, n), (calls(&[("release", 1)]), 1), "release = one call");

    // Owners: 50 peeks in one call.
    let owners: Vec<OwnerId> = (0..50).map(|i| OwnerId::from(format!("owner-{i}").as_str())).collect();
    for o in owners.iter().step_by(2) {
        store.acquire(&LeaseName::owner(o.as_str()), &me, ttl).await.expect("acquire owner");
    }
    let (got, d, n) = measure(&pg, &obs, store.peek_owners(&owners)).await;
    let got = got.expect("peek_owners");
    assert_eq!((d, n), (calls(&[("peek_owners", 1)]), 1), "50 owners = one call");
    assert_eq!(got.iter().filter(|c| matches!(c, OwnerClaim::Busy { .. })).count(), 25);

    // Claims: a batch of 100 in one call, its settlement in one call.
    let ids: Vec<MessageId> = (0..100).map(|i| MessageId::String(format!("m{i}"))).collect();
    let (got, d, n) = measure(&pg, &obs, store.claim_batch("q", &ids, &me, ttl)).await;
    assert!(got.expect("claim_batch").iter().all(|s| *s == ClaimState::Claimed));
    assert_eq!((d, n), (calls(&[("claim_batch", 1)]), 1), "100 claims = one call");
    let settlements = half_done(&ids);
    let (got, d, n) = measure(&pg, &obs, store.settle_batch("q", &settlements, &me, ttl)).await;
    assert_eq!(got.expect("settle_batch").len(), 100);
    assert_eq!((d, n), (calls(&[("settle_batch", 1)]), 1), "100 settlements = one call");

    // The tick's call per batch: the batch before's settlements and this batch's
    // claims, both functions, pipelined: one round trip.
    let next: Vec<MessageId> = (100..200).map(|i| MessageId::String(format!("m{i}"))).collect();
    let earlier: Vec<Settlement> =
        next.iter().take(10).map(|id| Settlement { id: id.clone(), action: SettleAction::Done }).collect();
    store.claim_batch("q", &next[..10], &me, ttl).await.expect("claim the batch before");
    let ttls = ClaimTtls { pending: ttl, done: ttl };
    let (got, d, n) = measure(&pg, &obs, store.settle_then_claim("q", &earlier, &next, &me, ttls)).await;
    assert_eq!(got.settled.expect("settled"), vec![SettleResult::Settled; 10]);
    let claimed = got.claimed.expect("claimed");
    // The claims saw the settlements: the ten just marked done answer done.
    assert_eq!(claimed[..10], vec![ClaimState::Done; 10]);
    assert!(claimed[10..].iter().all(|s| *s == ClaimState::Claimed), "{claimed:?}");
    assert_eq!((d, n), (calls(&[("claim_batch", 1), ("settle_batch", 1)]), 1), "settle then claim = one round trip");

    let (got, d, n) = measure(&pg, &obs, store.purge_expired(1000)).await;
    got.expect("purge_expired");
    assert_eq!((d, n), (calls(&[("purge_expired", 1)]), 1), "a purge = one call");

    // Empty batches cost nothing.
    let (got, d, n) = measure(&pg, &obs, store.claim_batch("q", &[], &me, ttl)).await;
    assert!(got.expect("empty").is_empty());
    assert_eq!((d, n), (calls(&[]), 0));
}

/// An admit is one call of `admit_fence()`; a fenced transaction adds one call of
/// `current_fence()` to the embedder's own statements (its `BEGIN`, its writes and
/// its `COMMIT`, or the `ROLLBACK` of a stale one), nothing else.
#[tokio::test]
async fn an_admit_is_one_call_and_a_fenced_transaction_adds_one() {
    use drain_core::ports::{Fence, FenceMarks};

    let pg = server();
    let (store, obs) = observed(connect(&pg.url()).await);
    pg.sql("CREATE TABLE report (n int)").expect("table");
    for fence in [3, 2] {
        let (got, d, n) = measure(&pg, &obs, store.admit("orders", fence)).await;
        got.expect("admit");
        assert_eq!((d, n), (calls(&[("admit_fence", 1)]), 1), "admit {fence} = one call");
    }
    let job = LeaseName::job("j");
    let token = token("me", 1);
    let Ok(drain_core::ports::Acquire::Acquired { fence }) = store.acquire(&job, &token, Duration::from_secs(30)).await
    else {
        panic!("acquire")
    };
    let mut client = store.connect_client().await.expect("client");
    for (number, statements) in [(fence, 3), (fence + 1, 2)] {
        reset_stats(&pg);
        let done = store
            .fenced(&mut client, &Fence::new(job.clone(), number), async |tx| {
                tx.execute("INSERT INTO report (n) VALUES (1)", &[]).await
            })
            .await
            .expect("fenced");
        let d = calls_in(&pg, "drain");
        assert_eq!(d.get("current_fence"), Some(&1), "fence {number} ({done:?}): {d:?}");
        assert_eq!(d.get("other"), Some(&statements), "fence {number} ({done:?}): {d:?}");
    }
}

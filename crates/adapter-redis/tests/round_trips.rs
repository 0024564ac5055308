//! Round trips per operation, from the server's `INFO commandstats` deltas and the
//! store's own `StoreOp` events: the hot path sends exactly the operation, nothing
//! else (no `PING`, no `UNWATCH`, no `SCRIPT LOAD`).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use adapter_redis::RedisStore;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    ClaimState, ClaimStore, ClaimTtls, LeaseName, LeaseStore, MessageId, OwnerClaims, SettleAction, SettleResult,
    Settlement,
};
use drain_core::testkit::{RecordingObserver, half_done};
use test_servers::{RedisCluster, RedisServer};

use support::{calls, connect, connect_cluster, delta, observed, round_trips, slot, token};

/// Commands the drain scripts run inside Redis: `INFO commandstats` counts them
/// too, but they cost no round trip.
const INSIDE_SCRIPTS: &[&str] = &["get", "set", "incr", "pexpiretime", "del", "pttl", "pexpire", "hset"];

/// What the client itself sent during a script-only measurement: the deltas
/// without the scripts' inner commands (which must be nothing but those).
fn sent_by_scripts(d: BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    d.into_iter().filter(|(k, _)| !INSIDE_SCRIPTS.contains(&k.as_str())).collect()
}

/// Run `op` once and return (server command deltas, store round trips).
async fn measure<F: Future>(
    stats: impl Fn() -> BTreeMap<String, u64>,
    observer: &RecordingObserver,
    op: F,
) -> (BTreeMap<String, u64>, usize) {
    observer.clear();
    let before = stats();
    op.await;
    let after = stats();
    (delta(&before, &after), round_trips(observer))
}

#[tokio::test]
async fn standalone_operations_cost_one_round_trip_each() {
    let redis = RedisServer::start();
    let (store, obs) = observed(connect(&redis.url()).await);
    let stats = || redis.command_calls().expect("INFO commandstats");
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    let ttl = Duration::from_secs(30);

    let (d, n) = measure(stats, &obs, async {
        store.acquire(&lease, &me, ttl).await.expect("acquire");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "acquire = one EVALSHA");

    let (d, n) = measure(stats, &obs, async {
        store.renew(&lease, &me, ttl).await.expect("renew");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "renew = one EVALSHA");

    let (d, n) = measure(stats, &obs, async {
        store.peek(&lease).await.expect("peek");
    })
    .await;
    assert_eq!((d, n), (calls(&[("get", 2), ("pttl", 1)]), 1), "peek = GET + PTTL + GET fence in one pipeline");

    let (d, n) = measure(stats, &obs, async {
        store.release(&lease, &me).await.expect("release");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "release = one EVALSHA");

    let (d, n) = measure(stats, &obs, async {
        store.acquire(&lease, &me, ttl).await.expect("acquire");
        store.release(&lease, &me).await.expect("release");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 2)]), 2), "a lease cycle = two commands, two round trips");

    let owners: Vec<OwnerId> = (0..50).map(|i| OwnerId::from(format!("owner-{i}"))).collect();
    let (d, n) = measure(stats, &obs, async {
        store.peek_owners(&owners).await.expect("peek_owners");
    })
    .await;
    assert_eq!((d, n), (calls(&[("get", 50), ("pttl", 50)]), 1), "peek_owners of 50 owners = one pipeline");

    let (d, n) = measure(stats, &obs, async {
        store.peek_owners(&[]).await.expect("peek_owners empty");
        store.claim_batch("q", &[], &me, ttl).await.expect("claim empty");
        store.settle_batch("q", &[], &me, ttl).await.expect("settle empty");
    })
    .await;
    assert_eq!((d, n), (calls(&[]), 0), "empty batches make no call");

    let msgs: Vec<MessageId> = (0..32).map(|i| MessageId::from(format!("m{i}"))).collect();
    let (d, n) = measure(stats, &obs, async {
        store.claim_batch("q", &msgs, &me, ttl).await.expect("claim_batch");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "claim_batch of 32 = one EVALSHA");

    let settle = half_done(&msgs);
    let (d, n) = measure(stats, &obs, async {
        store.settle_batch("q", &settle, &me, ttl).await.expect("settle_batch");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "settle_batch of 32 = one EVALSHA");

    // The tick's call per batch: the 32 claims of the next batch taken with the
    // settlement of the last one, in one script.
    let next: Vec<MessageId> = (32..64).map(|i| MessageId::from(format!("m{i}"))).collect();
    let pending: Vec<Settlement> =
        next.iter().map(|id| Settlement { id: id.clone(), action: SettleAction::Done }).collect();
    let ttls = ClaimTtls { pending: ttl, done: ttl };
    store.claim_batch("q", &next, &me, ttl).await.expect("claim_batch");
    let later: Vec<MessageId> = (64..96).map(|i| MessageId::from(format!("m{i}"))).collect();
    let (d, n) = measure(stats, &obs, async {
        let got = store.settle_then_claim("q", &pending, &later, &me, ttls).await;
        assert_eq!(got.settled.expect("settled"), vec![SettleResult::Settled; 32]);
        assert_eq!(got.claimed.expect("claimed"), vec![ClaimState::Claimed; 32]);
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "settle_then_claim of 32 + 32 = one EVALSHA");
}

/// 16 tasks × 50 lease cycles on one store: exactly two `EVALSHA` per cycle and
/// nothing else — no connection checkout traffic under concurrency either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cycles_send_nothing_but_the_operations() {
    let redis = RedisServer::start();
    let store = connect(&redis.url()).await;
    let before = redis.command_calls().expect("stats");
    let tasks: Vec<_> = (0..16u64)
        .map(|t| {
            let store: RedisStore = store.clone();
            tokio::spawn(async move {
                let lease = LeaseName::queue(format!("q{t}"));
                let me = token("me", t);
                for _ in 0..50 {
                    store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire");
                    store.release(&lease, &me).await.expect("release");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let d = delta(&before, &redis.command_calls().expect("stats"));
    assert_eq!(d.get("incr"), Some(&(16 * 50)), "one fence per acquire");
    assert_eq!(d.get("pexpiretime"), Some(&(16 * 50)), "read from the server's clock");
    assert_eq!(
        sent_by_scripts(d),
        calls(&[("evalsha", 16 * 50 * 2)]),
        "no PING, UNWATCH or anything else on the hot path"
    );
}

/// On a 3-master cluster: one pipeline per hash slot for peeks, one script per slot
/// for claims, and still one `EVALSHA` per lease operation.
#[tokio::test]
async fn cluster_round_trips_are_per_slot() {
    let cluster = RedisCluster::start(3);
    let (store, obs) = observed(connect_cluster(&cluster.urls()).await);
    let stats = || cluster.command_calls().expect("INFO commandstats");
    let keys = store.keys().clone();
    let me = token("me", 1);
    let ttl = Duration::from_secs(30);

    let lease = LeaseName::queue("q");
    let (d, n) = measure(stats, &obs, async {
        store.acquire(&lease, &me, ttl).await.expect("acquire");
        store.release(&lease, &me).await.expect("release");
    })
    .await;
    assert_eq!(
        (sent_by_scripts(d), n),
        (calls(&[("evalsha", 2)]), 2),
        "a lease cycle = two EVALSHA on the slot's node"
    );

    // 12 owners: one pipeline per distinct slot, GET + PTTL per key.
    let owners: Vec<OwnerId> = (0..12).map(|i| OwnerId::from(format!("owner-{i}"))).collect();
    let claim_keys: Vec<String> = owners.iter().map(|o| keys.owner_claim(o.as_str())).collect();
    let slots = distinct_slots(&claim_keys);
    let (d, n) = measure(stats, &obs, async {
        store.peek_owners(&owners).await.expect("peek_owners");
    })
    .await;
    assert_eq!(d, calls(&[("get", 12), ("pttl", 12)]));
    assert_eq!(n, slots, "one round trip per hash slot");

    // A received batch: one queue, one slot, one script — even on a cluster.
    let msgs: Vec<MessageId> = (0..32).map(|i| MessageId::from(format!("m{i}"))).collect();
    let (d, n) = measure(stats, &obs, async {
        store.claim_batch("q", &msgs, &me, ttl).await.expect("claim_batch");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "claim_batch of one queue = one EVALSHA");

    // The peek of one lease: its lease and fence keys share a slot.
    let (d, n) = measure(stats, &obs, async {
        store.peek(&lease).await.expect("peek");
    })
    .await;
    assert_eq!((d, n), (calls(&[("get", 2), ("pttl", 1)]), 1), "peek = one pipeline on the slot's node");
}

fn distinct_slots(keys: &[String]) -> usize {
    let mut slots: Vec<u16> = keys.iter().map(|k| slot(k)).collect();
    slots.sort_unstable();
    slots.dedup();
    slots.len()
}

#[test]
fn slot_matches_redis() {
    // Values from `CLUSTER KEYSLOT`.
    assert_eq!(slot("{a}x"), 15495);
    assert_eq!(slot("foo"), 12182);
    assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
}

#[tokio::test]
async fn a_fenced_write_and_an_admit_cost_one_round_trip_each() {
    use adapter_redis::FencedWrite;
    use drain_core::ports::{Fence, FenceMarks};

    let redis = RedisServer::start();
    let (store, obs) = observed(connect(&redis.url()).await);
    let stats = || redis.command_calls().expect("INFO commandstats");
    let fence = Fence::new(LeaseName::job("j"), 3);
    let fields: &[(&[u8], &[u8])] = &[(b"a", b"1"), (b"b", b"2")];
    for (what, write) in [
        ("SET", FencedWrite::Set { value: b"v", ttl: None }),
        ("SET PX", FencedWrite::Set { value: b"v", ttl: Some(Duration::from_secs(9)) }),
        ("HSET", FencedWrite::HSet { fields }),
        ("DEL", FencedWrite::Del),
    ] {
        let key = if what == "HSET" { "h" } else { "k" };
        let (d, n) = measure(stats, &obs, async {
            store.fenced_write(key, &fence, write).await.expect("fenced write");
        })
        .await;
        assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "a fenced {what} = one EVALSHA");
    }
    let (d, n) = measure(stats, &obs, async {
        store.admit("k", 2).await.expect("admit");
    })
    .await;
    assert_eq!((sent_by_scripts(d), n), (calls(&[("evalsha", 1)]), 1), "a stale admit = one EVALSHA");
    let (d, n) = measure(stats, &obs, async {
        store.admit("k", 4).await.expect("admit");
    })
    .await;
    assert_eq!((d, n), (calls(&[("evalsha", 1), ("get", 1), ("set", 1)]), 1), "an admit that raises the mark");
}

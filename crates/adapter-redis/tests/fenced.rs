//! Fenced writes on real servers: a key written only while the writer's fence is not
//! below the key's mark (`RedisStore::fenced_write`), on a standalone server, a
//! 3-master Cluster and under the minimal ACL of docs/operations.md.

mod support;

use std::time::Duration;

use adapter_redis::FencedWrite;
use drain_core::ErrorKind;
use drain_core::ports::{Fence, FenceMarks, FenceVerdict, LeaseName};
use futures::future::join_all;
use test_servers::{RedisCluster, RedisServer, Reply};

use support::{config, connect, connect_cluster};

fn fence(n: u64) -> Fence {
    Fence::new(LeaseName::job("nightly"), n)
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}

fn set(value: &[u8]) -> FencedWrite<'_> {
    FencedWrite::Set { value, ttl: None }
}

#[tokio::test]
async fn a_key_is_written_only_while_the_fence_is_not_below_its_mark() {
    let redis = RedisServer::start();
    let store = connect(&redis.url()).await;
    let get = |key: &str| redis.command(&["GET", key]).expect("GET");

    // Holder 5 writes twice, holder 7 takes over, the paused holder 5 comes back.
    assert_eq!(store.fenced_write("report", &fence(5), set(b"a")).await.expect("write"), FenceVerdict::Accepted);
    assert_eq!(store.fenced_write("report", &fence(5), set(b"b")).await.expect("write"), FenceVerdict::Accepted);
    assert_eq!(store.fenced_write("report", &fence(7), set(b"c")).await.expect("write"), FenceVerdict::Accepted);
    let late = store.fenced_write("report", &fence(5), set(b"stale")).await.expect("write");
    assert_eq!(late, FenceVerdict::Stale { mark: 7 });
    assert_eq!(get("report"), bulk("c"), "the stale write changed nothing");
    assert_eq!(redis.command(&["GET", "drain:mark:{report}:report"]).expect("GET"), bulk("7"));
    // The resource's mark is the port's too.
    assert_eq!(store.admit("report", 6).await.expect("admit"), FenceVerdict::Stale { mark: 7 });

    // SET with PX, HSET of several fields, DEL.
    let ttl = Some(Duration::from_secs(60));
    let v = store.fenced_write("report", &fence(8), FencedWrite::Set { value: b"d", ttl }).await.expect("set px");
    assert_eq!(v, FenceVerdict::Accepted);
    assert!(matches!(redis.command(&["PTTL", "report"]).expect("PTTL"), Reply::Int(ms) if ms > 50_000));
    let fields: &[(&[u8], &[u8])] = &[(b"state", b"shipped"), (b"by", b"w3")];
    let v = store.fenced_write("order:{9}", &fence(8), FencedWrite::HSet { fields }).await.expect("hset");
    assert_eq!(v, FenceVerdict::Accepted);
    assert_eq!(redis.command(&["HGET", "order:{9}", "by"]).expect("HGET"), bulk("w3"));
    let stale: &[(&[u8], &[u8])] = &[(b"state", b"lost")];
    let v = store.fenced_write("order:{9}", &fence(3), FencedWrite::HSet { fields: stale }).await.expect("hset");
    assert_eq!(v, FenceVerdict::Stale { mark: 8 });
    assert_eq!(redis.command(&["HGET", "order:{9}", "state"]).expect("HGET"), bulk("shipped"));
    assert_eq!(
        store.fenced_write("report", &fence(2), FencedWrite::Del).await.expect("del"),
        FenceVerdict::Stale { mark: 8 }
    );
    assert_eq!(get("report"), bulk("d"));
    assert_eq!(store.fenced_write("report", &fence(9), FencedWrite::Del).await.expect("del"), FenceVerdict::Accepted);
    assert_eq!(get("report"), Reply::Bulk(None));
    // A key deleted under fence 9 keeps its mark.
    assert_eq!(
        store.fenced_write("report", &fence(8), set(b"e")).await.expect("write"),
        FenceVerdict::Stale { mark: 9 }
    );
    let e = store.fenced_write("k", &fence(1), FencedWrite::HSet { fields: &[] }).await.expect_err("no fields");
    assert_eq!(e.kind, ErrorKind::Config);
}

#[tokio::test]
async fn a_key_or_mark_of_another_type_writes_nothing_and_raises_nothing() {
    let redis = RedisServer::start();
    let store = connect(&redis.url()).await;
    redis.command(&["RPUSH", "list", "x"]).expect("RPUSH");
    let e = store.fenced_write("list", &fence(4), set(b"v")).await;
    // SET overwrites any type; HSET on a list is refused before the mark moves.
    assert_eq!(e.expect("set overwrites"), FenceVerdict::Accepted);
    redis.command(&["RPUSH", "list2", "x"]).expect("RPUSH");
    let fields: &[(&[u8], &[u8])] = &[(b"f", b"v")];
    let e = store.fenced_write("list2", &fence(4), FencedWrite::HSet { fields }).await.expect_err("WRONGTYPE");
    assert_eq!(e.kind, ErrorKind::WrongType, "{e}");
    assert_eq!(redis.command(&["EXISTS", "drain:mark:{list2}:list2"]).expect("EXISTS"), Reply::Int(0));
    for foreign in ["07", "x", "-1", "123456789012345678901"] {
        redis.command(&["SET", "drain:mark:{odd}:odd", foreign]).expect("SET");
        let e = store.fenced_write("odd", &fence(4), set(b"v")).await.expect_err("not a mark");
        assert_eq!(e.kind, ErrorKind::WrongType, "{foreign}: {e}");
        assert_eq!(redis.command(&["EXISTS", "odd"]).expect("EXISTS"), Reply::Int(0), "{foreign}");
    }
}

/// Many holders write one key at once, each with its own fence: the key ends with
/// the largest fence's value, and no write below an accepted one landed after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_leave_the_largest_fence_s_value() {
    let redis = RedisServer::start();
    let store = connect(&redis.url()).await;
    for round in 0..20u64 {
        let key = format!("race-{round}");
        let fences: Vec<u64> = (1..=16).map(|i| (i * 7 + round) % 16 + 1).collect();
        let values: Vec<String> = fences.iter().map(u64::to_string).collect();
        let writes = fences.iter().zip(&values).map(|(&f, v)| {
            let (store, key) = (store.clone(), key.clone());
            async move { store.fenced_write(&key, &fence(f), set(v.as_bytes())).await }
        });
        for v in join_all(writes).await {
            v.expect("write");
        }
        assert_eq!(redis.command(&["GET", &key]).expect("GET"), bulk("16"), "round {round}");
    }
}

/// On a Cluster the mark lives in the key's slot whatever the key looks like: a hash
/// tag of its own, none, an unclosed or empty brace, a `}` that keeps it from having
/// one, the empty key. No node answers `CROSSSLOT`, and the keys land on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_key_keeps_its_mark_in_its_own_slot() {
    let cluster = RedisCluster::start(3);
    let store = connect_cluster(&cluster.urls()).await;
    let mut keys: Vec<String> =
        ["orders:{42}", "orders:42", "a{b", "{}x", "a}b", "}", "a{}b{c}", "", "x{y}z", "é{"].map(String::from).to_vec();
    keys.extend((0..30).map(|i| format!("plain-{i}")));
    for key in &keys {
        let v = store.fenced_write(key, &fence(3), set(b"v")).await.unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(v, FenceVerdict::Accepted, "{key:?}");
        let v = store.fenced_write(key, &fence(2), set(b"stale")).await.expect("write");
        assert_eq!(v, FenceVerdict::Stale { mark: 3 }, "{key:?}");
        assert_eq!(store.admit(key, 3).await.expect("admit"), FenceVerdict::Accepted, "{key:?}");
    }
    let mut served = 0;
    for node in cluster.nodes() {
        let errors = node.info("errorstats").expect("INFO errorstats");
        assert!(errors.iter().all(|(k, _)| k != "errorstat_CROSSSLOT"), "node {}: {errors:?}", node.port());
        served += usize::from(node.command_calls().expect("commandstats").get("evalsha").copied().unwrap_or(0) > 0);
    }
    assert_eq!(served, cluster.nodes().len(), "the keys were spread over every node");
    let braced = adapter_redis::RedisStore::connect(config(&cluster.urls().join(",")).cluster(true).key_prefix("a{b}"))
        .await
        .expect("connect");
    let e = braced.fenced_write("k", &fence(1), set(b"v")).await.expect_err("a braced prefix");
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
}

/// The rights docs/operations.md lists for fenced writes: the scripts, `GET` and
/// `SET` on the marks under the prefix, the write's own command on the embedder's keys.
#[tokio::test]
async fn fenced_writes_run_under_the_documented_acl() {
    let redis = RedisServer::start();
    let rights = ["+evalsha", "+eval", "+script|load", "+get", "+set", "+hset", "+del"];
    redis.acl_user("writer", "writer-pass-1", &["drain:*", "orders:*"], &[], &rights).expect("acl");
    let url = format!("redis://writer:writer-pass-1@127.0.0.1:{}", redis.port());
    let store = connect(&url).await;
    let fields: &[(&[u8], &[u8])] = &[(b"state", b"new")];
    for write in [set(b"v"), FencedWrite::HSet { fields }, FencedWrite::Del] {
        let key = if matches!(write, FencedWrite::HSet { .. }) { "orders:{1}:h" } else { "orders:{1}" };
        assert_eq!(store.fenced_write(key, &fence(1), write).await.expect("write"), FenceVerdict::Accepted);
    }
    assert_eq!(store.admit("orders", 1).await.expect("admit"), FenceVerdict::Accepted);
    // A key outside the user's patterns is refused, the mark untouched.
    let e = store.fenced_write("elsewhere", &fence(2), set(b"v")).await.expect_err("NOPERM");
    assert_eq!(e.kind, ErrorKind::Permission, "{e}");
    assert_eq!(redis.command(&["EXISTS", "drain:mark:{elsewhere}:elsewhere"]).expect("EXISTS"), Reply::Int(0));
}

/// A lease moved to a fresh store (docs/reliability.md, "Fences across a failover"):
/// its fences start at the new server's clock, above the old store's, so the
/// resource's mark accepts the next holder with no seed; a counter seeded above the
/// clock (an old store that counted from elsewhere) is still counted on from.
#[tokio::test]
async fn a_lease_moved_to_a_fresh_store_writes_on() {
    use drain_core::ports::{Acquire, LeaseStore};

    let old = RedisServer::start();
    let new = RedisServer::start();
    let (old_store, new_store) = (connect(&old.url()).await, connect(&new.url()).await);
    let job = LeaseName::job("nightly");
    let acquire = async |store: &adapter_redis::RedisStore, seed: u64| {
        let token = support::token("me", seed);
        match store.acquire(&job, &token, Duration::from_secs(30)).await.expect("acquire") {
            Acquire::Acquired { fence } => {
                store.release(&job, &token).await.expect("release");
                Fence::new(job.clone(), fence)
            }
            held => panic!("{held:?}"),
        }
    };
    // The resource's marks live in the old store (the marks do not move).
    let mut last = 0;
    for seed in 0..5 {
        let f = acquire(&old_store, seed).await;
        assert!(f.number() > last, "{} after {last}", f.number());
        last = f.number();
        assert_eq!(old_store.fenced_write("report", &f, set(b"old")).await.expect("write"), FenceVerdict::Accepted);
    }
    // A move takes longer than a millisecond, the clock floor's unit on Redis.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let moved = acquire(&new_store, 9).await;
    assert!(moved.number() > last, "{} above the old store's {last}", moved.number());
    assert_eq!(old_store.fenced_write("report", &moved, set(b"new")).await.expect("write"), FenceVerdict::Accepted);
    // A counter ahead of the clock: the next acquire counts on from it.
    assert_eq!(
        new.command(&["SET", "drain:job-fence:{nightly}", "4000000000000000"]).expect("SET"),
        Reply::Simple("OK".into())
    );
    assert_eq!(acquire(&new_store, 10).await.number(), 4_000_000_000_000_001);
}

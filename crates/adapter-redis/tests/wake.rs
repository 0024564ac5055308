//! The release wake-up on a private redis-server, beyond the shared contract: waiters
//! register in the round trip that found the claim held, a release notifies exactly one of them in
//! its own round trip, and the subscriber survives a killed connection. Also on a
//! 3-master Cluster.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use adapter_redis::RedisStore;
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, LeaseName, LeaseStore, OwnerClaim, OwnerClaims, Release, ReleaseWake, Releases, Waiter,
};
use drain_core::testkit::RecordingObserver;
use futures::StreamExt;
use test_servers::{RedisCluster, RedisServer, Reply};

use support::{calls, config, connect, connect_prefixed, delta, observed, round_trips, slot, token};

/// Commands the scripts run inside Redis (no round trip of their own).
const INSIDE: &[&str] =
    &["get", "set", "incr", "pexpiretime", "del", "pttl", "pexpire", "lrem", "rpush", "lpop", "publish"];

fn sent(d: BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    d.into_iter().filter(|(k, _)| !INSIDE.contains(&k.as_str())).collect()
}

fn waiter(instance: &str) -> Waiter {
    Waiter { instance: instance.to_owned(), ttl: Duration::from_secs(30) }
}

fn owner(name: &str) -> OwnerId {
    OwnerId::from(name)
}

fn held_by(c: &OwnerClaim) -> Option<&str> {
    match c {
        OwnerClaim::Busy { holder, .. } => Some(holder),
        OwnerClaim::Free => None,
    }
}

/// The next release heard within `within`, if any.
async fn heard(releases: &mut Releases, within: Duration) -> Option<OwnerId> {
    tokio::time::timeout(within, releases.next()).await.ok().flatten()
}

fn list(server: &RedisServer, key: &str) -> Vec<String> {
    match server.command(&["LRANGE", key, "0", "-1"]).expect("LRANGE") {
        Reply::Array(Some(items)) => items
            .into_iter()
            .map(|r| match r {
                Reply::Bulk(Some(b)) => String::from_utf8(b).expect("utf-8"),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// One measured call: (commands the client sent, store round trips).
async fn measure<T>(
    stats: impl Fn() -> BTreeMap<String, u64>,
    obs: &RecordingObserver,
    op: impl Future<Output = T>,
) -> (T, BTreeMap<String, u64>, usize) {
    obs.clear();
    let before = stats();
    let out = op.await;
    let d = delta(&before, &stats());
    (out, sent(d), round_trips(obs))
}

#[tokio::test]
async fn a_release_wakes_exactly_one_registered_waiter_in_one_round_trip() {
    let redis = RedisServer::start();
    let (store, obs) = observed(connect_prefixed(&redis.url(), "wk").await);
    let keys = store.keys().clone();
    let stats = || redis.command_calls().expect("INFO commandstats");
    let (b, c) = (waiter("b"), waiter("c"));
    let mut b_hears = store.subscribe(&b.instance).await.expect("subscribe b");
    let mut c_hears = store.subscribe(&c.instance).await.expect("subscribe c");
    let o = owner("o{1}");
    let waiters = keys.owner_waiters("o{1}");
    let (b_channel, c_channel) = (keys.wake_channel("b"), keys.wake_channel("c"));
    let (holder, other) = (token("a", 1), token("c", 2));
    let ttl = Duration::from_secs(30);

    let got = store.acquire_or_wait(&o, &holder, ttl, &waiter("a")).await.expect("acquire");
    let Acquire::Acquired { fence: first } = got else { panic!("{got:?}") };

    // b peeks the held claim (twice: registered once), c loses the acquire race.
    for _ in 0..2 {
        let (held, d, n) = measure(stats, &obs, store.peek_and_wait(std::slice::from_ref(&o), &b)).await;
        let held = held.expect("peek_and_wait");
        assert_eq!(held_by(&held[0]), Some("a"));
        assert_eq!((d, n), (calls(&[("evalsha", 1)]), 1), "a registering peek = one EVALSHA");
    }
    let (got, d, n) = measure(stats, &obs, store.acquire_or_wait(&o, &other, ttl, &c)).await;
    assert!(matches!(got.expect("acquire"), Acquire::Busy { .. }));
    assert_eq!((d, n), (calls(&[("evalsha", 1)]), 1), "a registering acquire = one EVALSHA");
    assert_eq!(list(&redis, &waiters), [b_channel.clone(), c_channel.clone()], "each once, oldest first");
    let pttl = redis.command(&["PTTL", &waiters]).expect("PTTL");
    assert!(
        matches!(pttl, Reply::Int(ms) if ms > 29_000 && ms <= 30_000),
        "expires with the registration TTL: {pttl:?}"
    );

    // Not ours: nobody is woken.
    let woke = store.release_and_wake(&o, &other, true).await.expect("release");
    assert_eq!((woke.release, woke.woke), (Release::NotOwner, false));
    assert_eq!(list(&redis, &waiters).len(), 2);

    let (woke, d, n) = measure(stats, &obs, store.release_and_wake(&o, &holder, true)).await;
    let woke = woke.expect("release");
    assert_eq!((woke.release, woke.woke), (Release::Released, true));
    assert_eq!((d, n), (calls(&[("evalsha", 1)]), 1), "a waking release = one EVALSHA");
    assert_eq!(heard(&mut b_hears, Duration::from_secs(5)).await, Some(o.clone()), "the oldest waiter");
    assert_eq!(heard(&mut c_hears, Duration::from_millis(300)).await, None, "exactly one waiter, no herd");
    assert_eq!(list(&redis, &waiters), std::slice::from_ref(&c_channel));

    // c wins the claim now: it leaves the list; its release finds nobody to wake.
    let got = store.acquire_or_wait(&o, &other, ttl, &c).await.expect("acquire");
    assert!(matches!(got, Acquire::Acquired { fence } if fence > first), "{got:?}");
    assert!(list(&redis, &waiters).is_empty(), "a winner is no longer a waiter");
    let woke = store.release_and_wake(&o, &other, true).await.expect("release");
    assert_eq!((woke.release, woke.woke), (Release::Released, false));

    // A continuing holder (wake = false) leaves the waiters registered.
    store.acquire_or_wait(&o, &holder, ttl, &waiter("a")).await.expect("acquire");
    store.peek_and_wait(std::slice::from_ref(&o), &c).await.expect("peek");
    let woke = store.release_and_wake(&o, &holder, false).await.expect("release");
    assert_eq!((woke.release, woke.woke), (Release::Released, false));
    assert_eq!(list(&redis, &waiters), std::slice::from_ref(&c_channel));
    assert_eq!(heard(&mut c_hears, Duration::from_millis(200)).await, None);

    // A dead waiter (nobody subscribed to its channel) is skipped for the next one.
    store.acquire_or_wait(&o, &holder, ttl, &waiter("a")).await.expect("acquire");
    redis.command(&["LPUSH", &waiters, "wk:wake:gone"]).expect("LPUSH");
    let woke = store.release_and_wake(&o, &holder, true).await.expect("release");
    assert!(woke.woke);
    assert_eq!(heard(&mut c_hears, Duration::from_secs(5)).await, Some(o.clone()));
    assert!(list(&redis, &waiters).is_empty());
    assert_eq!(store.release_counters().received(), 2, "b once, c once");
}

/// A registering acquire whose fence key is not a counter answers `WrongType` and
/// leaves neither a claim without a fence nor a registration behind.
#[tokio::test]
async fn a_registering_acquire_with_a_broken_fence_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let store = connect_prefixed(&redis.url(), "wf").await;
    let keys = store.keys().clone();
    let o = owner("o{2}");
    let claim = keys.lease(&LeaseName::owner(o.as_str()));
    let waiters = keys.owner_waiters(o.as_str());
    redis.command(&["SET", &claim.fence, "not-a-number"]).expect("SET");

    let e = store.acquire_or_wait(&o, &token("a", 1), Duration::from_secs(30), &waiter("a")).await;
    let e = e.expect_err("a fence that is not a counter");
    assert_eq!(e.kind, drain_core::ErrorKind::WrongType, "{e}");
    assert!(e.message.contains(&claim.fence), "names the fence key: {e}");
    assert_eq!(redis.command(&["EXISTS", &claim.lease]).expect("EXISTS"), Reply::Int(0), "no claim left behind");
    assert!(list(&redis, &waiters).is_empty(), "not registered");
}

#[tokio::test]
async fn a_registering_peek_of_many_owners_is_one_round_trip_and_answers_as_peek_owners() {
    let redis = RedisServer::start();
    let (store, obs) = observed(connect_prefixed(&redis.url(), "wk").await);
    let keys = store.keys().clone();
    let stats = || redis.command_calls().expect("INFO commandstats");
    let me = waiter("me");
    let holder = token("h", 1);
    let owners: Vec<OwnerId> = (0..50).map(|i| owner(&format!("owner-{i}"))).collect();
    for o in owners.iter().step_by(2) {
        store.acquire(&LeaseName::owner(o.as_str()), &holder, Duration::from_secs(30)).await.expect("acquire");
    }
    let (got, d, n) = measure(stats, &obs, store.peek_and_wait(&owners, &me)).await;
    assert_eq!((d, n), (calls(&[("evalsha", 1)]), 1), "50 owners = one EVALSHA");
    let plain = store.peek_owners(&owners).await.expect("peek_owners");
    let got = got.expect("peek_and_wait");
    let holders =
        |v: &[OwnerClaim]| -> Vec<Option<String>> { v.iter().map(|c| held_by(c).map(str::to_owned)).collect() };
    assert_eq!(holders(&got), holders(&plain));
    for (i, o) in owners.iter().enumerate() {
        let expected = if i % 2 == 0 { vec![keys.wake_channel("me")] } else { vec![] };
        assert_eq!(list(&redis, &keys.owner_waiters(o.as_str())), expected, "{o}: registered only where held");
    }
    assert!(store.peek_and_wait(&[], &me).await.expect("empty").is_empty());
}

#[tokio::test]
async fn the_subscriber_resubscribes_after_its_connection_is_killed() {
    let redis = RedisServer::start();
    let store: RedisStore = connect_prefixed(&redis.url(), "wk").await;
    let channel = store.keys().wake_channel("me");
    let mut hears = store.subscribe("me").await.expect("subscribe");
    assert_eq!(redis.command(&["CLIENT", "KILL", "TYPE", "pubsub"]).expect("kill"), Reply::Int(1));
    // Published until someone is subscribed again (messages before that are lost:
    // the backstop timer covers them).
    let mut back = false;
    for _ in 0..100 {
        if redis.command(&["PUBLISH", &channel, "o"]).expect("PUBLISH") == Reply::Int(1) {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(back, "resubscribed within 5 s");
    assert_eq!(heard(&mut hears, Duration::from_secs(5)).await, Some(OwnerId::from("o")));
    assert!(store.release_counters().reconnects() >= 1);
}

#[tokio::test]
async fn on_a_cluster_waiters_and_wakes_work_across_nodes() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::connect(config(&cluster.urls().join(",")).cluster(true).key_prefix("wk"))
        .await
        .expect("connect to the private cluster");
    let keys = store.keys().clone();
    let (store, obs) = observed(store);
    let stats = || cluster.command_calls().expect("INFO commandstats");
    let me = waiter("me");
    let mut hears = store.subscribe(&me.instance).await.expect("subscribe");
    let holder = token("h", 1);
    let owners: Vec<OwnerId> = (0..12).map(|i| owner(&format!("owner-{i}"))).collect();
    for o in &owners {
        store.acquire(&LeaseName::owner(o.as_str()), &holder, Duration::from_secs(30)).await.expect("acquire");
    }
    let mut slots: Vec<u16> = owners.iter().map(|o| slot(&keys.owner_claim(o.as_str()))).collect();
    slots.sort_unstable();
    slots.dedup();
    let (got, d, n) = measure(stats, &obs, store.peek_and_wait(&owners, &me)).await;
    assert!(got.expect("peek_and_wait").iter().all(|c| held_by(c).is_some()));
    assert_eq!((d, n), (calls(&[("evalsha", slots.len() as u64)]), slots.len()), "one EVALSHA per hash slot");
    // Every owner's release reaches the subscriber, whichever node holds its slot.
    for o in &owners {
        let (woke, d, n) = measure(stats, &obs, store.release_and_wake(o, &holder, true)).await;
        assert!(woke.expect("release").woke, "{o}");
        assert_eq!((d, n), (calls(&[("evalsha", 1)]), 1), "{o}: one EVALSHA");
        assert_eq!(heard(&mut hears, Duration::from_secs(5)).await, Some(o.clone()), "{o}");
    }
}

/// The wake-up's rights on top of the minimal lease ACL (docs/operations.md): with
/// them nothing is missing; without one, `missing_wake_rights` names it, and without
/// the channel pattern it names the channel.
#[tokio::test]
async fn missing_wake_rights_names_each_command_and_the_channel() {
    let redis = RedisServer::start();
    let wake = ["+rpush", "+lrem", "+lpop", "+publish", "+subscribe"];
    let set_user = |user: &str, channels: &[&str], rights: &[&str]| {
        let rights = [adapter_redis::rights::LEASES_AND_CLAIMS, rights].concat();
        redis.acl_user(user, "wake-pass-1", &["wk:*"], channels, &rights).expect("acl");
    };
    let keys = adapter_redis::KeySpace::new("wk");
    let (list, channel) = (keys.owner_waiters("probe"), keys.wake_channel("probe"));
    let check = |user: &'static str| {
        let url = format!("redis://{user}:wake-pass-1@127.0.0.1:{}", redis.port());
        let (list, channel) = (list.clone(), channel.clone());
        async move { connect(&url).await.missing_wake_rights(&list, &channel).await.expect("probe") }
    };
    set_user("all", &["wk:wake:*"], &wake);
    assert!(check("all").await.is_empty());
    assert_eq!(redis.command(&["EXISTS", &list]).expect("EXISTS"), Reply::Int(0), "the probe list is removed");
    for (user, right) in
        [("norpush", "+rpush"), ("nolpop", "+lpop"), ("nopublish", "+publish"), ("nosub", "+subscribe")]
    {
        let others: Vec<&str> = wake.iter().copied().filter(|r| *r != right).collect();
        set_user(user, &["wk:wake:*"], &others);
        assert_eq!(check(user).await, [right.to_owned()], "{user}");
    }
    set_user("nochannel", &[], &wake);
    assert_eq!(check("nochannel").await, [format!("&{channel}")]);
}

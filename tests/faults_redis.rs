//! Faults on private redis-servers at the tick level.
//!
//! Each test drives drain-core's `run_tick` with a real `RedisStore` (leases and
//! claims) on its own `redis-server`, an in-memory queue (`MemorySource`), a target
//! that records what it accepted, a real-time clock on Tokio and a recording
//! observer, then breaks Redis at a chosen moment: killed before or during an
//! acquire, a claim or a release, killed mid-drain, frozen past the lease TTL,
//! restarted empty, `SCRIPT FLUSH`, `CLIENT KILL`, replies slowed past the client's
//! response timeout. Each test asserts what docs/reliability.md promises:
//!
//! * the lease fails **open** (`"lease":"fail_open"`, the drain runs);
//! * the claim fails **closed** (no submit without a claim; the messages go back to
//!   the queue) and a wholly abandoned batch ends the tick instead of spinning;
//! * nothing panics, every tick ends within a bound;
//! * the *same* store object recovers once Redis answers again: later ticks submit
//!   every message, and each exactly once overall;
//! * the observer's counters say what happened.
//!
//! Adapter-level faults (error kinds, one failed call per cut connection, auth) are
//! in `crates/adapter-redis/tests/failures.rs`; this file builds on them.

mod faults;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use adapter_redis::keys::{KeyKind, encode_name, hash_tag};
use adapter_redis::{RedisConfig, RedisStore};
use drain_core::LeaseToken;
use drain_core::admission::OwnerId;
use drain_core::event::{Event, LeaseOp, MessageOutcome};
use drain_core::guard::{LeaseStatus, Loss};
use drain_core::ports::{
    Acquire, ClaimState, ClaimStore, Holding, LeaseName, LeaseStore, MessageId, OwnerClaim, OwnerClaims, Release,
};
use drain_core::testkit::TestRng;
use test_servers::{RedisCluster, RedisServer, Reply};

use faults::redis::{REDIS_TIMEOUT, World};
use faults::scenarios::Slowed;
use faults::{lock, scenarios, stats};

// ---------------------------------------------------------------------------------
// Redis killed
// ---------------------------------------------------------------------------------

/// Redis dead before the tick: the acquire fails, the tick drains anyway (fail open),
/// every claim fails so nothing is submitted (fail closed), the first wholly abandoned
/// batch ends the tick, and once Redis is back the same store serves the next ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_dead_before_the_tick_fails_open_on_the_lease_and_closed_on_claims() {
    let w = World::patient(12, Duration::ZERO).await;
    scenarios::dead_before_the_tick(w).await;
}

/// The acquire is on the wire when Redis is SIGKILLed: a typed error, fail open,
/// claims fail closed, recovery on the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_while_the_acquire_is_in_flight_fails_open() {
    let w = World::new(&[], 8, Duration::ZERO).await;
    scenarios::killed_while_the_acquire_is_in_flight(w).await;
}

/// Killed from inside a slow submit, after the batch's claims were taken: the
/// claimed messages of that batch are still submitted (they hold their claims);
/// settling their claims fails, and a claim store that failed ends the receiving, so
/// nothing more is received (before, the next batch was received only to be
/// abandoned); the release fails and is counted; after a restart everything else
/// goes through once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_drain_submits_only_what_was_claimed() {
    let w = World::new(&[], 15, Duration::from_millis(20)).await;
    scenarios::killed_mid_drain(w).await;
}

/// Killed while the second batch's claim call is in flight: that batch fails closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_while_a_claim_is_in_flight_fails_closed() {
    let w = World::new(&[], 15, Duration::ZERO).await;
    scenarios::killed_while_a_claim_is_in_flight(w).await;
}

/// Killed while the release is in flight, on a server with an append-only file: the
/// release fails and is counted; after the restart the lease is still there, holding
/// our token, until its TTL frees it (ticks meanwhile are skipped); the fence
/// survived, and redeliveries of the submitted messages are recognised as duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_while_the_release_is_in_flight_leaves_the_lease_to_its_ttl() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let w = World::new(&aof, 10, Duration::ZERO).await;
    scenarios::killed_while_the_release_is_in_flight(w).await;
}

// ---------------------------------------------------------------------------------
// Redis frozen, restarted, flushed, cut off, slowed
// ---------------------------------------------------------------------------------

/// SIGSTOP mid-drain for twice the lease TTL: renewals fail (counted, not a loss)
/// while it is frozen; once it thaws the lease has expired, so the next renewal
/// reports `Lost` and the drain is cancelled (the rest is abandoned with its claims
/// released) and the release is `NotOwner`. A tick while it is frozen fails open and
/// submits nothing. The same store then drains everything exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_past_the_ttl_loses_the_lease_cancels_the_drain_and_fails_open_while_frozen() {
    let w = World::new(&[], 25, Duration::from_millis(120)).await;
    scenarios::frozen_past_the_ttl(w).await;
}

/// Redis restarted empty while a holder drains: every lease and claim is gone. The
/// renewal talks to the new server and reports `Lost`, the drain is cancelled, the
/// release is `NotOwner`. Fences restart at 1 on an empty server (a fence is only as
/// durable as Redis' data; see docs/reliability.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_empty_under_a_holder_loses_the_lease_and_cancels_the_drain() {
    let mut w = World::new(&[], 20, Duration::from_millis(100)).await;
    w.cfg.lease_ttl = Duration::from_millis(1500);
    w.cfg.batch = 20;
    let server = w.server.clone();
    w.target.on_call(3, move || lock(&server).restart());
    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    let lost = r.fence.expect("the lease's fence");
    assert!(r.lease_lost, "{r:?}");
    assert_eq!(w.lease_ops(LeaseOp::Renew, "lost"), 1);
    assert_eq!(w.count(|e| matches!(e, Event::LeaseLost { .. })), 1);
    assert_eq!(w.lease_ops(LeaseOp::Release, "not_owner"), 1);
    let (_, submitted, _, abandoned) = stats(&r);
    assert_eq!(submitted + abandoned, 20);
    assert!(abandoned >= 1 && w.messages(MessageOutcome::Cancelled) as u64 == abandoned, "{r:?}");

    let reports = w.drain_until_done(Duration::from_secs(10)).await;
    let fences: Vec<u64> = reports.iter().filter_map(|r| r.fence).collect();
    // The empty server lost the counter, not the clock.
    assert!(fences.first().is_some_and(|&f| f > lost), "fences go on above {lost} after the restart: {reports:?}");
    w.assert_exactly_once();
    w.assert_lease_works().await;
}

/// `SCRIPT FLUSH` three times during one drain: every later `EVALSHA` (renew, claim,
/// settle, release) answers `NOSCRIPT` and the same call falls back to `EVAL`. Not one
/// operation fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_costs_no_failed_operation() {
    let mut w = World::new(&[], 20, Duration::from_millis(50)).await;
    w.cfg.lease_ttl = Duration::from_millis(900);
    for call in [1, 6, 11] {
        let server = w.server.clone();
        w.target.on_call(call, move || {
            let reply = lock(&server).command(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
            assert_eq!(reply, Reply::Simple("OK".into()));
        });
    }
    let before = w.server().command_calls().expect("commandstats");
    let r = w.tick().await;
    let after = w.server().command_calls().expect("commandstats");
    assert_eq!(stats(&r), (20, 20, 0, 0), "{r:?}");
    assert!(!r.lease_lost);
    assert_eq!(w.lease_ops(LeaseOp::Release, "released"), 1);
    assert!(w.lease_ops(LeaseOp::Renew, "renewed") >= 2, "renewals ran across the flushes");
    let errors = w.count(|e| matches!(e, Event::LeaseOp { result: "error", .. }));
    assert_eq!((errors, w.messages(MessageOutcome::ClaimError)), (0, 0), "no operation failed");
    let evals = after.get("eval").copied().unwrap_or(0) - before.get("eval").copied().unwrap_or(0);
    assert!(evals >= 3, "each flush forced at least one EVAL fallback: {evals}");
    w.assert_exactly_once();
}

/// `CLIENT KILL TYPE normal` twice mid-drain cuts the store's connection: each cut
/// costs at most one failed call, the renewal keeps renewing on the new connection,
/// the lease is never lost, and every message goes through once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_mid_drain_costs_at_most_one_failed_call_per_cut() {
    let mut w = World::new(&[], 30, Duration::from_millis(100)).await;
    w.cfg.lease_ttl = Duration::from_millis(1500);
    let renewed_at_last_cut = Arc::new(AtomicUsize::new(usize::MAX));
    for call in [7, 19] {
        let (server, observer, mark) = (w.server.clone(), w.observer.clone(), renewed_at_last_cut.clone());
        w.target.on_call(call, move || {
            match lock(&server).command(&["CLIENT", "KILL", "TYPE", "normal"]).expect("CLIENT KILL") {
                Reply::Int(n) => assert!(n >= 1, "the store's connection was cut"),
                other => panic!("CLIENT KILL answered {other:?}"),
            }
            let renewed = observer.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Renew, result: "renewed", .. }));
            mark.store(renewed, Ordering::SeqCst);
        });
    }
    w.drain_until_done(Duration::from_secs(15)).await;
    w.assert_exactly_once();
    let failed_calls = w.count(|e| matches!(e, Event::LeaseOp { result: "error", .. }))
        + w.messages(MessageOutcome::ClaimError).div_ceil(5);
    assert!(failed_calls <= 2, "at most one failed call per cut, saw {failed_calls}");
    assert_eq!(w.count(|e| matches!(e, Event::LeaseLost { .. })), 0, "a cut connection is not a lost lease");
    let renewed = w.lease_ops(LeaseOp::Renew, "renewed");
    assert!(renewed > renewed_at_last_cut.load(Ordering::SeqCst), "renewal continued after the last cut");
    w.assert_lease_works().await;
}

/// `DEBUG SLEEP` makes Redis answer later than the client's 300 ms response timeout
/// (`scenarios::slower_than_the_timeout`): the settlement mid-drain, then the acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_slower_than_the_timeout_fail_open_and_closed_then_recover() {
    let mut w = World::new(&["--enable-debug-command", "yes"], 15, Duration::from_millis(50)).await;
    w.cfg.lease_ttl = Duration::from_secs(1);
    w.cfg.claim_pending_ttl = Duration::from_secs(1);
    let server = w.server.clone();
    let slow = move |slowed: Slowed| {
        let server = server.clone();
        let sleeping = std::thread::spawn(move || {
            let reply = lock(&server).command(&["DEBUG", "SLEEP", "1.2"]).expect("DEBUG SLEEP");
            assert_eq!(reply, Reply::Simple("OK".into()));
        });
        // Let DEBUG SLEEP start.
        std::thread::sleep(Duration::from_millis(if slowed == Slowed::Settlement { 50 } else { 100 }));
        sleeping
    };
    scenarios::slower_than_the_timeout(w, slow, |_, _| {}).await;
}

// ---------------------------------------------------------------------------------
// A stop-the-world pause against a second holder
// ---------------------------------------------------------------------------------

/// What the second holder saw.
struct SecondHolder {
    token: String,
    fence: u64,
    /// Its lease as read after the first holder's tick ended.
    held: Holding,
    released: Release,
}

/// The second holder, on its own OS thread, Tokio runtime and store: once the first
/// holder is frozen, poll `acquire` until the first lease expires, then hold the
/// lease (30 s TTL) until told the first holder's tick ended; read it back; release.
fn second_holder(url: String, lease: LeaseName, paused: mpsc::Receiver<()>, done: mpsc::Receiver<()>) -> SecondHolder {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let store = RedisStore::connect(RedisConfig::new(url).timeouts(REDIS_TIMEOUT, REDIS_TIMEOUT))
            .await
            .expect("the second holder connects");
        let me = LeaseToken::generate("second", &mut TestRng::new(999));
        paused.recv_timeout(Duration::from_secs(10)).expect("the first holder froze");
        let deadline = Instant::now() + Duration::from_secs(5);
        let fence = loop {
            match store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire") {
                Acquire::Acquired { fence } => break fence,
                Acquire::Busy { .. } => {
                    assert!(Instant::now() < deadline, "the frozen holder's lease never expired");
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while done.try_recv().is_err() {
            assert!(Instant::now() < deadline, "the first holder's tick never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let held = store.peek(&lease).await.expect("peek").expect("the second lease is still there");
        let released = store.release(&lease, &me).await.expect("release");
        SecondHolder { token: me.holder().to_owned(), fence, held, released }
    })
}

/// A holder frozen by a stop-the-world pause (its submit blocks its only runtime
/// thread for 2.5 s, longer than its 1 s TTL, so its renewal cannot run) while a
/// second holder takes the lease. When the first thaws, its deadline has passed with
/// no renewal confirmed: its drain is cancelled before another submit (the rest is
/// abandoned with its claims released), no renewal is even sent, its release is
/// `NotOwner`, and the second holder's lease is untouched (same token, TTL not
/// shortened) under a larger fence.
#[test]
fn a_holder_paused_past_its_ttl_loses_to_a_second_holder_whose_lease_survives() {
    let server = RedisServer::start();
    let url = server.url();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let mut w = rt.block_on(World::on(server, 10, Duration::from_millis(100)));
    w.cfg.lease_ttl = Duration::from_secs(1);
    w.cfg.batch = 10;
    w.cfg.claim_pending_ttl = Duration::from_secs(30);
    let (paused_tx, paused_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let lease = w.lease_key();
    let second = std::thread::spawn(move || second_holder(url, lease, paused_rx, done_rx));
    w.target.on_call(1, move || {
        let _ = paused_tx.send(());
        std::thread::sleep(Duration::from_millis(2500)); // stop the world
    });

    let r = rt.block_on(w.tick());
    let _ = done_tx.send(());
    let b = second.join().expect("the second holder");

    let fence = r.fence.expect("the first holder held the lease");
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    assert!(r.lease_lost, "{r:?}");
    assert_eq!(w.lease_ops(LeaseOp::Renew, "renewed"), 0, "the pause kept the renewal from running");
    assert_eq!(w.lease_ops(LeaseOp::Renew, "lost"), 0, "the deadline, not a renewal, found the loss");
    assert_eq!(w.count(|e| matches!(e, Event::LeaseLost { loss: Loss::Expired, .. })), 1);
    assert_eq!(w.lease_ops(LeaseOp::Release, "not_owner"), 1);
    let (received, submitted, _, abandoned) = stats(&r);
    assert_eq!((received, submitted, abandoned), (10, 1, 9), "no submit after the thaw: {r:?}");
    assert_eq!(w.messages(MessageOutcome::Cancelled) as u64, abandoned, "the drain was cancelled");

    assert!(b.fence > fence, "the second holder's fence {} is larger than {fence}", b.fence);
    assert_eq!(
        (&b.held.holder, b.held.fence),
        (&b.token, b.fence),
        "the stale release and renewal left the second lease alone"
    );
    assert!(b.held.remaining > Duration::from_secs(20), "its TTL untouched: {:?}", b.held);
    assert_eq!(b.released, Release::Released);

    rt.block_on(async {
        w.drain_until_done(Duration::from_secs(10)).await;
        w.assert_exactly_once();
        w.assert_lease_works().await;
    });
}

// ---------------------------------------------------------------------------------
// Hostile names
// ---------------------------------------------------------------------------------

fn keys_on(node: &RedisServer, pattern: &str) -> Vec<String> {
    match node.command(&["KEYS", pattern]).expect("KEYS") {
        Reply::Array(Some(items)) => items
            .into_iter()
            .map(|item| match item {
                Reply::Bulk(Some(bytes)) => String::from_utf8(bytes).expect("keys are ASCII"),
                other => panic!("KEYS item {other:?}"),
            })
            .collect(),
        other => panic!("KEYS answered {other:?}"),
    }
}

/// Queue, owner and message names with braces, colons, spaces, control characters,
/// `%`, non-ASCII, invalid UTF-8 (read lossily), the empty name and 10 KiB names go
/// through a real store on a 3-master Cluster: every acquire, claim and release works
/// (a broken hash tag would be `CROSSSLOT` there), distinct names never share a key
/// (every claim is `Claimed`, every fence starts at 1), and every key Redis holds
/// parses back to its name with the name's encoding as its hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_become_distinct_cluster_safe_keys() {
    let cluster = RedisCluster::start(3);
    let config = RedisConfig::new(cluster.urls().join(","))
        .cluster(true)
        .timeouts(Duration::from_secs(2), Duration::from_secs(2));
    let store = RedisStore::connect(config.key_prefix("hostile")).await.expect("connect to the cluster");
    let keys = store.keys().clone();
    let lossy = String::from_utf8_lossy(&[b'q', 0xff, 0xfe, b'{']).into_owned();
    let mut names: Vec<String> = [
        "plain",
        "{",
        "}",
        "{tag}",
        "}{",
        "a:b",
        "a b",
        "tab\tnew\nline",
        "nul\0",
        "del\x7f",
        "%",
        "%7B",
        "é",
        "",
        "a%3Ab",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    names.extend([lossy, "{".repeat(10 * 1024), "x".repeat(10 * 1024)]);
    let n = names.len();
    let me = LeaseToken::generate("hostile", &mut TestRng::new(7));
    let ttl = Duration::from_secs(60);

    for q in &names {
        let lease = LeaseName::queue(q.as_str());
        let got = store.acquire(&lease, &me, ttl).await.unwrap_or_else(|e| panic!("acquire {q:?}: {e}"));
        // Each name's keys are its own: counted on the nodes below.
        assert!(matches!(got, Acquire::Acquired { .. }), "queue {q:?}: {got:?}");
        let ids: Vec<MessageId> = names.iter().map(|id| MessageId::from(id.as_str())).collect();
        let states = store.claim_batch(q, &ids, &me, ttl).await.unwrap_or_else(|e| panic!("claims of {q:?}: {e}"));
        assert_eq!(states, vec![ClaimState::Claimed; n], "every message id of {q:?} has a claim of its own");
        assert_eq!(store.release(&lease, &me).await.expect("release"), Release::Released);
    }
    for o in &names {
        let claim = LeaseName::owner(o.as_str());
        let got = store.acquire(&claim, &me, ttl).await.expect("owner claim");
        assert!(matches!(got, Acquire::Acquired { .. }), "{o:?}: {got:?}");
        assert_eq!(store.release(&claim, &me).await.expect("release"), Release::Released);
    }
    let owners: Vec<OwnerId> = names.iter().map(|o| OwnerId::from(o.as_str())).collect();
    assert_eq!(store.peek_owners(&owners).await.expect("peeks"), vec![OwnerClaim::Free; n]);

    let found: Vec<String> = cluster.nodes().iter().flat_map(|node| keys_on(node, "hostile:*")).collect();
    assert_eq!(found.len(), n + n + n * n, "a fence per queue and owner, a claim per (queue, id): nothing collided");
    for key in &found {
        let kind = keys.parse(key).unwrap_or_else(|| panic!("{key:.80} parses back"));
        let (tag_name, names_in_key) = match &kind {
            KeyKind::Fence { queue } => (queue, vec![queue.clone()]),
            KeyKind::OwnerFence { owner } => (owner, vec![owner.clone()]),
            KeyKind::MessageClaim { queue, message_id: MessageId::String(id) } => {
                (queue, vec![queue.clone(), id.clone().into_bytes()])
            }
            other => panic!("unexpected key kind {other:?} for {key:.80}"),
        };
        assert_eq!(hash_tag(key), encode_name(tag_name), "the hash tag of {key:.80} is its name's encoding");
        for name in names_in_key {
            let name = String::from_utf8(name).expect("UTF-8");
            assert!(names.contains(&name), "{key:.80} decodes to one of the names");
        }
    }
}

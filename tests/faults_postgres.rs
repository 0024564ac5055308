//! Faults on private PostgreSQL servers at the tick level.
//!
//! Each test drives drain-core's `run_tick` with a real `PostgresStore` (leases and
//! claims, four connections) on its own PostgreSQL, an in-memory queue
//! (`MemorySource`), a target that records what it accepted, a real-time clock on
//! Tokio and a recording observer (the harness in `faults/`, shared with
//! `faults_redis.rs`), then breaks the server at a chosen moment: killed before the
//! tick, while an acquire, a claim or a release is in flight, killed mid-drain,
//! frozen (SIGSTOP) past the lease TTL, restarted under a holder, its backends ended
//! by `pg_terminate_backend`, calls held past the role's `statement_timeout` by a
//! test transaction's lock. Each test asserts what docs/reliability.md promises:
//!
//! * the lease fails **open** (the drain runs) and the claim fails **closed** (no
//!   submit without a claim; the messages go back to the queue);
//! * nothing panics, every tick ends within a bound;
//! * the *same* store object recovers once the server answers again: later ticks
//!   submit every message, and each exactly once overall;
//! * leases, fences and claims are rows: they survive a restart, and the fence after
//!   a restart is strictly larger than every fence before it;
//! * the observer's counters say what happened.
//!
//! Adapter-level faults (error kinds, one failed call per terminated backend, the
//! frozen server) are in `crates/adapter-postgres/tests/behaviour.rs`.

mod faults;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use adapter_postgres::PostgresStore;
use drain_core::event::{Event, LeaseOp, MessageOutcome};
use drain_core::guard::LeaseStatus;
use drain_core::ports::LeaseStore;
use test_servers::PostgresServer;

use faults::postgres::{Server, World, config};
use faults::scenarios::Slowed;
use faults::{lock, scenarios, stats};

// ---------------------------------------------------------------------------------
// PostgreSQL killed
// ---------------------------------------------------------------------------------

/// Dead before the tick: the acquire is refused, the tick drains anyway (fail open),
/// every claim fails so nothing is submitted (fail closed), the first wholly abandoned
/// batch ends the tick, and once the server is back the same store serves the next
/// ticks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dead_before_the_tick_fails_open_on_the_lease_and_closed_on_claims() {
    let w = World::patient(12, Duration::ZERO).await;
    scenarios::dead_before_the_tick(w).await;
}

/// The acquire is on the wire when the server is SIGKILLed: a typed error, fail open,
/// claims fail closed, recovery on the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_while_the_acquire_is_in_flight_fails_open() {
    let w = World::new(8, Duration::ZERO).await;
    scenarios::killed_while_the_acquire_is_in_flight(w).await;
}

/// Killed from inside a slow submit, after the batch's claims were taken: the
/// claimed batch is still submitted (it holds its claims); settling it fails, a
/// failed claim store ends the receiving, the release fails and is counted; after
/// a restart the lease our tick left is still a row until its TTL frees it, every
/// later fence is larger than the one before the kill, and everything else goes
/// through once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_mid_drain_submits_only_what_was_claimed() {
    let mut w = World::new(15, Duration::from_millis(20)).await;
    w.cfg.lease_ttl = Duration::from_millis(1500);
    w.cfg.claim_pending_ttl = Duration::from_millis(1500);
    let reports = scenarios::killed_mid_drain(w).await;
    let fences: Vec<u64> = reports.iter().filter_map(|r| r.fence).collect();
    assert!(fences.iter().all(|&f| f > 1), "fences after the restart exceed the one before it: {reports:?}");
}

/// Killed while the second batch's claim call is in flight: that batch fails closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_while_a_claim_is_in_flight_fails_closed() {
    let mut w = World::new(15, Duration::ZERO).await;
    w.cfg.lease_ttl = Duration::from_millis(1500);
    scenarios::killed_while_a_claim_is_in_flight(w).await;
}

/// Killed while the release is in flight: the release fails and is counted; after
/// the restart the lease is still there, holding our token, until its TTL frees it
/// (ticks meanwhile are skipped); the fence survived and grows, and redeliveries of
/// the submitted messages are recognised as duplicates (the done claims survived).
/// PostgreSQL needs no extra setting for this: its rows are its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_while_the_release_is_in_flight_leaves_the_lease_to_its_ttl() {
    let w = World::new(10, Duration::ZERO).await;
    scenarios::killed_while_the_release_is_in_flight(w).await;
}

// ---------------------------------------------------------------------------------
// PostgreSQL frozen, restarted, cut off, timed out
// ---------------------------------------------------------------------------------

/// SIGSTOP (the postmaster and every backend) mid-drain for twice the lease TTL:
/// renewals fail (counted, not a loss) while it is frozen; once it thaws the lease
/// has expired on the server's clock, so the next renewal reports `Lost` and the
/// drain is cancelled (the rest is abandoned with its claims released) and the
/// release is `NotOwner`. A tick while it is frozen fails open and submits nothing.
/// The same store then drains everything exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_past_the_ttl_loses_the_lease_cancels_the_drain_and_fails_open_while_frozen() {
    let w = World::new(25, Duration::from_millis(120)).await;
    scenarios::frozen_past_the_ttl(w).await;
}

/// Restarted (killed, started on the same data directory) while a holder drains: the
/// lease, its fence and the batch's claims are rows and survive. Renewals during the
/// restart fail and are counted; the next one renews on the new server, so the
/// lease is never lost and the drain runs to the end; the next tick's fence is
/// strictly larger (2). Where Redis without persistence forgets leases and counts
/// fences from 1 again, PostgreSQL does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_under_a_holder_keeps_the_lease_and_the_fence_grows() {
    let mut w = World::new(20, Duration::from_millis(150)).await;
    w.cfg.lease_ttl = Duration::from_secs(4);
    w.cfg.batch = 20;
    let renewed_after_restart = Arc::new(AtomicUsize::new(usize::MAX));
    let (server, observer, mark) = (w.server.clone(), w.observer.clone(), renewed_after_restart.clone());
    w.target.on_call(3, move || {
        lock(&server).restart();
        let renewed = observer.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Renew, result: "renewed", .. }));
        mark.store(renewed, Ordering::SeqCst);
    });
    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    let first = r.fence.expect("the lease's fence");
    assert!(!r.lease_lost, "the lease survived the restart: {r:?}");
    assert_eq!(w.lease_ops(LeaseOp::Renew, "lost"), 0);
    assert!(
        w.lease_ops(LeaseOp::Renew, "renewed") > renewed_after_restart.load(Ordering::SeqCst),
        "renewed on the restarted server"
    );
    assert_eq!(stats(&r), (20, 20, 0, 0), "{r:?}");
    assert_eq!(w.messages(MessageOutcome::ClaimSettleFailed), 0, "the settlement reconnected: {r:?}");
    assert_eq!(w.lease_ops(LeaseOp::Release, "released"), 1, "released on the restarted server");
    w.assert_exactly_once();

    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    assert!(r.fence.is_some_and(|f| f > first), "the fence is strictly larger after the restart: {r:?}");
    assert_eq!(stats(&r), (0, 0, 0, 0), "{r:?}");
}

/// The pids of the store's backends.
fn store_backends(w: &World) -> BTreeSet<String> {
    w.server()
        .sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'drain'")
        .expect("pg_stat_activity")
        .into_iter()
        .filter_map(|row| row.into_iter().next().flatten())
        .collect()
}

/// `pg_terminate_backend` on every backend of the store, twice mid-drain: each cut
/// costs at most one failed call (the connection that answered 57P01 or closed is
/// replaced by the next call on its slot), the renewal keeps renewing on new
/// connections, the lease is never lost, and every message goes through once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_mid_drain_cost_at_most_one_failed_call_per_cut() {
    let mut w = World::new(30, Duration::from_millis(100)).await;
    w.cfg.lease_ttl = Duration::from_millis(1500);
    let renewed_at_last_cut = Arc::new(AtomicUsize::new(usize::MAX));
    let cut: Arc<std::sync::Mutex<Vec<BTreeSet<String>>>> = Arc::default();
    for call in [7, 19] {
        let (server, observer, mark, cut) =
            (w.server.clone(), w.observer.clone(), renewed_at_last_cut.clone(), cut.clone());
        w.target.on_call(call, move || {
            let rows = lock(&server)
                .sql("SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'drain'")
                .expect("pg_terminate_backend");
            assert!(!rows.is_empty(), "the store's connections were cut");
            lock(&cut).push(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect());
            let renewed = observer.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Renew, result: "renewed", .. }));
            mark.store(renewed, Ordering::SeqCst);
        });
    }
    w.drain_until_done(Duration::from_secs(15)).await;
    w.assert_exactly_once();
    let failed_calls = w.count(|e| matches!(e, Event::LeaseOp { result: "error", .. }))
        + w.messages(MessageOutcome::ClaimError).div_ceil(5)
        + w.messages(MessageOutcome::ClaimSettleFailed).div_ceil(5);
    assert!(failed_calls <= 2, "at most one failed call per cut, saw {failed_calls}");
    assert_eq!(w.count(|e| matches!(e, Event::LeaseLost { .. })), 0, "a cut connection is not a lost lease");
    let renewed = w.lease_ops(LeaseOp::Renew, "renewed");
    assert!(renewed > renewed_at_last_cut.load(Ordering::SeqCst), "renewal continued after the last cut");
    w.assert_lease_works().await;
    let cuts = lock(&cut).clone();
    assert_eq!(cuts.len(), 2);
    let now = store_backends(&w);
    for killed in &cuts {
        assert!(killed.is_disjoint(&now), "every terminated backend was replaced: {killed:?} vs {now:?}");
    }
}

/// Hold `table` of drain's schema in ACCESS EXCLUSIVE mode in a test transaction
/// for `hold`, on a thread of its own; returns once the lock is granted.
fn hold_lock(server: &Server, table: &str, hold: Duration) -> std::thread::JoinHandle<()> {
    let sql = format!(
        "SET statement_timeout = 0; BEGIN; LOCK TABLE drain.{table} IN ACCESS EXCLUSIVE MODE; \
         SELECT pg_sleep({}); COMMIT",
        hold.as_secs_f64()
    );
    // Not through the shared server: the test goes on while the lock is held.
    let pg = lock(server).sql_handle();
    let handle = std::thread::spawn(move || {
        pg.sql(&sql, hold + Duration::from_secs(10)).expect("the test transaction holds the lock");
    });
    let granted = format!(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
         WHERE c.relname = '{table}' AND l.mode = 'AccessExclusiveLock' AND l.granted"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let rows = lock(server).sql(&granted).expect("pg_locks");
        if rows.first().and_then(|r| r[0].as_deref()) == Some("1") {
            return handle;
        }
        assert!(Instant::now() < deadline, "the test transaction never got its lock on {table}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The role's `statement_timeout` (150 ms, below the client's 300 ms response
/// timeout) cancels calls that a test transaction's lock holds up: the server
/// answers 57014, the call fails as a timeout, and the connection stays (no backend
/// is replaced). Mid-drain, on the claims table: the batch's settlement times out
/// and the tick receives nothing more (claims fail closed). Before a tick, on the
/// leases table: the acquire times out, the tick fails open, and with the store
/// known down it receives nothing. Both recover on the same store, every message
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeouts_fail_open_and_closed_then_recover() {
    let server = PostgresServer::start();
    // The schema first, then the setting: the store's sessions all start under it.
    let mut setup = config(&server);
    setup.url.push_str("?application_name=setup");
    drop(PostgresStore::connect(setup).await.expect("create the schema"));
    server.sql("ALTER ROLE postgres SET statement_timeout = '150ms'").expect("ALTER ROLE");
    let mut w = World::on(server, 15, Duration::from_millis(50)).await;
    w.cfg.lease_ttl = Duration::from_secs(2);
    let store = w.store.clone();
    for _ in 0..4 {
        store.peek(&w.lease_key()).await.expect("every connection made");
    }
    let setting = w.server().sql("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'").expect("show");
    assert_eq!(setting, vec![vec![Some("150".to_owned())]], "sessions start under the role's setting");
    let backends = store_backends(&w);
    assert_eq!(backends.len(), 4, "{backends:?}");

    let server = w.server.clone();
    let slow = move |slowed: Slowed| {
        let table = if slowed == Slowed::Settlement { "claims" } else { "leases" };
        hold_lock(&server, table, Duration::from_millis(1000))
    };
    scenarios::slower_than_the_timeout(w, slow, move |w, r| {
        assert!(!r.lease_lost, "{r:?}");
        assert!(store_backends(w).is_superset(&backends), "a statement timeout costs no connection");
    })
    .await;
}

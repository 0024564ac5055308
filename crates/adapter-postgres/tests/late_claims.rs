//! A claim call that timed out because its backend froze runs when the backend
//! thaws, beside the calls the store makes on a fresh connection meanwhile. The store
//! ends such a backend before it sends anything else, so that the release after the
//! probe follows whatever the late call took: once the probe answers and the
//! release ran, no claim of the timed-out call is left, even after the backend thaws.

mod support;

use std::time::Duration;

use adapter_postgres::PostgresStore;
use drain_core::ErrorKind;
use drain_core::ports::{ClaimState, ClaimStore, LeaseName, LeaseStore, MessageId};
use drain_core::tick::{StaleClaims, TickConfig, probe_claims, release_stale_claims};
use test_servers::{Freezer, PostgresServer};

use support::{server, short_config as config, token};

/// A store on one connection with 300 ms timeouts (it connects at once), the pid of
/// its backend, and what freezes that backend alone.
async fn one_backend(pg: &PostgresServer) -> (PostgresStore, u32, Freezer) {
    let timeout = Duration::from_millis(300);
    // The schema first, without a timeout: making it takes longer than 300 ms on a
    // loaded machine, and the store below then only checks its version.
    pg.sql(&adapter_postgres::schema_sql(adapter_postgres::DEFAULT_SCHEMA).expect("the schema's SQL"))
        .expect("create the schema");
    let store =
        PostgresStore::connect(config(&pg.url()).connections(1).timeouts(timeout, timeout)).await.expect("connect");
    let rows = pg.sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'drain'").expect("backends");
    let [row] = rows.as_slice() else { panic!("one backend of the store: {rows:?}") };
    let pid: u32 = row[0].as_deref().and_then(|p| p.parse().ok()).expect("a pid");
    (store, pid, Freezer::process(pid))
}

#[tokio::test]
async fn a_frozen_backend_is_ended_before_the_probe_so_its_late_claims_are_released() {
    let pg = server();
    let (store, pid, backend) = one_backend(&pg).await;
    let cfg = TickConfig::new("requests");
    probe_claims(&cfg, &store, &token("warm", 1)).await.expect("healthy");

    backend.freeze();
    let ids: Vec<MessageId> = (0..8).map(|i| MessageId::from(format!("m{i}"))).collect();
    let first = token("first", 2);
    let e = store.claim_batch("requests", &ids, &first, Duration::from_secs(60)).await.expect_err("frozen");
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    let thaw = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1_500));
            backend.thaw();
        })
    };

    // The server answers at once on a fresh connection, but the store first ends
    // the frozen backend, which it can only once that thaws.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut failed = 0;
    while let Err(e) = probe_claims(&cfg, &store, &token("probe", 3)).await {
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
        assert!(tokio::time::Instant::now() < deadline, "no answer after the thaw: {e}");
        failed += 1;
    }
    assert!(failed >= 1, "the probe answered while a call that timed out could still run");
    release_stale_claims(&cfg, &store, &StaleClaims { token: first, ids: ids.clone() }).await.expect("released");
    thaw.join().expect("thawed");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let seen = store.claim_batch("requests", &ids, &token("other", 4), Duration::from_secs(60)).await.expect("answers");
    assert!(seen.iter().all(|s| *s == ClaimState::Claimed), "a late claim survived the release: {seen:?}");
    let left = pg.sql(&format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}")).expect("activity");
    assert_eq!(left[0][0].as_deref(), Some("0"), "the frozen backend was ended");
}

/// While a backend that timed out cannot be ended, no call goes through, also when
/// several are made at once: each waits for the one ending it, then fails as a
/// timeout (before, the calls beside the one ending it were sent at once).
#[tokio::test]
async fn no_call_goes_through_beside_the_one_ending_a_frozen_backend() {
    let pg = server();
    let (store, _, backend) = one_backend(&pg).await;
    let lease = LeaseName::queue("q");
    store.peek(&lease).await.expect("healthy");

    backend.freeze();
    let e = store.peek(&lease).await.expect_err("frozen");
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    let (a, b, c) = futures::join!(store.peek(&lease), store.peek(&lease), store.peek(&lease));
    backend.thaw();
    for answer in [a, b, c] {
        let e = answer.expect_err("nothing goes through while the frozen backend runs");
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Err(e) = store.peek(&lease).await {
        assert!(tokio::time::Instant::now() < deadline, "no answer after the thaw: {e}");
    }
}

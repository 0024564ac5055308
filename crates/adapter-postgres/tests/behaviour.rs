//! PostgreSQL-specific behaviour beyond the shared contract: fences that survive a
//! server restart, a client that recovers from a restart and a terminated backend
//! without restarting, the schema created once by racing stores, the rights of a
//! role that may only run drain's functions, prefixes that keep tenants apart.

mod support;

use std::time::Duration;

use adapter_postgres::{PostgresStore, SCHEMA_VERSION, grant_sql};
use drain_core::ErrorKind;
use drain_core::ports::{Acquire, ClaimState, ClaimStore, LeaseName, LeaseStore, MessageId, Release};

use support::{connect_short as connect, server, short_config as config, token};

fn fence(a: Acquire) -> u64 {
    match a {
        Acquire::Acquired { fence } => fence,
        held => panic!("expected Acquired, got {held:?}"),
    }
}

/// Retry `op` until it answers, at most 50 times 100 ms apart; every error on the
/// way must be temporary.
async fn until_ok<T, F: Future<Output = Result<T, drain_core::PortError>>>(mut op: impl FnMut() -> F) -> (T, usize) {
    let mut errors = 0;
    for _ in 0..50 {
        match op().await {
            Ok(v) => return (v, errors),
            Err(e) => {
                assert!(e.is_temporary(), "a restart is a passing condition: {e}");
                errors += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    panic!("the store did not recover within 5 s");
}

#[tokio::test]
async fn a_fence_is_strictly_larger_after_the_server_restarts() {
    let mut pg = server();
    let store = connect(&pg.url()).await;
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    let ttl = Duration::from_secs(30);
    let mut last = 0;
    for _ in 0..3 {
        let f = fence(store.acquire(&lease, &me, ttl).await.expect("acquire"));
        assert!(f > last);
        last = f;
        assert_eq!(store.release(&lease, &me).await.expect("release"), Release::Released);
    }
    // Killed (no shutdown checkpoint) and started again on the same data directory;
    // the same store, in the same process, reconnects.
    pg.restart();
    let (after, _errors) = until_ok(|| store.acquire(&lease, &me, ttl)).await;
    assert!(fence(after) > last, "the fence moved on from {last} across the restart");
    // A lease taken before a restart is still held after it (its expiry is a row).
    let held = LeaseName::queue("held");
    store.acquire(&held, &me, ttl).await.expect("acquire");
    pg.restart();
    let other = token("other", 2);
    let (got, _) = until_ok(|| store.acquire(&held, &other, ttl)).await;
    assert!(matches!(got, Acquire::Busy { ref holder, .. } if holder == "me"), "{got:?}");
}

#[tokio::test]
async fn a_terminated_backend_costs_at_most_one_failed_call() {
    let pg = server();
    let store = PostgresStore::connect(config(&pg.url()).connections(1)).await.expect("connect");
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire");
    let killed = pg
        .sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'drain'")
        .expect("terminate");
    assert_eq!(killed.len(), 1, "one connection");
    let first = store.peek(&lease).await;
    if let Err(e) = &first {
        assert!(e.is_temporary() && e.kind == ErrorKind::Connection, "{e}");
    }
    let held = store.peek(&lease).await.expect("the next call reconnects").expect("still held");
    assert_eq!(held.holder, "me");
}

/// Once the server is gone, a call whose connection cannot be made sent nothing and
/// says so (`may_have_run` is false), so a tick does not keep its claims to release
/// later; the call that met the broken connection may have run.
#[tokio::test]
async fn a_call_that_cannot_connect_ran_nothing() {
    let mut pg = server();
    let store = PostgresStore::connect(config(&pg.url()).connections(1)).await.expect("connect");
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire");
    pg.kill();
    let mut unsent = 0;
    for _ in 0..3 {
        let e = store.peek(&lease).await.expect_err("the server is gone");
        assert!(e.is_temporary(), "{e}");
        if !e.may_have_run() {
            unsent += 1;
        }
    }
    assert!(unsent >= 2, "the calls after the broken one could not connect: {unsent} of 3 said so");
}

#[tokio::test]
async fn a_frozen_server_answers_timeout_and_the_store_recovers() {
    let mut pg = server();
    let store = connect(&pg.url()).await;
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    pg.pause();
    let err = store.acquire(&lease, &me, Duration::from_secs(30)).await.expect_err("frozen");
    assert!(matches!(err.kind, ErrorKind::Timeout | ErrorKind::Connection) && err.is_temporary(), "{err}");
    pg.resume();
    let (got, _) = until_ok(|| store.acquire(&lease, &me, Duration::from_secs(30))).await;
    // The timed-out acquire may have landed: then it is ours (Acquired by "me").
    match got {
        Acquire::Acquired { .. } => {}
        Acquire::Busy { holder, .. } => assert_eq!(holder, "me"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_stores_create_the_schema_once() {
    let pg = server();
    let url = pg.url();
    let stores = futures::future::join_all((0..6).map(|_| {
        PostgresStore::connect(config(&url).schema("raced").timeouts(Duration::from_secs(5), Duration::from_secs(5)))
    }))
    .await;
    for s in &stores {
        assert!(s.is_ok(), "{:?}", s.as_ref().err());
    }
    let rows = pg.sql("SELECT version FROM raced.schema_version ORDER BY version").expect("version");
    let versions: Vec<Vec<Option<String>>> = (1..=SCHEMA_VERSION).map(|v| vec![Some(v.to_string())]).collect();
    assert_eq!(rows, versions);
    // Connecting again changes nothing.
    PostgresStore::connect(config(&url).schema("raced")).await.expect("again");
    let count = pg.sql("SELECT count(*) FROM raced.schema_version").expect("count");
    assert_eq!(count, vec![vec![Some(SCHEMA_VERSION.to_string())]]);
}

#[tokio::test]
async fn a_role_that_may_only_execute_runs_drain_and_others_get_the_right_named() {
    let pg = server();
    // The owner creates the schema; drain_exec gets only what grant_sql grants.
    connect(&pg.url()).await;
    pg.sql("CREATE ROLE drain_exec LOGIN; CREATE ROLE drain_none LOGIN").expect("roles");
    pg.sql(&grant_sql("drain", "drain_exec").expect("grants")).expect("grant");

    let exec = PostgresStore::connect(config(&pg.url_for("drain_exec", "postgres")).create_schema(false))
        .await
        .expect("a role with EXECUTE connects");
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    assert!(matches!(
        exec.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire"),
        Acquire::Acquired { .. }
    ));
    assert_eq!(exec.release(&lease, &me).await.expect("release"), Release::Released);
    let direct = pg.sql_as("drain_exec", "postgres", "SELECT * FROM drain.leases").expect_err("no right on the tables");
    assert!(direct.to_string().contains("42501"), "{direct}");

    let err = PostgresStore::connect(config(&pg.url_for("drain_none", "postgres"))).await.expect_err("no EXECUTE");
    assert_eq!(err.kind, ErrorKind::Permission, "{err}");
    assert!(err.message.contains("drain_none") && err.message.contains("grant_sql"), "{err}");

    // A missing schema the role may not create: the right is named too.
    let err = PostgresStore::connect(config(&pg.url_for("drain_none", "postgres")).schema("elsewhere"))
        .await
        .expect_err("no CREATE");
    assert_eq!(err.kind, ErrorKind::Permission, "{err}");
    assert!(err.message.contains("CREATE on the database") && err.message.contains("schema_sql"), "{err}");
    let err = PostgresStore::connect(config(&pg.url()).schema("elsewhere").create_schema(false))
        .await
        .expect_err("creation off");
    assert_eq!(err.kind, ErrorKind::Config, "{err}");
}

#[tokio::test]
async fn prefixes_keep_tenants_apart_and_errors_are_typed() {
    let pg = server();
    let a = PostgresStore::connect(config(&pg.url()).key_prefix("tenant-a")).await.expect("a");
    let b = PostgresStore::connect(config(&pg.url()).key_prefix("tenant-b")).await.expect("b");
    let lease = LeaseName::queue("shared-name");
    let ttl = Duration::from_secs(30);
    fence(a.acquire(&lease, &token("a", 1), ttl).await.expect("a"));
    fence(b.acquire(&lease, &token("b", 2), ttl).await.expect("b"));
    assert_eq!(b.release(&lease, &token("a", 1)).await.expect("release"), Release::NotOwner);

    let err = PostgresStore::connect(config(&pg.url()).schema("Bad-Name")).await.expect_err("bad schema");
    assert_eq!(err.kind, ErrorKind::Config);
    let err = PostgresStore::connect(config(&pg.url_for("postgres", "no_such_db"))).await.expect_err("no db");
    assert_eq!(err.kind, ErrorKind::Config, "{err}");
    let err = PostgresStore::connect(config(&format!("postgres://u:s3cret@127.0.0.1:{}/x", test_servers::free_port())))
        .await
        .expect_err("nobody listens");
    assert!(err.is_temporary() && !err.message.contains("s3cret"), "{err}");
}

#[tokio::test]
async fn purge_deletes_only_expired_rows_of_its_prefix() {
    let pg = server();
    let store = connect(&pg.url()).await;
    let other = PostgresStore::connect(config(&pg.url()).key_prefix("other")).await.expect("other tenant");
    let me = token("me", 1);
    let short = Duration::from_millis(200);
    let ids: Vec<MessageId> = (0..5).map(MessageId::Ulong).collect();
    store.claim_batch("q", &ids, &me, short).await.expect("claim");
    other.claim_batch("q", &ids, &me, short).await.expect("claim");
    store.claim_batch("q", &[MessageId::from("fresh")], &me, Duration::from_secs(30)).await.expect("claim");
    let count = |prefix: &str| -> String {
        pg.sql(&format!("SELECT count(*) FROM drain.claims WHERE prefix = '{prefix}'")).expect("count")[0][0]
            .clone()
            .expect("a count")
    };
    assert_eq!(store.purge_expired(100).await.expect("purge"), 0, "nothing expired yet");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.purge_expired(3).await.expect("purge"), 3, "at most the limit");
    assert_eq!(store.purge_expired(100).await.expect("purge"), 2);
    assert_eq!(count("drain"), "1", "the fresh claim stays");
    assert_eq!(count("other"), "5", "another prefix's rows are its own");
    let state = store.claim_batch("q", &[MessageId::from("fresh")], &token("b", 2), short).await.expect("claim");
    assert!(matches!(state[0], ClaimState::PendingElsewhere { .. }), "{state:?}");
}

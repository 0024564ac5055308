//! Fences checked in the database, on a private PostgreSQL: the embedder's
//! statements committed only while their fence is the lease's current one
//! (`PostgresStore::fenced`, `check_fence`), an acquire waiting for such a
//! transaction, the rights a role granted only EXECUTE needs, and the upgrade of a
//! version 1 schema.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use adapter_postgres::{Fenced, FencedError, PostgresStore, SCHEMA_VERSION, grant_sql};
use drain_core::ErrorKind;
use drain_core::ports::{Acquire, Fence, FenceMarks, FenceVerdict, LeaseName, LeaseStore, Release};
use test_servers::PostgresServer;

use support::{config, connect, server, token};

fn count(pg: &PostgresServer, table: &str) -> String {
    pg.sql(&format!("SELECT count(*) FROM {table}")).expect("count")[0][0].clone().expect("a count")
}

fn fence_of(a: Acquire) -> u64 {
    match a {
        Acquire::Acquired { fence } => fence,
        other => panic!("not acquired: {other:?}"),
    }
}

async fn insert(store: &PostgresStore, client: &mut tokio_postgres::Client, fence: &Fence, n: i32) -> Fenced<u64> {
    store
        .fenced(client, fence, async |tx| tx.execute("INSERT INTO report (n) VALUES ($1)", &[&n]).await)
        .await
        .unwrap_or_else(|e| panic!("fenced insert {n}: {e}"))
}

#[tokio::test]
async fn writes_commit_only_while_the_fence_is_current() {
    let pg = server();
    let store = connect(&pg.url()).await;
    pg.sql("CREATE TABLE report (n int)").expect("table");
    let mut client = store.connect_client().await.expect("client");
    let job = LeaseName::job("nightly");
    let (a, b) = (token("a", 1), token("b", 2));

    let f1 = fence_of(store.acquire(&job, &a, Duration::from_millis(300)).await.expect("acquire"));
    assert_eq!(insert(&store, &mut client, &Fence::new(job.clone(), f1), 1).await, Fenced::Committed(1));
    // Expired, and nobody acquired since: no larger fence was handed out, so the
    // holder's writes still land (nobody else can have written under a larger one).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(store.peek(&job).await.expect("peek").is_none(), "expired");
    assert_eq!(insert(&store, &mut client, &Fence::new(job.clone(), f1), 2).await, Fenced::Committed(1));

    let f2 = fence_of(store.acquire(&job, &b, Duration::from_secs(30)).await.expect("acquire"));
    assert!(f2 > f1, "{f2} after {f1}");
    let stale = insert(&store, &mut client, &Fence::new(job.clone(), f1), 3).await;
    assert_eq!(stale, Fenced::Stale { current: f2 });
    assert_eq!(count(&pg, "report"), "2", "the stale write did not land");
    assert_eq!(insert(&store, &mut client, &Fence::new(job.clone(), f2), 4).await, Fenced::Committed(1));
    // Released: still current until someone acquires again.
    assert_eq!(store.release(&job, &b).await.expect("release"), Release::Released);
    assert_eq!(insert(&store, &mut client, &Fence::new(job.clone(), f2), 5).await, Fenced::Committed(1));

    // A fence this store never handed out for the lease (another store's, another
    // lease's): refused.
    assert_eq!(insert(&store, &mut client, &Fence::new(job.clone(), f2 + 5), 6).await, Fenced::Stale { current: f2 });
    let never = Fence::new(LeaseName::job("never-taken"), 1);
    assert_eq!(insert(&store, &mut client, &never, 7).await, Fenced::Stale { current: 0 });
    let queue = Fence::new(LeaseName::queue("nightly"), f2);
    assert_eq!(insert(&store, &mut client, &queue, 8).await, Fenced::Stale { current: 0 }, "another kind's lease");

    // The work's error rolls back what it wrote.
    let failed = store
        .fenced(&mut client, &Fence::new(job.clone(), f2), async |tx| {
            tx.execute("INSERT INTO report (n) VALUES (9)", &[]).await?;
            tx.execute("INSERT INTO no_such_table VALUES (1)", &[]).await
        })
        .await;
    assert!(matches!(failed, Err(FencedError::Work(_))), "{failed:?}");
    assert_eq!(count(&pg, "report"), "4");
    let rows = pg.sql("SELECT n FROM report ORDER BY n").expect("rows");
    assert_eq!(rows.iter().map(|r| r[0].clone().expect("n")).collect::<Vec<_>>(), ["1", "2", "4", "5"]);
}

/// The check holds the lease's row: an acquire of the expired lease waits until the
/// fenced transaction commits, then hands out the next fence, which makes the old
/// one stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_waits_for_the_fenced_transaction_to_end() {
    let pg = server();
    let store = PostgresStore::connect(config(&pg.url()).timeouts(Duration::from_secs(5), Duration::from_secs(5)))
        .await
        .expect("connect");
    pg.sql("CREATE TABLE report (n int)").expect("table");
    let job = LeaseName::job("nightly");
    let f1 = fence_of(store.acquire(&job, &token("a", 1), Duration::from_millis(200)).await.expect("acquire"));
    let fence = Fence::new(job.clone(), f1);
    let mut client = store.connect_client().await.expect("client");
    let tx = client.transaction().await.expect("begin");
    assert_eq!(store.check_fence(&tx, &fence).await.expect("check"), FenceVerdict::Accepted);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (other, b) = (store.clone(), token("b", 2));
    let acquire = tokio::spawn({
        let job = job.clone();
        async move { other.acquire(&job, &b, Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!acquire.is_finished(), "the acquire waits for the transaction that checked the fence");
    tx.execute("INSERT INTO report (n) VALUES (1)", &[]).await.expect("insert");
    tx.commit().await.expect("commit");
    let f2 = fence_of(acquire.await.expect("join").expect("acquire"));
    assert!(f2 > f1, "{f2} after {f1}");
    assert_eq!(count(&pg, "report"), "1");
    assert_eq!(insert(&store, &mut client, &fence, 2).await, Fenced::Stale { current: f2 });
    // The SQL form for statements of the embedder's own.
    let rows = pg
        .sql(&format!("SELECT drain.fence_is_current('drain', 'job', 'nightly', {f1}), drain.fence_is_current('drain', 'job', 'nightly', {f2})"))
        .expect("fence_is_current");
    assert_eq!(rows, vec![vec![Some("f".to_owned()), Some("t".to_owned())]]);
}

#[tokio::test]
async fn a_role_granted_only_execute_checks_fences_and_keeps_marks() {
    let pg = server();
    let owner = connect(&pg.url()).await;
    pg.sql("CREATE ROLE drain_exec LOGIN; CREATE ROLE drain_none LOGIN").expect("roles");
    pg.sql(&grant_sql("drain", "drain_exec").expect("grants")).expect("grant");
    pg.sql("CREATE TABLE report (n int); GRANT INSERT ON report TO drain_exec").expect("the embedder's table");
    let exec = PostgresStore::connect(config(&pg.url_for("drain_exec", "postgres")).create_schema(false))
        .await
        .expect("a role with EXECUTE connects");
    let job = LeaseName::job("j");
    let f = fence_of(exec.acquire(&job, &token("a", 1), Duration::from_secs(30)).await.expect("acquire"));
    let mut client = exec.connect_client().await.expect("client");
    assert_eq!(insert(&exec, &mut client, &Fence::new(job.clone(), f), 1).await, Fenced::Committed(1));
    assert_eq!(exec.admit("orders", 3).await.expect("admit"), FenceVerdict::Accepted);
    assert_eq!(exec.admit("orders", 2).await.expect("admit"), FenceVerdict::Stale { mark: 3 });
    let direct = pg.sql_as("drain_exec", "postgres", "SELECT * FROM drain.fence_marks").expect_err("no table right");
    assert!(direct.to_string().contains("42501"), "{direct}");

    // A role without EXECUTE gets the right named.
    let mut none = tokio_postgres::connect(&pg.url_for("drain_none", "postgres"), tokio_postgres::NoTls)
        .await
        .map(|(client, conn)| {
            tokio::spawn(conn);
            client
        })
        .expect("connect as drain_none");
    let refused = owner.fenced(&mut none, &Fence::new(job, f), async |_tx| Ok::<_, tokio_postgres::Error>(())).await;
    match refused {
        Err(FencedError::Store(e)) => assert_eq!(e.kind, ErrorKind::Permission, "{e}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_version_1_schema_is_upgraded_on_connect_or_named_when_it_may_not_be() {
    let pg = server();
    for schema in ["old", "older"] {
        pg.sql(&include_str!("../src/schema_v1.sql").replace("@SCHEMA@", schema)).expect("a version 1 schema");
    }
    let err = PostgresStore::connect(config(&pg.url()).schema("older").create_schema(false))
        .await
        .expect_err("an old schema, creation off");
    assert_eq!(err.kind, ErrorKind::Config, "{err}");
    let needs = format!("at version 1 (this drain needs {SCHEMA_VERSION})");
    assert!(err.message.contains(&needs) && err.message.contains("schema_sql"), "{err}");

    let store = PostgresStore::connect(config(&pg.url()).schema("old")).await.expect("upgraded");
    let rows = pg.sql("SELECT version FROM old.schema_version ORDER BY version").expect("versions");
    let versions: Vec<Vec<Option<String>>> = (1..=SCHEMA_VERSION).map(|v| vec![Some(v.to_string())]).collect();
    assert_eq!(rows, versions);
    assert_eq!(store.admit("r", 1).await.expect("admit"), FenceVerdict::Accepted);
}

/// Moving a lease onto PostgreSQL (docs/reliability.md, "Fences across a
/// failover"): a fresh database hands out fences above the old store's, which never
/// run ahead of the clock; a lease row seeded with an old fence above the clock (a
/// store that counted from elsewhere) makes the next fence larger than that.
#[tokio::test]
async fn a_moved_lease_hands_out_fences_above_the_old_store_s() {
    let pg = server();
    let store = connect(&pg.url()).await;
    let acquire = async |seed: u64| {
        let lease = LeaseName::job("nightly");
        let f = fence_of(store.acquire(&lease, &token("a", seed), Duration::from_secs(30)).await.expect("acquire"));
        store.release(&lease, &token("a", seed)).await.expect("release");
        f
    };
    // An old store's fences: a counter (1, 2, …) or the clock when it took them.
    let micros_now =
        u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_micros()).expect("u64");
    assert_eq!(store.admit("report", micros_now).await.expect("the old holder's mark"), FenceVerdict::Accepted);
    let f = acquire(1).await;
    assert!(f > micros_now, "{f} above the old store's {micros_now}, no seed needed");
    assert_eq!(store.admit("report", f).await.expect("admit"), FenceVerdict::Accepted);

    let ahead = 4_000_000_000_000_000_i64; // the year 2096, in microseconds
    pg.sql(&format!(
        "INSERT INTO drain.leases (prefix, kind, name, fence) VALUES ('drain', 'job', 'nightly', {ahead}) \
         ON CONFLICT (prefix, kind, name) DO UPDATE SET fence = greatest(drain.leases.fence, excluded.fence)"
    ))
    .expect("seed");
    assert_eq!(acquire(2).await, 4_000_000_000_000_001, "one above a seed ahead of the clock");
}

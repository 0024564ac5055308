//! Owner backlogs on a private PostgreSQL (schema version 3): a batch moves into
//! flight, a batch left in flight is taken again, recording counts each item once
//! (never twice, even when two turns record the same batch), an owner is pending
//! while items wait or are in flight, a part of a batch recorded leaves the rest in
//! flight, prefixes keep apart, and a role granted only `grant_sql` runs
//! every call.

mod support;

use adapter_postgres::{BacklogBatch, PostgresStore, grant_sql};
use drain_core::admission::OwnerId;
use test_servers::PostgresServer;

use support::{config, connect, server};

fn owner(name: &str) -> OwnerId {
    OwnerId::from(name)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// `(items recorded, items recorded more than once)` of `prefix`.
fn recorded(pg: &PostgresServer, prefix: &str) -> (String, String) {
    let rows = pg
        .sql(&format!(
            "SELECT count(*)::text, count(*) FILTER (WHERE times > 1)::text FROM drain.backlog_processed \
             WHERE prefix = '{prefix}'"
        ))
        .expect("count");
    (rows[0][0].clone().unwrap_or_default(), rows[0][1].clone().unwrap_or_default())
}

#[tokio::test]
async fn batches_move_into_flight_are_taken_again_and_recorded_once() {
    let pg = server();
    let store = connect(&pg.url()).await;
    let (a, b) = (owner("a"), owner("b"));
    let pushed = store.push_backlog(&["a", "b", "a", "a"], &["i0", "i1", "i2", "i3"]).await.expect("push");
    assert_eq!(pushed, 4);
    assert_eq!(
        store.backlog_pending(&[a.clone(), b.clone(), owner("none")]).await.expect("pending"),
        [true, true, false]
    );

    let first = store.take_batch(&a, 2).await.expect("take");
    assert_eq!(first, BacklogBatch { items: strings(&["i0", "i2"]), recovered: false });
    // Nothing was recorded: the same batch again, marked recovered; in-flight items
    // still count as pending.
    let again = store.take_batch(&a, 2).await.expect("take again");
    assert_eq!(again, BacklogBatch { items: strings(&["i0", "i2"]), recovered: true });
    assert_eq!(store.record_batch(&a, &strings(&["i2"])).await.expect("record part"), 1);
    assert_eq!(
        store.take_batch(&a, 2).await.expect("the rest"),
        BacklogBatch { items: strings(&["i0"]), recovered: true }
    );
    assert_eq!(store.backlog_pending(std::slice::from_ref(&a)).await.expect("pending"), [true]);

    assert_eq!(store.record_batch(&a, &first.items).await.expect("record"), 1);
    // A second turn recording the same batch counts nothing again.
    assert_eq!(store.record_batch(&a, &again.items).await.expect("record twice"), 0);
    assert_eq!(
        store.take_batch(&a, 2).await.expect("next"),
        BacklogBatch { items: strings(&["i3"]), recovered: false }
    );
    assert_eq!(store.record_batch(&a, &strings(&["i3", "not-taken"])).await.expect("record"), 1);
    assert_eq!(store.take_batch(&a, 2).await.expect("empty"), BacklogBatch::default());
    assert_eq!(store.take_batch(&a, 0).await.expect("zero"), BacklogBatch::default());
    assert_eq!(store.backlog_pending(&[a, b]).await.expect("pending"), [false, true]);
    assert_eq!(recorded(&pg, "drain"), ("3".to_owned(), "0".to_owned()));

    // Another prefix sees none of it.
    let other = PostgresStore::connect(config(&pg.url()).key_prefix("other")).await.expect("other prefix");
    assert_eq!(other.backlog_pending(&[owner("b")]).await.expect("pending"), [false]);
    assert_eq!(other.take_batch(&owner("b"), 5).await.expect("take"), BacklogBatch::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_turns_of_one_owner_never_record_an_item_twice() {
    let pg = server();
    let stores = [connect(&pg.url()).await, connect(&pg.url()).await, connect(&pg.url()).await];
    let items: Vec<String> = (0..300).map(|i| format!("item-{i}")).collect();
    let names: Vec<&str> = items.iter().map(String::as_str).collect();
    stores[0].push_backlog(&vec!["hot"; items.len()], &names).await.expect("push");
    // Three turns on one owner at once, as if its claim had expired under each:
    // each takes, then records, until the owner is empty.
    let turns = stores.iter().map(|s| async move {
        let mut recorded = 0;
        loop {
            let batch = s.take_batch(&owner("hot"), 7).await.expect("take");
            if batch.items.is_empty() {
                return recorded;
            }
            recorded += s.record_batch(&owner("hot"), &batch.items).await.expect("record");
        }
    });
    let total: u64 = futures::future::join_all(turns).await.into_iter().sum();
    assert_eq!(total, 300, "the turns' own counts add up to every item");
    assert_eq!(recorded(&pg, "drain"), ("300".to_owned(), "0".to_owned()));
}

#[tokio::test]
async fn a_role_granted_only_grant_sql_runs_the_backlogs() {
    let pg = server();
    connect(&pg.url()).await;
    pg.sql("CREATE ROLE backlog_app LOGIN").expect("role");
    pg.sql(&grant_sql("drain", "backlog_app").expect("grants")).expect("grant");
    let app = PostgresStore::connect(config(&pg.url_for("backlog_app", "postgres")).create_schema(false))
        .await
        .expect("connect as the app role");
    app.push_backlog(&["t"], &["x"]).await.expect("push");
    let batch = app.take_batch(&owner("t"), 10).await.expect("take");
    assert_eq!(app.record_batch(&owner("t"), &batch.items).await.expect("record"), 1);
    assert_eq!(app.backlog_pending(&[owner("t")]).await.expect("pending"), [false]);
    let direct =
        pg.sql_as("backlog_app", "postgres", "SELECT * FROM drain.backlog_items").expect_err("no right on the tables");
    assert!(direct.to_string().contains("42501"), "{direct}");
}

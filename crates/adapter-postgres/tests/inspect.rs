//! `inspect` and `list`: what an operator's tools read, on a connection of their own
//! that never creates or changes anything.

mod support;

use std::time::Duration;

use adapter_postgres::{SCHEMA_VERSION, SchemaState, functions, inspect, list};
use drain_core::ErrorKind;
use drain_core::ports::{ClaimStore, LeaseName, LeaseStore, MessageId, SettleAction, Settlement};

use support::{config, connect, server, token};

fn count(pg: &test_servers::PostgresServer, sql: &str) -> String {
    pg.sql(sql).expect(sql)[0][0].clone().unwrap_or_default()
}

#[tokio::test]
async fn inspect_reads_the_role_schema_and_rights_and_creates_nothing() {
    let pg = server();
    let found = inspect(&config(&pg.url())).await.expect("inspect");
    assert_eq!((found.schema.clone(), found.may_create, found.role.as_str()), (SchemaState::Missing, true, "postgres"));
    assert_eq!(count(&pg, "SELECT count(*) FROM pg_namespace WHERE nspname = 'drain'"), "0", "nothing created");

    let _store = connect(&pg.url()).await;
    pg.sql("CREATE ROLE app LOGIN").expect("role");
    let app = config(&pg.url_for("app", "postgres"));
    let found = inspect(&app).await.expect("inspect as app");
    assert!(!found.may_create && !found.usage, "{found:?}");
    assert!(matches!(found.schema, SchemaState::Unreadable(_)), "{found:?}");
    let lacking = found.missing("drain", functions::LEASES);
    assert_eq!(lacking[0], "USAGE on schema drain");
    assert!(lacking.contains(&"EXECUTE on drain.acquire()".to_owned()), "{lacking:?}");

    pg.sql(&adapter_postgres::grant_sql("drain", "app").expect("grants")).expect("grant");
    let found = inspect(&app).await.expect("inspect as app");
    assert_eq!(found.schema, SchemaState::Version(SCHEMA_VERSION));
    let every =
        [functions::VERSION, functions::LEASES, functions::CLAIMS, functions::OWNER_PEEKS, functions::WAKE].concat();
    let every =
        [every.as_slice(), functions::LISTING, functions::PURGE, functions::FENCES, functions::BACKLOGS].concat();
    assert_eq!(found.missing("drain", &every), Vec::<String>::new(), "every function named exists and runs");
}

#[tokio::test]
async fn list_shows_the_leases_and_live_claims_of_its_prefix_only() {
    let pg = server();
    let url = pg.url();
    assert_eq!(list(&config(&url)).await.expect_err("no schema yet").kind, ErrorKind::Config);
    let a = connect(&url).await;
    let b = adapter_postgres::PostgresStore::connect(config(&url).key_prefix("b")).await.expect("b");
    let me = token("host-1", 1);
    let ttl = Duration::from_secs(60);
    a.acquire(&LeaseName::queue("requests"), &me, ttl).await.expect("acquire");
    a.acquire(&LeaseName::queue("idle"), &me, ttl).await.expect("acquire");
    a.release(&LeaseName::queue("idle"), &me).await.expect("release");
    a.acquire(&LeaseName::owner("tenant-1"), &me, ttl).await.expect("owner");
    let ids = [MessageId::from("m-1"), MessageId::Ulong(7), MessageId::from("m-3")];
    a.claim_batch("requests", &ids, &me, ttl).await.expect("claim");
    let settle = [Settlement { id: ids[2].clone(), action: SettleAction::Done }];
    a.settle_batch("requests", &settle, &me, ttl).await.expect("settle");
    b.acquire(&LeaseName::queue("requests"), &token("host-b", 2), ttl).await.expect("b acquire");

    let found = list(&config(&url)).await.expect("list");
    let leases: Vec<(&str, &str, Option<&str>)> =
        found.leases.iter().map(|l| (l.kind.as_str(), l.name.as_str(), l.holder.as_deref())).collect();
    assert_eq!(
        leases,
        [("owner", "tenant-1", Some("host-1")), ("queue", "idle", None), ("queue", "requests", Some("host-1"))]
    );
    // Each lease's first fence: the server's clock in microseconds.
    assert!(found.leases.iter().all(|l| l.fence > 1_700_000_000_000_000), "{:?}", found.leases);
    assert!(found.leases[2].remaining.is_some_and(|r| r > Duration::from_secs(50)));
    assert_eq!(found.leases[1].remaining, None, "a free lease has no time left");
    assert_eq!(found.claims.len(), 1);
    let q = &found.claims[0];
    assert_eq!((q.queue.as_str(), q.done), ("requests", 1));
    let pending: Vec<(String, &str)> = q.pending.iter().map(|p| (p.id.to_string(), p.holder.as_str())).collect();
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert!(pending.contains(&("m-1".to_owned(), "host-1")) && pending.contains(&("ulong:7".to_owned(), "host-1")));

    let other = list(&config(&url).key_prefix("b")).await.expect("list b");
    assert_eq!(other.leases.len(), 1);
    assert_eq!(other.leases[0].holder.as_deref(), Some("host-b"));
    assert!(other.claims.is_empty());
}

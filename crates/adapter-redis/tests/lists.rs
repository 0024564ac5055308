//! The list and hash helpers for owner work against a private redis-server: one
//! round trip each, exact replies, and no item ever leaves an owner's backlog
//! without being in its in-flight list or counted as processed.

mod support;

use std::sync::Arc;

use adapter_redis::Batch;
use drain_core::ErrorKind;
use drain_core::testkit::RecordingObserver;
use test_servers::{RedisServer, Reply};

use support::{connect, round_trips};

const BACKLOG: &str = "t:backlog:{a}";
const IN_FLIGHT: &str = "t:inflight:{a}";
const PROCESSED: &str = "t:processed:{a}";

fn list(server: &RedisServer, key: &str) -> Vec<String> {
    match server.command(&["LRANGE", key, "0", "-1"]).expect("LRANGE") {
        Reply::Array(Some(items)) => items
            .into_iter()
            .map(|i| match i {
                Reply::Bulk(Some(b)) => String::from_utf8(b).expect("UTF-8"),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("LRANGE answered {other:?}"),
    }
}

fn items(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("a-{i}")).collect()
}

#[tokio::test]
async fn a_batch_moves_to_in_flight_and_leaves_it_only_recorded() {
    let server = RedisServer::start();
    let observer = Arc::new(RecordingObserver::new());
    let store = connect(&server.url()).await.with_observer(observer.clone());
    let b = "t:backlog:{b}".to_owned();

    observer.clear();
    store.push_items(&[(BACKLOG.to_owned(), items(0..5)), (b.clone(), vec!["b-0".to_owned()])]).await.unwrap();
    assert_eq!(round_trips(&observer), 1);
    observer.clear();
    let lengths = store.list_lengths(&[BACKLOG.to_owned(), b.clone(), "t:backlog:{none}".to_owned()]).await.unwrap();
    assert_eq!(lengths, [5, 1, 0]);
    assert_eq!(round_trips(&observer), 1);

    observer.clear();
    let first = store.take_batch(BACKLOG, IN_FLIGHT, 3).await.unwrap();
    assert_eq!(first, Batch { items: items(0..3), recovered: false });
    assert_eq!(round_trips(&observer), 1);
    assert_eq!((list(&server, BACKLOG), list(&server, IN_FLIGHT)), (items(3..5), items(0..3)));

    // Not recorded (the turn failed, or its process died): the next take is the same batch.
    let again = store.take_batch(BACKLOG, IN_FLIGHT, 3).await.unwrap();
    assert_eq!(again, Batch { items: items(0..3), recovered: true });
    assert_eq!(list(&server, BACKLOG), items(3..5), "nothing new taken while a batch is in flight");

    observer.clear();
    assert_eq!(store.record_batch(IN_FLIGHT, PROCESSED, &first.items).await.unwrap(), 3);
    assert_eq!(round_trips(&observer), 1);
    assert!(list(&server, IN_FLIGHT).is_empty(), "recorded items leave the in-flight list");
    // A second record of the same items (a holder whose claim expired meanwhile) counts nothing.
    assert_eq!(store.record_batch(IN_FLIGHT, PROCESSED, &first.items).await.unwrap(), 0);
    assert_eq!(server.command(&["HGET", PROCESSED, "a-0"]).unwrap(), Reply::Bulk(Some(b"1".to_vec())));
    assert_eq!(server.command(&["HLEN", PROCESSED]).unwrap(), Reply::Int(3));

    // Part of a batch recorded: the rest stays in flight, in order.
    let second = store.take_batch(BACKLOG, IN_FLIGHT, 10).await.unwrap();
    assert_eq!(second.items, items(3..5));
    assert_eq!(store.record_batch(IN_FLIGHT, PROCESSED, &second.items[1..]).await.unwrap(), 1);
    assert_eq!(list(&server, IN_FLIGHT), items(3..4));
    assert_eq!(store.record_batch(IN_FLIGHT, PROCESSED, &items(3..4)).await.unwrap(), 1);
    assert_eq!(store.take_batch(BACKLOG, IN_FLIGHT, 3).await.unwrap(), Batch::default(), "all done");
    assert_eq!(store.take_batch(BACKLOG, IN_FLIGHT, 0).await.unwrap(), Batch::default());
    assert_eq!(server.command(&["HLEN", PROCESSED]).unwrap(), Reply::Int(5));
}

/// A batch bigger than Lua's unpack limit moves whole.
#[tokio::test]
async fn a_big_batch_moves_whole() {
    let server = RedisServer::start();
    let store = connect(&server.url()).await;
    store.push_items(&[(BACKLOG.to_owned(), items(0..20_000))]).await.unwrap();
    let batch = store.take_batch(BACKLOG, IN_FLIGHT, 15_000).await.unwrap();
    assert_eq!(batch.items.len(), 15_000);
    assert_eq!(store.list_lengths(&[BACKLOG.to_owned(), IN_FLIGHT.to_owned()]).await.unwrap(), [5_000, 15_000]);
    assert_eq!(store.record_batch(IN_FLIGHT, PROCESSED, &batch.items).await.unwrap(), 15_000);
    assert_eq!(server.command(&["HLEN", PROCESSED]).unwrap(), Reply::Int(15_000));
}

/// A user without one of the rights fails the call with a permanent `Permission`
/// error and nothing changed: no item leaves the backlog, none leaves the in-flight
/// list uncounted (before, a failed `HINCRBY` after the pop lost the batch).
#[tokio::test]
async fn a_missing_right_changes_nothing() {
    let server = RedisServer::start();
    let all =
        ["+evalsha", "+eval", "+script|load", "+lrange", "+rpush", "+ltrim", "+hincrby", "+del", "+llen", "+ping"];
    let check = |missing: &'static str| {
        let rights: Vec<&str> = all.iter().copied().filter(|r| *r != missing).collect();
        let user = format!("no{}", missing.trim_start_matches('+'));
        server.acl_user(&user, "pw", &["t:*"], &[], &rights).unwrap();
        format!("redis://{user}:pw@127.0.0.1:{}", server.port())
    };
    let admin = connect(&server.url()).await;
    admin.push_items(&[(BACKLOG.to_owned(), items(0..4))]).await.unwrap();

    for missing in ["+ltrim", "+rpush"] {
        let store = connect(&check(missing)).await;
        let e = store.take_batch(BACKLOG, IN_FLIGHT, 2).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission, "{missing}: {e}");
        assert_eq!((list(&server, BACKLOG), list(&server, IN_FLIGHT)), (items(0..4), vec![]), "{missing}");
    }
    let batch = admin.take_batch(BACKLOG, IN_FLIGHT, 2).await.unwrap();
    for missing in ["+hincrby", "+del"] {
        let store = connect(&check(missing)).await;
        let e = store.record_batch(IN_FLIGHT, PROCESSED, &batch.items).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission, "{missing}: {e}");
        assert!(!e.is_temporary(), "{e}");
        assert_eq!(list(&server, IN_FLIGHT), items(0..2), "{missing}: the batch stays in flight");
        assert_eq!(server.command(&["HLEN", PROCESSED]).unwrap(), Reply::Int(0), "{missing}: nothing counted");
    }
}

#[tokio::test]
async fn a_backlog_of_another_type_is_an_error_that_changes_nothing() {
    let server = RedisServer::start();
    let store = connect(&server.url()).await;
    server.command(&["SET", BACKLOG, "x"]).unwrap();
    let e = store.take_batch(BACKLOG, IN_FLIGHT, 2).await.unwrap_err();
    assert!(!e.is_temporary(), "WRONGTYPE is permanent: {e}");
    assert_eq!(server.command(&["EXISTS", IN_FLIGHT]).unwrap(), Reply::Int(0));
}

#[tokio::test]
async fn delete_keys_deletes_and_counts() {
    let server = RedisServer::start();
    let store = connect(&server.url()).await;
    server.command(&["SET", "t:x", "1"]).unwrap();
    assert_eq!(store.delete_keys(&["t:x", "t:y"]).await.unwrap(), 1);
    assert_eq!(store.delete_keys(&[]).await.unwrap(), 0);
    assert_eq!(server.command(&["EXISTS", "t:x"]).unwrap(), Reply::Int(0));
}

//! The list and hash helpers for owner work against a private redis-server: one
//! round trip each, exact replies.

mod support;

use std::sync::Arc;

use drain_core::testkit::RecordingObserver;
use test_servers::{RedisServer, Reply};

use support::{connect, round_trips};

#[tokio::test]
async fn pop_batch_mark_processed_and_lengths_are_one_round_trip_each() {
    let Some(server) = RedisServer::start() else { return };
    let observer = Arc::new(RecordingObserver::new());
    let store = connect(&server.url()).await.with_observer(observer.clone());
    let a = "t:backlog:{a}".to_owned();
    let b = "t:backlog:{b}".to_owned();
    let items: Vec<String> = (0..5).map(|i| format!("a-{i}")).collect();

    observer.clear();
    store.push_items(&[(a.clone(), items.clone()), (b.clone(), vec!["b-0".to_owned()])]).await.unwrap();
    assert_eq!(round_trips(&observer), 1);

    observer.clear();
    assert_eq!(store.list_lengths(&[a.clone(), b.clone(), "t:backlog:{none}".to_owned()]).await.unwrap(), [5, 1, 0]);
    assert_eq!(round_trips(&observer), 1);

    observer.clear();
    let first = store.pop_batch(&a, 3).await.unwrap();
    assert_eq!(first, items[..3]);
    assert_eq!(round_trips(&observer), 1);
    assert_eq!(store.pop_batch(&a, 3).await.unwrap(), items[3..]);
    assert!(store.pop_batch(&a, 3).await.unwrap().is_empty(), "an emptied list is gone");
    assert!(store.pop_batch(&a, 0).await.unwrap().is_empty());

    observer.clear();
    store.mark_processed("t:processed", &first).await.unwrap();
    store.mark_processed("t:processed", &first[..1]).await.unwrap();
    assert_eq!(round_trips(&observer), 2);
    assert_eq!(server.command(&["HGET", "t:processed", "a-0"]).unwrap(), Reply::Bulk(Some(b"2".to_vec())));
    assert_eq!(server.command(&["HGET", "t:processed", "a-2"]).unwrap(), Reply::Bulk(Some(b"1".to_vec())));
    assert_eq!(server.command(&["HLEN", "t:processed"]).unwrap(), Reply::Int(3));
}

#[tokio::test]
async fn pop_batch_on_a_non_list_is_an_error() {
    let Some(server) = RedisServer::start() else { return };
    let store = connect(&server.url()).await;
    server.command(&["SET", "t:str", "x"]).unwrap();
    let e = store.pop_batch("t:str", 2).await.unwrap_err();
    assert!(!e.is_temporary(), "WRONGTYPE is permanent: {e}");
}

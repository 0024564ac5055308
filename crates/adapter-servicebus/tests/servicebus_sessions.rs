//! Session-enabled queues on `test-servicebus`: [`SessionSource`] takes sessions
//! (next available or named), keeps each session's order, renews and reports session
//! locks, gives idle sessions back, keeps session state, and releases what it holds
//! when closed.

use std::collections::BTreeMap;
use std::time::Duration;

use adapter_servicebus::{
    AmqpSubmitter, Endpoint, ReleaseReason, SessionEventKind, SessionOptions, SessionSource, SourceOptions,
    SubmitterOptions,
};
use drain_core::ErrorKind;
use drain_core::ports::{Message, MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use test_servicebus::{Broker, BrokerConfig, QueueConfig};

const WAIT: Duration = Duration::from_millis(500);
const CTX: SubmitContext<'static> = SubmitContext { queue: "sb", fence: None };

fn broker(lock: Duration) -> Broker {
    let queue = QueueConfig { requires_session: true, lock_duration: lock, ..QueueConfig::default() };
    Broker::start(BrokerConfig::default().queue("orders", queue)).expect("starts")
}

fn endpoint(broker: &Broker) -> Endpoint {
    Endpoint::parse(&broker.entity_connection_string("orders")).expect("parses").endpoint
}

fn in_session(id: &str, session: &str) -> Message {
    let mut m = message(id);
    m.group_id = Some(session.to_owned());
    m
}

/// Send `per` messages to each session, interleaved: `s0-0, s1-0, …, s0-1, …`.
async fn feed(broker: &Broker, sessions: &[&str], per: usize) {
    let target = AmqpSubmitter::connect(endpoint(broker), SubmitterOptions::default()).await.expect("submitter");
    for i in 0..per {
        for s in sessions {
            target.submit(&in_session(&format!("{s}-{i}"), s), &CTX).await.expect("sent");
        }
    }
    target.close().await.unwrap();
}

fn options(max_sessions: usize, idle: Duration) -> SessionOptions {
    SessionOptions { max_sessions, idle_timeout: idle, source: SourceOptions::default(), ..SessionOptions::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_drained_in_order_each_message_once_one_session_per_batch() {
    let broker = broker(Duration::from_secs(30));
    feed(&broker, &["a", "b", "c"], 4).await;
    let source = SessionSource::connect(endpoint(&broker), options(2, Duration::from_millis(200))).await.unwrap();
    let mut events = source.session_events();
    let mut taken = source.sessions().await;
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for _ in 0..60 {
        if seen.values().map(Vec::len).sum::<usize>() == 12 {
            break;
        }
        let batch = source.receive(3, WAIT).await.expect("receive");
        let sessions: Vec<_> = batch.iter().filter_map(|d| d.message.group_id.clone()).collect();
        assert!(sessions.windows(2).all(|w| w[0] == w[1]), "one session per batch: {sessions:?}");
        for d in batch {
            let id = d.message.message_id.clone().expect("id").to_string();
            seen.entry(d.message.group_id.clone().expect("a session")).or_default().push(id);
            source.complete(d.handle).await.expect("complete");
        }
        assert!(source.sessions().await.len() <= 2, "at most two sessions at once");
    }
    for s in ["a", "b", "c"] {
        let want: Vec<String> = (0..4).map(|i| format!("{s}-{i}")).collect();
        assert_eq!(seen.get(s), Some(&want), "session {s}: in order, each once");
    }
    let mut idle = 0;
    while let Ok(ev) = events.try_recv() {
        match ev.kind {
            SessionEventKind::Accepted { locked_until } => {
                assert!(locked_until.is_some(), "the broker says until when");
                taken.push(ev.session);
            }
            SessionEventKind::Released(ReleaseReason::Idle) => idle += 1,
            _ => {}
        }
    }
    taken.sort();
    assert_eq!(taken, ["a", "b", "c"], "each session taken once");
    assert!(idle >= 1, "a drained session was given back for the next");
    source.close().await.unwrap();
    assert_eq!(broker.stats("orders").map(|s| (s.active, s.locked)), Some((0, 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_session_keeps_its_state_and_its_lock_is_renewed() {
    let broker = broker(Duration::from_millis(1_500));
    feed(&broker, &["x", "y"], 1).await;
    let named = SessionOptions { sessions: vec!["y".to_owned()], ..options(1, Duration::from_secs(30)) };
    let source = SessionSource::connect(endpoint(&broker), named).await.unwrap();
    let mut events = source.session_events();
    assert_eq!(source.sessions().await, ["y"]);
    let [d] = source.receive(5, WAIT).await.unwrap().try_into().unwrap();
    assert_eq!(d.message.message_id, Some("y-0".into()));
    let y = source.session("y").await.expect("held");
    assert_eq!(y.session_state().await.unwrap(), None);
    y.set_session_state(Some(b"step 2".to_vec())).await.unwrap();
    assert_eq!(y.session_state().await.unwrap().as_deref(), Some(&b"step 2"[..]));
    // Hold the message past two session lock durations: the renewals keep it.
    let mut renewed = 0;
    while renewed < 2 {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("an event").unwrap();
        assert_eq!(ev.session, "y");
        assert!(matches!(ev.kind, SessionEventKind::Renewed { .. }), "{ev:?}");
        renewed += 1;
    }
    source.complete(d.handle).await.expect("still locked through the session");
    source.close().await.unwrap();
    assert_eq!(broker.stats("orders").map(|s| s.active), Some(1), "x is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_lock_is_reported_and_the_session_given_back() {
    let broker = broker(Duration::from_secs(2));
    feed(&broker, &["z"], 2).await;
    let source = SessionSource::connect(endpoint(&broker), options(1, Duration::from_secs(30))).await.unwrap();
    let mut events = source.session_events();
    let [d, _] = source.receive(2, WAIT).await.unwrap().try_into().unwrap();
    // The broker's clock jumps past the session lock before the renewal.
    broker.advance(Duration::from_secs(5));
    let lost = loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("an event").unwrap();
        if let SessionEventKind::Lost(e) = ev.kind {
            break e;
        }
    };
    assert_eq!(lost.kind, ErrorKind::LockLost, "{lost}");
    let settle = source.complete(d.handle).await;
    assert!(matches!(&settle, Err(e) if e.kind == ErrorKind::LockLost), "{settle:?}");
    // The next receive gives the session back and takes it again: both come back, in order.
    let mut again = Vec::new();
    for _ in 0..10 {
        if again.len() == 2 {
            break;
        }
        for d in source.receive(2, WAIT).await.unwrap() {
            again.push(d.message.message_id.clone().unwrap().to_string());
            source.complete(d.handle).await.unwrap();
        }
    }
    assert_eq!(again, ["z-0", "z-1"]);
    source.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_close_a_sessions_prefetched_messages_go_back_at_once() {
    let broker = broker(Duration::from_secs(300));
    feed(&broker, &["p"], 4).await;
    let prefetching = SessionOptions {
        source: SourceOptions { prefetch: 4, ..SourceOptions::default() },
        ..options(1, Duration::from_secs(30))
    };
    let source = SessionSource::connect(endpoint(&broker), prefetching).await.unwrap();
    let [first] = source.receive(1, WAIT).await.unwrap().try_into().unwrap();
    source.complete(first.handle).await.unwrap();
    source.close().await.unwrap();
    // Five-minute locks: only the release lets another receiver take the session now.
    let next = SessionSource::connect(endpoint(&broker), options(1, Duration::from_secs(30))).await.unwrap();
    let got = next.receive(10, WAIT).await.unwrap();
    let ids: Vec<_> = got.iter().map(|d| d.message.message_id.clone().unwrap().to_string()).collect();
    assert_eq!(ids, ["p-1", "p-2", "p-3"]);
    assert!(got.iter().all(|d| d.delivery_count == 0));
    next.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_session_free_a_receive_waits_and_does_not_reconnect_each_time() {
    let broker = broker(Duration::from_secs(30));
    let source = SessionSource::connect(endpoint(&broker), options(2, Duration::from_secs(30))).await.unwrap();
    let before = broker.counters().connections;
    for _ in 0..5 {
        assert!(source.receive(1, Duration::from_millis(100)).await.unwrap().is_empty());
    }
    let tried = broker.counters().connections - before;
    assert!(tried <= 1, "{tried} connections for five receives within the pause");
    // A message arrives: the next look after the pause takes its session.
    feed(&broker, &["late"], 1).await;
    let mut got = Vec::new();
    for _ in 0..20 {
        got = source.receive(1, Duration::from_millis(200)).await.unwrap();
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1, "the session with a message was taken");
    source.complete(got[0].handle).await.unwrap();
    source.close().await.unwrap();
}

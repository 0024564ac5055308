//! AmqpSource and AmqpSubmitter against the real RabbitMQ (generic profile): the
//! drain-core contract suite, settlement outcomes, empty receives, credit.

mod support;

use std::time::Duration;

use adapter_servicebus::{AmqpSource, AmqpSubmitter, SourceOptions, SubmitterOptions};
use drain_core::ErrorKind;
use drain_core::ports::{Delivery, MessageId, MessageSource, PropertyValue, SubmitContext, Submitter};
use drain_core::testkit::{contract, message};
use support::{TestQueue, rabbit};

const WAIT: Duration = Duration::from_millis(500);
const CTX: SubmitContext<'static> = SubmitContext { queue: "test", fence: None };

async fn open(r: &support::Rabbit, q: &str) -> (AmqpSource, AmqpSubmitter) {
    let source = AmqpSource::connect(r.endpoint(q, None), SourceOptions::default()).await.expect("source");
    let feed = AmqpSubmitter::connect(r.endpoint(q, None), SubmitterOptions::default()).await.expect("submitter");
    (source, feed)
}

/// Receive until `want` arrived or a receive came back empty.
async fn take(source: &AmqpSource, want: usize) -> Vec<Delivery> {
    let mut out = Vec::new();
    while out.len() < want {
        let got = source.receive(want - out.len(), WAIT).await.expect("receive");
        if got.is_empty() {
            break;
        }
        out.extend(got);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_message_source_contract_with_its_dead_letter_queue() {
    let r = rabbit("contract");
    let q = TestQueue::declare(&r, None, true).await;
    let (source, feed) = open(&r, &q.name).await;
    let dlq_name = q.dlq.clone().expect("dlq");
    let dlq = AmqpSource::connect(r.endpoint(&dlq_name, None), SourceOptions::default()).await.expect("dlq source");
    contract::message_source(&source, &feed, Some(&dlq), WAIT).await.unwrap_or_else(|v| panic!("{v}"));
    for s in [&source, &dlq] {
        s.close().await.expect("close");
    }
    feed.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_abandon_and_dead_letter_do_what_they_say() {
    let r = rabbit("settlement");
    let q = TestQueue::declare(&r, None, true).await;
    let (source, feed) = open(&r, &q.name).await;
    let dlq = AmqpSource::connect(r.endpoint(q.dlq.as_deref().unwrap(), None), SourceOptions::default()).await.unwrap();

    let mut m = message("full");
    m.correlation_id = Some(MessageId::from("corr"));
    m.subject = Some("subj".into());
    m.properties.insert("tenant".into(), PropertyValue::String("t1".into()));
    m.properties.insert("n".into(), PropertyValue::Long(42));
    for msg in [m.clone(), message("abandon-me"), message("dead-letter-me")] {
        feed.submit(&msg, &CTX).await.expect("submit");
    }
    let got = take(&source, 3).await;
    assert_eq!(got.len(), 3);
    let by_id = |id: &str| got.iter().find(|d| d.message.message_id == Some(MessageId::from(id))).expect(id);
    assert_eq!(by_id("full").message, m, "every field arrives intact");
    assert_eq!(by_id("full").delivery_count, 0, "first delivery");

    source.complete(by_id("full").handle).await.expect("complete");
    source.abandon(by_id("abandon-me").handle).await.expect("abandon");
    source.dead_letter(by_id("dead-letter-me").handle, "Poison", "cannot parse").await.expect("dead-letter");

    let again = take(&source, 2).await;
    assert_eq!(again.len(), 1, "only the abandoned message comes back");
    assert_eq!(again[0].message.message_id, Some(MessageId::from("abandon-me")));
    assert_eq!(again[0].delivery_count, 1, "redelivery is counted");
    source.complete(again[0].handle).await.expect("complete");

    let dead = take(&dlq, 2).await;
    assert_eq!(dead.len(), 1, "the dead-lettered message is in the DLQ");
    assert_eq!(dead[0].message.message_id, Some(MessageId::from("dead-letter-me")));
    assert_eq!(dead[0].message.body, message("dead-letter-me").body);
    dlq.complete(dead[0].handle).await.expect("complete");

    // A second settlement of any of them is LockLost.
    for h in [by_id("full").handle, by_id("abandon-me").handle, again[0].handle] {
        assert_eq!(source.complete(h).await.unwrap_err().kind, ErrorKind::LockLost);
    }
    assert_eq!(source.renew_lock(again[0].handle).await.unwrap_err().kind, ErrorKind::Unsupported);
    assert!(!source.capabilities().lock_renewal);
    assert!(take(&source, 1).await.is_empty(), "nothing left");
    assert_eq!(q.ready(&q.name), 0);
    source.close().await.unwrap();
    dlq.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_queue_returns_empty_and_the_link_stays_usable() {
    let r = rabbit("empty");
    let q = TestQueue::declare(&r, None, false).await;
    let (source, feed) = open(&r, &q.name).await;
    // `max_wait` bounds the receive: it waits for messages until then (not much less)
    // and returns empty in time. Generous bounds: a loaded machine can only add delay.
    let max_wait = Duration::from_millis(200);
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let got = source.receive(10, max_wait).await.expect("receive on empty");
        let took = started.elapsed();
        assert!(got.is_empty(), "an empty queue gives an empty batch");
        assert!(took >= max_wait / 2, "the receive waited for messages: returned after {took:?}");
        assert!(took <= max_wait + Duration::from_secs(2), "the receive returned in time: {took:?}");
    }
    // Still usable after the timeouts: a message sent now arrives.
    feed.submit(&message("late"), &CTX).await.unwrap();
    let got = source.receive(10, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got.len(), 1);
    source.complete(got[0].handle).await.unwrap();
    assert_eq!(source.receive(0, WAIT).await.unwrap().len(), 0, "max 0 asks for nothing");
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_runs_while_another_receive_waits() {
    let r = rabbit("concurrent-settle");
    let q = TestQueue::declare(&r, None, true).await;
    let (source, feed) = open(&r, &q.name).await;
    feed.submit(&message("a"), &CTX).await.unwrap();
    feed.submit(&message("c"), &CTX).await.unwrap();
    let got = take(&source, 2).await;
    assert_eq!(got.len(), 2);
    // A long receive waits on the empty queue while we complete one message (straight
    // through the disposer) and dead-letter the other (through the link task).
    let (waiting, settled) = tokio::join!(source.receive(5, Duration::from_secs(3)), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t = tokio::time::Instant::now();
        source.complete(got[0].handle).await.expect("complete during receive");
        let complete = t.elapsed();
        let t = tokio::time::Instant::now();
        source.dead_letter(got[1].handle, "Test", "during a receive").await.expect("dead-letter during receive");
        let dead_letter = t.elapsed();
        feed.submit(&message("b"), &CTX).await.unwrap();
        (complete, dead_letter)
    });
    assert!(settled.0 < Duration::from_secs(1), "complete did not wait for the receive ({:?})", settled.0);
    assert!(settled.1 < Duration::from_secs(1), "dead-letter did not wait for the receive ({:?})", settled.1);
    let waiting = waiting.unwrap();
    assert_eq!(waiting.len(), 1, "the waiting receive gets the message sent meanwhile");
    assert_eq!(waiting[0].message.message_id, Some(MessageId::from("b")));
    source.complete(waiting[0].handle).await.unwrap();
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_bounds_what_is_locked_and_close_returns_the_rest() {
    let r = rabbit("credit");
    let q = TestQueue::declare(&r, None, false).await;
    let (source, feed) = open(&r, &q.name).await;
    for i in 0..10 {
        feed.submit(&message(&format!("m{i}")), &CTX).await.unwrap();
    }
    let got = source.receive(3, WAIT).await.unwrap();
    assert_eq!(got.len(), 3, "receive(3) gets 3 when 10 wait");
    // Without prefetch, the other 7 stay in the queue for anyone else.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(q.ready(&q.name), 7, "no credit beyond what was asked");
    source.complete(got[0].handle).await.unwrap();
    // Closing detaches; the two unsettled deliveries go back to the queue.
    source.close().await.unwrap();
    assert_eq!(source.receive(1, WAIT).await.unwrap_err().kind, ErrorKind::Closed);
    assert_eq!(source.complete(got[1].handle).await.unwrap_err().kind, ErrorKind::Closed);
    let other = AmqpSource::connect(r.endpoint(&q.name, None), SourceOptions::default()).await.unwrap();
    let rest = take(&other, 10).await;
    assert_eq!(rest.len(), 9, "the unsettled two came back");
    for d in &rest {
        other.complete(d.handle).await.unwrap();
    }
    other.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetch_keeps_credit_open_between_receives() {
    let r = rabbit("prefetch");
    let q = TestQueue::declare(&r, None, false).await;
    let options = SourceOptions { prefetch: 5, ..SourceOptions::default() };
    let source = AmqpSource::connect(r.endpoint(&q.name, None), options).await.unwrap();
    let feed = AmqpSubmitter::connect(r.endpoint(&q.name, None), SubmitterOptions::default()).await.unwrap();
    assert!(source.receive(1, Duration::from_millis(100)).await.unwrap().is_empty());
    for i in 0..8 {
        feed.submit(&message(&format!("p{i}")), &CTX).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(q.ready(&q.name), 3, "5 were pushed ahead into the prefetch buffer");
    let got = take(&source, 8).await;
    assert_eq!(got.len(), 8);
    for d in &got {
        source.complete(d.handle).await.unwrap();
    }
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_are_typed_and_keep_secrets() {
    let r = rabbit("connect-errors");
    // Wrong password: Auth, permanent, and the password is not in the message.
    let mut bad = r.endpoint("whatever", None);
    if let adapter_servicebus::Credentials::Plain { password, .. } = &mut bad.credentials {
        *password = adapter_servicebus::Secret::new("wr0ng-s3cret");
    }
    let e = AmqpSource::connect(bad, SourceOptions::default()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
    assert!(!e.is_temporary());
    assert!(!e.message.contains("wr0ng-s3cret"), "{e}");
    // A queue that does not exist: NotFound.
    let e =
        AmqpSource::connect(r.endpoint("drain-test-no-such-queue", None), SourceOptions::default()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    let e = AmqpSubmitter::connect(r.endpoint("drain-test-no-such-queue", None), SubmitterOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    // Nothing listening: a temporary connection error.
    let mut closed = r.endpoint("q", None);
    closed.port = 1;
    let e = AmqpSource::connect(closed, SourceOptions::default()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert!(e.is_temporary());
    // No queue: Config.
    let e = AmqpSource::connect(
        adapter_servicebus::Endpoint { entity: None, ..r.endpoint("q", None) },
        SourceOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
}

/// With `fence_property`, a submit under a lease carries the fence as an application
/// property (a long) through the real broker; without a fence, or without the
/// option, the message goes out as it came in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_rides_along_as_an_application_property_when_asked() {
    let r = rabbit("fence");
    let q = TestQueue::declare(&r, None, false).await;
    let source = AmqpSource::connect(r.endpoint(&q.name, None), SourceOptions::default()).await.expect("source");
    let options = SubmitterOptions { fence_property: Some("drain-fence".into()), ..SubmitterOptions::default() };
    let fenced = AmqpSubmitter::connect(r.endpoint(&q.name, None), options).await.expect("submitter");
    let plain = AmqpSubmitter::connect(r.endpoint(&q.name, None), SubmitterOptions::default()).await.expect("plain");
    let fence = drain_core::ports::Fence::new(drain_core::ports::LeaseName::queue("test"), 42);
    let held = SubmitContext { queue: "test", fence: Some(&fence) };
    fenced.submit(&message("fenced"), &held).await.expect("submit");
    fenced.submit(&message("no-lease"), &CTX).await.expect("submit");
    plain.submit(&message("plain"), &held).await.expect("submit");
    let mut got: Vec<(String, Option<PropertyValue>)> = take(&source, 3)
        .await
        .into_iter()
        .map(|d| (d.message.message_id.expect("id").to_string(), d.message.properties.get("drain-fence").cloned()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("fenced".to_owned(), Some(PropertyValue::Long(42))),
            ("no-lease".to_owned(), None),
            ("plain".to_owned(), None),
        ]
    );
    source.close().await.expect("close");
    fenced.close().await.expect("close");
    plain.close().await.expect("close");
}

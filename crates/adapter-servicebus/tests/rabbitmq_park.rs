//! `AmqpSource::park` against the real RabbitMQ: a parked source holds no credit and
//! no message (the broker counts nothing unacknowledged for it), and the next receive
//! attaches again and gets them.

mod support;

use std::time::{Duration, Instant};

use adapter_servicebus::{AmqpSource, AmqpSubmitter, SourceOptions, SubmitterOptions};
use drain_core::ports::{MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use support::{TestQueue, rabbit};

const CTX: SubmitContext<'static> = SubmitContext { queue: "test", fence: None };

/// Poll the broker's counts until they equal `want` (bounded): its counters trail the
/// frames by a few milliseconds.
fn await_counts(q: &TestQueue, want: (u64, u64)) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = q.counts(&q.name);
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_source_holds_nothing_and_the_next_receive_attaches_again() {
    let r = rabbit("park");
    let q = TestQueue::declare(&r, None, false).await;
    let options = SourceOptions { prefetch: 32, ..SourceOptions::default() };
    let source = AmqpSource::connect(r.endpoint(&q.name, None), options).await.expect("source");
    let feed = AmqpSubmitter::connect(r.endpoint(&q.name, None), SubmitterOptions::default()).await.expect("feed");

    // An empty receive returns early with its credit window still open: what arrives
    // next is pushed to this source and sits there, unacknowledged.
    assert!(source.receive(32, Duration::from_millis(200)).await.expect("receive").is_empty());
    for i in 0..10 {
        feed.submit(&message(&format!("m-{i}")), &CTX).await.expect("submit");
    }
    assert_eq!(await_counts(&q, (0, 10)), (0, 10), "the open credit took every message");

    assert!(source.park().await, "nothing is handed out: the source parks");
    assert_eq!(await_counts(&q, (10, 0)), (10, 0), "parked, it holds none of them");
    for i in 10..20 {
        feed.submit(&message(&format!("m-{i}")), &CTX).await.expect("submit");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(q.counts(&q.name), (20, 0), "nor any that arrive while it is parked");

    // The next receive attaches again and gets them; a source in use does not park.
    let mut got = Vec::new();
    while got.len() < 20 {
        let batch = source.receive(20 - got.len(), Duration::from_secs(5)).await.expect("receive after park");
        assert!(!batch.is_empty(), "the messages come back after a park");
        got.extend(batch);
    }
    assert!(!source.park().await, "deliveries are handed out and not settled: no park");
    for d in &got {
        source.complete(d.handle).await.expect("complete after park");
    }
    let mut ids: Vec<String> =
        got.iter().filter_map(|d| d.message.message_id.as_ref().map(ToString::to_string)).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20, "each message once");
    assert_eq!(await_counts(&q, (0, 0)), (0, 0));
    assert!(source.park().await, "settled: it parks again");
    source.close().await.expect("close");
    feed.close().await.expect("close");
}

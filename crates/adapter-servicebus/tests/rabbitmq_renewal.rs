//! Automatic lock renewal on the generic profile (RabbitMQ): the broker holds a
//! delivery until it is settled or the link ends, so the source starts no renewal,
//! reports no lock event, and settles as usual.

mod support;

use std::time::Duration;

use adapter_servicebus::{AmqpSource, AmqpSubmitter, Profile, SourceOptions, SubmitterOptions};
use drain_core::ports::{MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use support::{TestQueue, rabbit};
use tokio::sync::broadcast::error::TryRecvError;

const WAIT: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_deliveries_get_no_automatic_lock_renewal() {
    let r = rabbit("no-renewal");
    let q = TestQueue::declare(&r, None, false).await;
    // A short maximum: a renewer started by mistake would have acted (and failed with
    // `Unsupported`, an event) well within the wait below.
    let options = SourceOptions { max_lock_renewal: Duration::from_secs(1), ..SourceOptions::default() };
    let source = AmqpSource::connect(r.endpoint(&q.name, None), options).await.expect("source");
    assert_eq!(source.profile(), Profile::Generic);
    assert!(!source.capabilities().lock_renewal, "the capability flag says there is nothing to renew");
    let mut events = source.lock_events();

    let feed = AmqpSubmitter::connect(r.endpoint(&q.name, None), SubmitterOptions::default()).await.expect("feed");
    let ctx = SubmitContext { queue: "renewal", fence: None };
    for id in ["a", "b", "c"] {
        feed.submit(&message(id), &ctx).await.expect("submit");
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        let batch = source.receive(3 - got.len(), WAIT).await.expect("receive");
        assert!(!batch.is_empty(), "the three messages arrive");
        got.extend(batch);
    }
    assert_eq!(source.renewing(), 0, "no renewal started on receive");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(events.try_recv().unwrap_err(), TryRecvError::Empty, "no lock event on RabbitMQ");
    assert_eq!(source.renewing(), 0);

    for d in &got {
        source.complete(d.handle).await.expect("complete: the delivery is still held");
    }
    assert!(source.receive(1, WAIT).await.expect("receive").is_empty(), "all three were completed once");
    assert_eq!(events.try_recv().unwrap_err(), TryRecvError::Empty);
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

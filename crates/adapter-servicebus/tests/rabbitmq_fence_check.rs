//! An example consumer of drain's target queue that refuses the messages of a holder
//! that lost its lease: drain's target writes each tick's fence as an application
//! property (`SubmitterOptions::fence_property`, the binary's
//! `DRAIN_TARGET_FENCE_PROPERTY`), and the consumer checks it with drain-core's
//! `FenceCheck` before it applies a message, on the real RabbitMQ (AMQP 1.0).
//!
//! `consume` is the part an embedder copies: receive, check, apply and complete an
//! accepted message, dead-letter a refused one (so it stays on record), and leave a
//! message the check could not decide (the marks store down) locked, to come back.

mod support;

use std::sync::Arc;
use std::time::Duration;

use adapter_servicebus::{AmqpSource, AmqpSubmitter, SourceOptions, SubmitterOptions};
use drain_core::fence::{FenceCheck, FenceDecision};
use drain_core::memory::MemoryStore;
use drain_core::ports::{Clock, FenceMarks, Message, MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use drain_runtime::TokioClock;
use fe2o3_amqp::types::messaging::{ApplicationProperties, Batch, Body, Data, Message as AmqpMessage, Properties};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Value};
use support::{TestQueue, rabbit, send_raw};

const PROPERTY: &str = "drain-fence";

/// Receive up to `want` messages from the target queue and apply each the fence
/// check accepts; answer the ids applied, in order, and the refusals.
async fn consume<M: FenceMarks>(
    source: &AmqpSource,
    check: &FenceCheck<'_, M>,
    queue: &str,
    want: usize,
) -> (Vec<String>, Vec<(String, FenceDecision)>) {
    let (mut applied, mut refused) = (Vec::new(), Vec::new());
    let mut seen = 0;
    while seen < want {
        let batch = source.receive(want - seen, Duration::from_secs(2)).await.expect("receive");
        assert!(!batch.is_empty(), "{seen} of {want} messages arrived");
        for delivery in batch {
            seen += 1;
            let id = delivery.message.message_id.as_ref().map(ToString::to_string).unwrap_or_default();
            match check.check(queue, &delivery.message).await {
                Ok(FenceDecision::Accept { .. }) => {
                    applied.push(id); // apply the message here, then complete it
                    source.complete(delivery.handle).await.expect("complete");
                }
                Ok(why) => {
                    let reason = format!("{why:?}");
                    source.dead_letter(delivery.handle, "RefusedFence", &reason).await.expect("dead-letter");
                    refused.push((id, why));
                }
                // The marks cannot answer: decide nothing, the message comes back.
                Err(e) => panic!("the marks store failed: {e}"),
            }
        }
    }
    (applied, refused)
}

/// A message as a foreign producer sends it, the fence as `value`.
fn raw(id: &str, value: SimpleValue) -> AmqpMessage<Body<Value>> {
    let mut props = ApplicationProperties::default();
    props.0.insert(PROPERTY.to_owned(), value);
    AmqpMessage {
        header: None,
        delivery_annotations: None,
        message_annotations: None,
        properties: Some(Properties { message_id: Some(id.to_owned().into()), ..Properties::default() }),
        application_properties: Some(props),
        body: Body::Data(Batch::new(vec![Data(Binary::from(id.as_bytes().to_vec()))])),
        footer: None,
    }
}

async fn submit(to: &AmqpSubmitter, m: Message, fence: Option<u64>) {
    let fence = fence.map(|n| drain_core::ports::Fence::new(drain_core::ports::LeaseName::queue("requests"), n));
    to.submit(&m, &SubmitContext { queue: "requests", fence: fence.as_ref() }).await.expect("submit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_refuses_what_a_holder_that_lost_its_lease_submitted() {
    let r = rabbit("fence-check");
    let q = TestQueue::declare(&r, None, true).await;
    let options = || SubmitterOptions { fence_property: Some(PROPERTY.into()), ..SubmitterOptions::default() };
    // Two ticks' targets: holder A (fence 1), paused past its TTL; holder B (fence 2).
    let a = AmqpSubmitter::connect(r.endpoint(&q.name, None), options()).await.expect("submitter a");
    let b = AmqpSubmitter::connect(r.endpoint(&q.name, None), options()).await.expect("submitter b");
    submit(&a, message("a1"), Some(1)).await;
    submit(&b, message("b1"), Some(2)).await;
    submit(&a, message("a2-after-the-pause"), Some(1)).await;
    // Other producers: the fence as text and as a ulong, a property that is no fence.
    send_raw(&r, &q.name, vec![raw("s3", SimpleValue::String("3".into())), raw("u2", SimpleValue::Ulong(2))]).await;
    submit(&b, message("no-lease"), None).await;
    send_raw(&r, &q.name, vec![raw("odd", SimpleValue::String("three".into()))]).await;

    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let marks = MemoryStore::new(clock);
    let check = FenceCheck::new(&marks, PROPERTY);
    let source = AmqpSource::connect(r.endpoint(&q.name, None), SourceOptions::default()).await.expect("source");
    let (applied, refused) = consume(&source, &check, &q.name, 7).await;

    assert_eq!(applied, ["a1", "b1", "s3", "no-lease"]);
    let refused: Vec<(&str, &FenceDecision)> = refused.iter().map(|(id, why)| (id.as_str(), why)).collect();
    assert_eq!(
        refused,
        [
            ("a2-after-the-pause", &FenceDecision::Stale { fence: 1, mark: 2 }),
            ("u2", &FenceDecision::Stale { fence: 2, mark: 3 }),
            ("odd", &FenceDecision::NotAFence(drain_core::ports::PropertyValue::String("three".into()))),
        ]
    );
    assert_eq!(marks.mark(&q.name), Some(3));
    let dlq = q.dlq.as_deref().expect("a dead-letter queue");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while q.counts(dlq).0 < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(q.counts(dlq), (3, 0), "the refused messages are on record in the dead-letter queue");
    assert_eq!(q.counts(&q.name), (0, 0), "nothing left on the target queue");
    source.close().await.expect("close");
    a.close().await.expect("close");
    b.close().await.expect("close");
}

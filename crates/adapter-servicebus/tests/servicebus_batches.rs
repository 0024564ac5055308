//! Submits queued together go to Service Bus as batches (`src/batch.rs`), on
//! `test-servicebus`: one transfer for the messages of one session, each message
//! kept once and in order with duplicate detection applied to each; messages of
//! other sessions go in batches of their own; a batch the broker refuses is sent
//! again one message at a time, so only the refused message's submit fails. RabbitMQ
//! (the generic profile) gets no batches: `tests/rabbitmq_drain.rs` sends there.
//!
//! The tests run on a current-thread runtime, so the submitter's task first runs
//! when every submit of a `join_all` is queued: the batches are deterministic.

use std::time::Duration;

use adapter_servicebus::{AmqpSubmitter, Endpoint, SubmitterOptions};
use drain_core::ErrorKind;
use drain_core::ports::{Message, SubmitContext, Submitter};
use drain_core::testkit::message;
use futures::future::join_all;
use test_servicebus::{
    Broker, BrokerConfig, CorrelationFilter, Filter, QueueConfig, Rule, SubQueue, SubscriptionConfig, TopicConfig,
};

const CTX: SubmitContext<'static> = SubmitContext { queue: "sb", fence: None };

fn endpoint(broker: &Broker, entity: &str) -> Endpoint {
    Endpoint::parse(&broker.entity_connection_string(entity)).expect("parses").endpoint
}

fn in_session(id: &str, session: Option<&str>) -> Message {
    let mut m = message(id);
    m.group_id = session.map(str::to_owned);
    m
}

fn ids(broker: &Broker, queue: &str) -> Vec<String> {
    broker.messages(queue, SubQueue::Main).into_iter().filter_map(|m| m.message_id).collect()
}

#[tokio::test]
async fn submits_queued_together_go_out_as_one_batch_per_session_each_message_once_in_order() {
    let dedup = QueueConfig { duplicate_detection: Some(Duration::from_secs(60)), ..QueueConfig::default() };
    let broker = Broker::start(BrokerConfig::default().queue("q", dedup)).expect("starts");
    let target = AmqpSubmitter::connect(endpoint(&broker, "q"), SubmitterOptions::default()).await.expect("target");
    // 130 messages without a session (64 + 64 + 2: the batch's limit), then a
    // session's 3, one of them a duplicate of an id sent before.
    let mut messages: Vec<Message> = (0..130).map(|i| in_session(&format!("m{i}"), None)).collect();
    messages.extend([in_session("s0", Some("s")), in_session("m7", Some("s")), in_session("s1", Some("s"))]);
    let before = broker.counters();
    let results = join_all(messages.iter().map(|m| target.submit(m, &CTX))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let after = broker.counters();
    assert_eq!(
        (after.transfers_received - before.transfers_received, after.batches_received - before.batches_received),
        (4, 4),
        "three batches of the messages without a session (64, 64, 2) and one of the session's"
    );
    let mut want: Vec<String> = (0..130).map(|i| format!("m{i}")).collect();
    want.extend(["s0".to_owned(), "s1".to_owned()]);
    assert_eq!(ids(&broker, "q"), want, "each once, in order; the duplicate m7 dropped");
    target.close().await.unwrap();
}

#[tokio::test]
async fn a_batch_the_broker_refuses_is_sent_again_one_message_at_a_time() {
    // A message with subject "needs-session" is routed to a subscription that
    // requires sessions; without a session id the topic refuses it, and with it the
    // batch it came in, whole.
    let filter = CorrelationFilter { subject: Some("needs-session".to_owned()), ..CorrelationFilter::default() };
    let strict = SubscriptionConfig {
        name: "strict".to_owned(),
        queue: QueueConfig { requires_session: true, ..QueueConfig::default() },
        rules: vec![Rule { name: "subject".to_owned(), filter: Filter::Correlation(Box::new(filter)) }],
    };
    let all =
        SubscriptionConfig { name: "all".to_owned(), queue: QueueConfig::default(), rules: vec![Rule::default_rule()] };
    let topic = TopicConfig { name: "events".to_owned(), subscriptions: vec![strict, all], ..TopicConfig::default() };
    let broker = Broker::start(BrokerConfig::default().topic(topic)).expect("starts");
    let target =
        AmqpSubmitter::connect(endpoint(&broker, "events"), SubmitterOptions::default()).await.expect("target");
    let mut refused = message("b");
    refused.subject = Some("needs-session".to_owned());
    let messages = [message("a"), refused, message("c")];
    let before = broker.counters();
    let results = join_all(messages.iter().map(|m| target.submit(m, &CTX))).await;
    let after = broker.counters();
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    let err = results[1].as_ref().expect_err("b alone is refused");
    assert_ne!(err.kind, ErrorKind::Timeout, "{err}");
    assert_eq!(
        (after.transfers_received - before.transfers_received, after.batches_received - before.batches_received),
        (4, 1),
        "one refused batch of three, then each message alone"
    );
    assert_eq!(ids(&broker, "events/Subscriptions/all"), ["a", "c"]);
    target.close().await.unwrap();
}

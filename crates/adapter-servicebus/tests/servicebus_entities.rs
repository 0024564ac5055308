//! Service Bus entity shapes beyond a plain queue, on `test-servicebus`: a topic as
//! the target and a subscription (and its dead-letter queue) as the source, a
//! `SharedAccessSignature=` connection string, and a closing source giving back
//! what it had prefetched at once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use drain_core::ErrorKind;
use drain_core::ports::{Delivery, MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use test_servicebus::{Broker, BrokerConfig, QueueConfig, Rule, SubQueue, SubscriptionConfig, TopicConfig};

const WAIT: Duration = Duration::from_secs(2);
const CTX: SubmitContext<'static> = SubmitContext { queue: "sb", fence: None };

fn endpoint(broker: &Broker, entity: &str) -> Endpoint {
    Endpoint::parse(&broker.entity_connection_string(entity)).expect("parses").endpoint
}

async fn receive_n(source: &AmqpSource, n: usize) -> Vec<Delivery> {
    let mut got = Vec::new();
    for _ in 0..20 {
        if got.len() >= n {
            break;
        }
        got.extend(source.receive(n - got.len(), WAIT).await.expect("receive"));
    }
    assert_eq!(got.len(), n, "all {n} arrived");
    got
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_is_a_target_and_its_subscription_and_dead_letters_are_sources() {
    let sub = |name: &str| SubscriptionConfig {
        name: name.to_owned(),
        queue: QueueConfig::default(),
        rules: vec![Rule::default_rule()],
    };
    let topic = TopicConfig {
        name: "events".to_owned(),
        subscriptions: vec![sub("audit"), sub("billing")],
        ..Default::default()
    };
    let broker = Broker::start(BrokerConfig::default().topic(topic)).expect("starts");
    let feed =
        AmqpSubmitter::connect(endpoint(&broker, "events"), SubmitterOptions::default()).await.expect("topic target");
    for id in ["a", "b"] {
        feed.submit(&message(id), &CTX).await.expect("the topic accepts it");
    }
    let audit = AmqpSource::connect(endpoint(&broker, "events/Subscriptions/audit"), SourceOptions::default())
        .await
        .expect("a subscription is a source");
    let got = receive_n(&audit, 2).await;
    let ids: Vec<_> = got.iter().map(|d| d.message.message_id.clone()).collect();
    assert_eq!(ids, vec![Some("a".into()), Some("b".into())]);
    audit.complete(got[0].handle).await.unwrap();
    audit.dead_letter(got[1].handle, "Bad", "b is bad").await.unwrap();
    assert_eq!(
        broker.messages("events/Subscriptions/billing", SubQueue::Main).len(),
        2,
        "each subscription has a copy"
    );

    let dead =
        AmqpSource::connect(endpoint(&broker, "events/Subscriptions/audit/$DeadLetterQueue"), SourceOptions::default())
            .await
            .expect("a subscription's dead letters are a source");
    let [d] = receive_n(&dead, 1).await.try_into().unwrap();
    assert_eq!(d.message.message_id, Some("b".into()));
    dead.complete(d.handle).await.unwrap();
    for s in [&audit, &dead] {
        s.close().await.unwrap();
    }
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_access_signature_connection_string_connects_until_its_token_expires() {
    let broker = Broker::start(BrokerConfig::default().queue("requests", QueueConfig::default())).expect("starts");
    let addr = broker.addr();
    let with_token = |token: String| {
        let s = format!(
            "Endpoint=sb://{addr};SharedAccessSignature={token};UseDevelopmentEmulator=true;EntityPath=requests"
        );
        Endpoint::parse(&s).expect("parses").endpoint
    };
    let good = with_token(broker.sas_token("requests", unix_now() + 3_600));
    let feed = AmqpSubmitter::connect(good.clone(), SubmitterOptions::default()).await.expect("the token is accepted");
    feed.submit(&message("m"), &CTX).await.unwrap();
    let source = AmqpSource::connect(good, SourceOptions::default()).await.expect("the token is accepted");
    let [d] = receive_n(&source, 1).await.try_into().unwrap();
    source.complete(d.handle).await.unwrap();
    source.close().await.unwrap();
    feed.close().await.unwrap();

    let expired = with_token(broker.sas_token("requests", unix_now() - 10));
    let err = AmqpSource::connect(expired, SourceOptions::default()).await.expect_err("an expired token");
    assert_eq!(err.kind, ErrorKind::Auth, "{err}");
    assert!(err.message.contains("expired"), "{err}");
    assert!(!err.message.contains("sig="), "the token is never shown: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_close_prefetched_and_unfinished_messages_go_back_at_once() {
    // Locks of five minutes: only a release brings them back within the test.
    let queue = QueueConfig { lock_duration: Duration::from_secs(300), ..QueueConfig::default() };
    let broker = Broker::start(BrokerConfig::default().queue("requests", queue)).expect("starts");
    for i in 0..5 {
        broker.send("requests", b"x", Some(&format!("m{i}")));
    }
    let options = SourceOptions { prefetch: 5, ..SourceOptions::default() };
    let source = AmqpSource::connect(endpoint(&broker, "requests"), options).await.unwrap();
    let [first] = receive_n(&source, 1).await.try_into().unwrap();
    source.complete(first.handle).await.unwrap();
    let [unfinished] = receive_n(&source, 1).await.try_into().unwrap();
    // The rest arrived on the open credit and wait in the source, locked to it.
    source.close().await.unwrap();
    assert!(matches!(source.complete(unfinished.handle).await, Err(e) if e.kind == ErrorKind::Closed));

    let next = AmqpSource::connect(endpoint(&broker, "requests"), SourceOptions::default()).await.unwrap();
    let got = receive_n(&next, 4).await;
    let ids: Vec<_> = got.iter().filter_map(|d| d.message.message_id.clone()).map(|m| m.to_string()).collect();
    assert_eq!(ids, ["m1", "m2", "m3", "m4"], "in order, the unfinished one first");
    assert!(got.iter().all(|d| d.delivery_count == 0), "a release counts no delivery");
    for d in got {
        next.complete(d.handle).await.unwrap();
    }
    next.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_lock_that_ran_out_is_counted_not_dropped_in_silence() {
    let queue = QueueConfig { lock_duration: Duration::from_millis(300), ..QueueConfig::default() };
    let broker = Broker::start(BrokerConfig::default().queue("requests", queue)).expect("starts");
    for i in 0..3 {
        broker.send("requests", b"x", Some(&format!("m{i}")));
    }
    let options = SourceOptions { prefetch: 3, max_lock_renewal: Duration::ZERO, ..SourceOptions::default() };
    let source = AmqpSource::connect(endpoint(&broker, "requests"), options).await.unwrap();
    let [first] = receive_n(&source, 1).await.try_into().unwrap();
    source.complete(first.handle).await.unwrap();
    // The other two wait in the source past their locks.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = receive_n(&source, 2).await;
    assert!(source.locks_lost_waiting() >= 2, "both expired locks were counted: {}", source.locks_lost_waiting());
    assert!(again.iter().all(|d| d.delivery_count >= 1), "redelivered by the broker");
    for d in again {
        // Their 300 ms locks may run out again on a loaded machine: that is told, too.
        match source.complete(d.handle).await {
            Ok(()) => {}
            Err(e) if e.kind == ErrorKind::LockLost => {}
            Err(e) => panic!("completing a redelivery: {e:?}"),
        }
    }
    source.close().await.unwrap();
}

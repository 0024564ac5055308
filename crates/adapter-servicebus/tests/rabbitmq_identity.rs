//! Message identity through a resubmit on the real RabbitMQ (AMQP 1.0): a foreign
//! producer's message, received by the adapter's source and resubmitted by its
//! submitter (what a tick does), reaches a foreign consumer with its ids of the same
//! AMQP types (ulong, uuid, binary, string), every property and header field the
//! target accepts, and the sender's message annotations; only what the broker owns
//! is left behind.

mod support;

use std::time::Duration;

use adapter_servicebus::{AmqpSource, AmqpSubmitter, SourceOptions, SubmitterOptions};
use drain_core::ports::{Message, MessageId as Id, MessageSource, PropertyValue, SubmitContext, Submitter};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{
    Batch, Body, Data, Header, Message as AmqpMessage, MessageAnnotations, MessageId, Priority, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, Symbol, Timestamp, Uuid, Value};
use support::{TestQueue, rabbit, receive_raw, send_raw};

const UUID: [u8; 16] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];

/// What a foreign producer sends: every field set, the id of type `id`.
fn produced(id: MessageId, correlation: MessageId) -> AmqpMessage<Body<Value>> {
    let mut annotations = MessageAnnotations::default();
    annotations.0.insert(OwnedKey::from("x-opt-partition-key"), Value::String("partition-7".into()));
    annotations.0.insert(OwnedKey::from("app-trace"), Value::Symbol(Symbol::from("trace-1")));
    annotations.0.insert(OwnedKey::from("app-when"), Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000)));
    AmqpMessage {
        header: Some(Header { durable: true, priority: Priority(7), ttl: Some(600_000), ..Header::default() }),
        delivery_annotations: None,
        message_annotations: Some(annotations),
        properties: Some(Properties {
            message_id: Some(id),
            correlation_id: Some(correlation),
            to: Some("orders".into()),
            subject: Some("order.created".into()),
            reply_to: Some("order-replies".into()),
            content_type: Some(Symbol::from("application/json")),
            content_encoding: Some(Symbol::from("gzip")),
            absolute_expiry_time: Some(Timestamp::from_milliseconds(4_102_444_800_000)),
            creation_time: Some(Timestamp::from_milliseconds(1_700_000_000_123)),
            group_id: Some("session-42".into()),
            group_sequence: Some(3),
            reply_to_group_id: Some("reply-session-9".into()),
            ..Properties::default()
        }),
        application_properties: None,
        body: Body::Data(Batch::new(vec![Data(Binary::from(b"{\"order\":1}".to_vec()))])),
        footer: None,
    }
}

fn annotation(m: &AmqpMessage<Body<Value>>, key: &str) -> Option<Value> {
    m.message_annotations.as_ref().and_then(|a| a.0.get(&OwnedKey::from(key)).cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_headers_and_annotations_survive_a_resubmit_with_their_types() {
    let r = rabbit("identity");
    let (source_q, target_q) = (TestQueue::declare(&r, None, false).await, TestQueue::declare(&r, None, false).await);
    let ids = [
        (MessageId::Ulong(42), MessageId::Uuid(Uuid::from(UUID))),
        (MessageId::Uuid(Uuid::from(UUID)), MessageId::Binary(Binary::from(vec![0xde, 0xad]))),
        (MessageId::Binary(Binary::from(vec![0xbe, 0xef, 0x00])), MessageId::Ulong(7)),
        (MessageId::String("42".into()), MessageId::String("corr-42".into())),
    ];
    let sent: Vec<AmqpMessage<Body<Value>>> = ids.iter().map(|(id, c)| produced(id.clone(), c.clone())).collect();
    send_raw(&r, &source_q.name, sent.clone()).await;

    // The adapter's view, then the resubmit a tick makes.
    let source = AmqpSource::connect(r.endpoint(&source_q.name, None), SourceOptions::default()).await.expect("source");
    let target =
        AmqpSubmitter::connect(r.endpoint(&target_q.name, None), SubmitterOptions::default()).await.expect("target");
    let mut seen: Vec<Message> = Vec::new();
    for _ in 0..20 {
        for d in source.receive(ids.len(), Duration::from_millis(500)).await.expect("receive") {
            target.submit(&d.message, &SubmitContext { queue: "identity", fence: None }).await.expect("submit");
            source.complete(d.handle).await.expect("complete");
            seen.push(d.message);
        }
        if seen.len() == ids.len() {
            break;
        }
    }
    assert_eq!(seen.len(), ids.len());
    let typed: Vec<Option<Id>> = seen.iter().map(|m| m.message_id.clone()).collect();
    assert!(typed.contains(&Some(Id::Ulong(42))), "a ulong id reaches drain-core as a ulong: {typed:?}");
    assert!(typed.contains(&Some(Id::String("42".into()))), "and the string \"42\" as a string: {typed:?}");
    let first = seen.iter().find(|m| m.message_id == Some(Id::Ulong(42))).expect("the ulong one");
    assert_eq!(first.correlation_id, Some(Id::Uuid(UUID)));
    assert_eq!(
        (first.reply_to.as_deref(), first.group_id.as_deref(), first.content_encoding.as_deref()),
        (Some("order-replies"), Some("session-42"), Some("gzip"))
    );
    assert_eq!((first.time_to_live, first.priority), (Some(Duration::from_secs(600)), Some(7)));
    assert_eq!(first.annotations.get("app-trace"), Some(&PropertyValue::Symbol("trace-1".into())));
    assert!(
        first.annotations.keys().all(|k| !matches!(k.as_str(), "x-exchange" | "x-routing-key")),
        "what the broker adds is not the sender's: {:?}",
        first.annotations
    );
    source.close().await.expect("close");
    target.close().await.expect("close");

    // A foreign consumer of the target sees what the producer sent.
    let got = receive_raw(&r, &target_q.name, ids.len()).await;
    for want in &sent {
        let want_props = want.properties.clone().expect("properties");
        let m = got
            .iter()
            .find(|m| m.properties.as_ref().and_then(|p| p.message_id.clone()) == want_props.message_id)
            .unwrap_or_else(|| panic!("{:?} did not arrive with its type", want_props.message_id));
        let props = m.properties.clone().expect("properties");
        assert_eq!(props.correlation_id, want_props.correlation_id, "correlation id and its type");
        for (what, got, want) in [
            ("to", &props.to, &want_props.to),
            ("subject", &props.subject, &want_props.subject),
            ("reply-to", &props.reply_to, &want_props.reply_to),
            ("group-id", &props.group_id, &want_props.group_id),
            ("reply-to-group-id", &props.reply_to_group_id, &want_props.reply_to_group_id),
        ] {
            assert_eq!(got, want, "{what}");
        }
        assert_eq!(props.content_type, want_props.content_type, "content-type");
        assert_eq!(props.content_encoding, want_props.content_encoding, "content-encoding");
        assert_eq!(props.creation_time, want_props.creation_time, "creation-time");
        assert_eq!(props.absolute_expiry_time, want_props.absolute_expiry_time, "absolute-expiry-time");
        assert_eq!(props.group_sequence, want_props.group_sequence, "group-sequence");
        let header = m.header.clone().expect("header");
        assert_eq!((header.priority, header.ttl, header.durable), (Priority(7), Some(600_000), true), "header");
        for key in ["x-opt-partition-key", "app-trace", "app-when"] {
            assert_eq!(annotation(m, key), annotation(want, key), "annotation {key} and its type");
        }
        assert_eq!(m.body, want.body, "body");
    }
}

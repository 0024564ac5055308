//! drain-core's [`Message`] to and from AMQP 1.0 messages.
//!
//! Kept through a resubmit, with their AMQP types: `message-id` and
//! `correlation-id` (string, ulong, uuid or binary), `to`, `subject`, `reply-to`,
//! `content-type`, `content-encoding`, `absolute-expiry-time`, `creation-time`,
//! `group-id`, `group-sequence`, `reply-to-group-id`; the header's `ttl` and
//! `priority`; application properties; message annotations the sender set. Sent
//! messages are `durable`. One Data section carries the body.
//!
//! Not kept, and why (docs/operations.md has the same list):
//! * `user-id`: the broker checks it against the user of the connection that sends
//!   (RabbitMQ refuses a message whose `user-id` is not drain's user).
//! * the header's `delivery-count` and `first-acquirer`, delivery annotations and
//!   the footer: they describe one transfer, not the message; the target sets its own.
//! * broker-owned message annotations ([`broker_owned`]): sequence numbers, enqueue
//!   and lock times, the dead-letter source, the exchange and routing key a broker
//!   routed through; the target assigns its own.
//! * annotations keyed by a number, and property or annotation values without a
//!   counterpart in [`PropertyValue`] (null, decimals, chars, lists, maps, arrays,
//!   described values).
//!
//! Incoming: the body is the concatenated Data sections; an `amqp-value` holding
//! binary or a string gives those bytes; any other body (a value, a sequence) is
//! passed on as its AMQP encoding. Integer properties of every width arrive as
//! `Long` (an unsigned one above `i64::MAX` as `Ulong`).

use std::collections::BTreeMap;
use std::time::Duration;

use drain_core::ports::{Message, MessageId as Id, PropertyValue};
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Header, Message as AmqpMessage, MessageAnnotations, MessageId, Priority,
    Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Uuid, Value};

/// Message annotations a broker sets on the messages it delivers: never resent.
///
/// Service Bus reserves the `x-opt-` prefix: every such annotation is its own but
/// the three a sender may set (`x-opt-partition-key`, `x-opt-via-partition-key`,
/// `x-opt-scheduled-enqueue-time`). RabbitMQ adds the exchange and routing key a
/// message went through and its dead-lettering history.
#[must_use]
pub(crate) fn broker_owned(key: &str) -> bool {
    const SENDER_SET: [&str; 3] = ["x-opt-partition-key", "x-opt-via-partition-key", "x-opt-scheduled-enqueue-time"];
    const RABBITMQ: [&str; 4] = ["x-exchange", "x-routing-key", "x-death", "x-delivery-count"];
    (key.starts_with("x-opt-") && !SENDER_SET.contains(&key))
        || RABBITMQ.contains(&key)
        || key.starts_with("x-first-death-")
        || key.starts_with("x-last-death-")
}

/// The AMQP message to send for `message`.
pub(crate) fn to_amqp(message: &Message) -> AmqpMessage<Data> {
    let properties = Properties {
        message_id: message.message_id.as_ref().map(amqp_id),
        correlation_id: message.correlation_id.as_ref().map(amqp_id),
        to: message.to.clone(),
        subject: message.subject.clone(),
        reply_to: message.reply_to.clone(),
        content_type: message.content_type.clone().map(Symbol::from),
        content_encoding: message.content_encoding.clone().map(Symbol::from),
        absolute_expiry_time: message.absolute_expiry_time.map(Timestamp::from_milliseconds),
        creation_time: message.creation_time.map(Timestamp::from_milliseconds),
        group_id: message.group_id.clone(),
        group_sequence: message.group_sequence,
        reply_to_group_id: message.reply_to_group_id.clone(),
        ..Properties::default()
    };
    let application_properties = (!message.properties.is_empty()).then(|| {
        let mut map = ApplicationProperties::default();
        for (k, v) in &message.properties {
            map.0.insert(k.clone(), simple_value(v));
        }
        map
    });
    let message_annotations = (!message.annotations.is_empty()).then(|| {
        let mut map = MessageAnnotations::default();
        for (k, v) in message.annotations.iter().filter(|(k, _)| !broker_owned(k)) {
            map.0.insert(OwnedKey::from(k.as_str()), amqp_value(v));
        }
        map
    });
    let ttl = message.time_to_live.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX));
    let priority = message.priority.map_or_else(Priority::default, Priority::from);
    AmqpMessage {
        header: Some(Header { durable: true, priority, ttl, ..Header::default() }),
        delivery_annotations: None,
        message_annotations,
        properties: Some(properties),
        application_properties,
        body: Data(Binary::from(message.body.clone())),
        footer: None,
    }
}

/// Add the lease's fencing number to `message` as the application property `name`
/// (a `long`; a fence beyond `i64::MAX` saturates), replacing one of that name.
pub(crate) fn set_fence(message: &mut AmqpMessage<Data>, name: &str, fence: u64) {
    let fence = i64::try_from(fence).unwrap_or(i64::MAX);
    message
        .application_properties
        .get_or_insert_with(ApplicationProperties::default)
        .0
        .insert(name.to_owned(), SimpleValue::Long(fence));
}

fn amqp_id(id: &Id) -> MessageId {
    match id {
        Id::String(s) => MessageId::String(s.clone()),
        Id::Ulong(n) => MessageId::Ulong(*n),
        Id::Uuid(b) => MessageId::Uuid(Uuid::from(*b)),
        Id::Binary(b) => MessageId::Binary(Binary::from(b.clone())),
    }
}

fn core_id(id: MessageId) -> Id {
    match id {
        MessageId::String(s) => Id::String(s),
        MessageId::Ulong(n) => Id::Ulong(n),
        MessageId::Uuid(u) => Id::Uuid(u.into_inner()),
        MessageId::Binary(b) => Id::Binary(b.into_vec()),
    }
}

/// An application property: every [`PropertyValue`] is a simple AMQP value.
fn simple_value(v: &PropertyValue) -> SimpleValue {
    SimpleValue::try_from(amqp_value(v)).unwrap_or(SimpleValue::Null)
}

fn amqp_value(v: &PropertyValue) -> Value {
    match v {
        PropertyValue::String(s) => Value::String(s.clone()),
        PropertyValue::Symbol(s) => Value::Symbol(Symbol::from(s.as_str())),
        PropertyValue::Long(n) => Value::Long(*n),
        PropertyValue::Ulong(n) => Value::Ulong(*n),
        PropertyValue::Double(f) => Value::from(*f),
        PropertyValue::Bool(b) => Value::Bool(*b),
        PropertyValue::Binary(b) => Value::Binary(Binary::from(b.clone())),
        PropertyValue::Timestamp(ms) => Value::Timestamp(Timestamp::from_milliseconds(*ms)),
        PropertyValue::Uuid(b) => Value::Uuid(Uuid::from(*b)),
        _ => Value::Null,
    }
}

fn unsigned(n: u64) -> PropertyValue {
    i64::try_from(n).map_or(PropertyValue::Ulong(n), PropertyValue::Long)
}

fn property_value(v: SimpleValue) -> Option<PropertyValue> {
    core_value(Value::from(v))
}

/// drain-core's view of an AMQP value; `None` for one it has no counterpart for.
fn core_value(v: Value) -> Option<PropertyValue> {
    Some(match v {
        Value::String(s) => PropertyValue::String(s),
        Value::Symbol(s) => PropertyValue::Symbol(s.0),
        Value::Bool(b) => PropertyValue::Bool(b),
        Value::Byte(n) => PropertyValue::Long(n.into()),
        Value::Short(n) => PropertyValue::Long(n.into()),
        Value::Int(n) => PropertyValue::Long(n.into()),
        Value::Long(n) => PropertyValue::Long(n),
        Value::Ubyte(n) => PropertyValue::Long(n.into()),
        Value::Ushort(n) => PropertyValue::Long(n.into()),
        Value::Uint(n) => PropertyValue::Long(n.into()),
        Value::Ulong(n) => unsigned(n),
        Value::Float(f) => PropertyValue::Double(f64::from(f.0)),
        Value::Double(f) => PropertyValue::Double(f.0),
        Value::Timestamp(t) => PropertyValue::Timestamp(t.milliseconds()),
        Value::Uuid(u) => PropertyValue::Uuid(u.into_inner()),
        Value::Binary(b) => PropertyValue::Binary(b.into_vec()),
        // Null, chars, decimals, lists, maps, arrays and described values: dropped.
        _ => return None,
    })
}

/// The sender's message annotations: string keys, values with a counterpart, and
/// none a broker owns.
fn sender_annotations(annotations: Option<MessageAnnotations>) -> BTreeMap<String, PropertyValue> {
    let Some(annotations) = annotations else { return BTreeMap::new() };
    annotations
        .0
        .into_iter()
        .filter_map(|(k, v)| match k {
            OwnedKey::Symbol(s) if !broker_owned(&s.0) => core_value(v).map(|v| (s.0, v)),
            _ => None,
        })
        .collect()
}

/// drain-core's view of a received AMQP message, and its delivery count (how many
/// times it was delivered before).
pub(crate) fn from_amqp(message: AmqpMessage<Body<Value>>) -> (Message, u32) {
    let header_count = message.header.as_ref().map_or(0, |h| h.delivery_count);
    // RabbitMQ does not count `released` redeliveries but clears `first-acquirer`.
    let redelivered = message.header.as_ref().is_some_and(|h| !h.first_acquirer);
    let delivery_count = if redelivered { header_count.max(1) } else { header_count };
    let header = message.header.unwrap_or_default();
    let props = message.properties.unwrap_or_default();
    let properties = message
        .application_properties
        .map(|ap| ap.0.into_iter().filter_map(|(k, v)| property_value(v).map(|v| (k, v))).collect())
        .unwrap_or_default();
    let mut out = Message::default();
    out.message_id = props.message_id.map(core_id);
    out.body = body_bytes(message.body);
    out.content_type = props.content_type.map(|s| s.0);
    out.content_encoding = props.content_encoding.map(|s| s.0);
    out.correlation_id = props.correlation_id.map(core_id);
    out.subject = props.subject;
    out.to = props.to;
    out.reply_to = props.reply_to;
    out.group_id = props.group_id;
    out.group_sequence = props.group_sequence;
    out.reply_to_group_id = props.reply_to_group_id;
    out.creation_time = props.creation_time.map(|t| t.milliseconds());
    out.absolute_expiry_time = props.absolute_expiry_time.map(|t| t.milliseconds());
    out.time_to_live = header.ttl.map(|ms| Duration::from_millis(u64::from(ms)));
    // The default priority (4) is what a message without one has: not kept apart.
    out.priority = (header.priority != Priority::default()).then_some(header.priority.0);
    out.properties = properties;
    out.annotations = sender_annotations(message.message_annotations);
    (out, delivery_count)
}

fn body_bytes(body: Body<Value>) -> Vec<u8> {
    match body {
        // One section (the usual case): its bytes as they are, without a copy.
        Body::Data(batch) if batch.len() == 1 => batch.into_iter().next().map(|d| d.0.into_vec()).unwrap_or_default(),
        Body::Data(batch) => {
            let mut bytes = Vec::with_capacity(batch.iter().map(|d| d.0.len()).sum());
            for d in batch {
                bytes.extend_from_slice(&d.0);
            }
            bytes
        }
        Body::Value(v) => match v.0 {
            Value::Binary(b) => b.into_vec(),
            Value::String(s) => s.into_bytes(),
            Value::Null => Vec::new(),
            other => serde_amqp::to_vec(&other).unwrap_or_default(),
        },
        Body::Sequence(seqs) => {
            let values: Vec<Value> = seqs.into_iter().flat_map(|s| s.0).collect();
            serde_amqp::to_vec(&values).unwrap_or_default()
        }
        Body::Empty => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::messaging::{AmqpValue, Batch};

    use super::*;

    fn full() -> Message {
        let mut properties = BTreeMap::new();
        properties.insert("s".to_owned(), PropertyValue::String("text".into()));
        properties.insert("y".to_owned(), PropertyValue::Symbol("sym".into()));
        properties.insert("n".to_owned(), PropertyValue::Long(-7));
        properties.insert("u".to_owned(), PropertyValue::Ulong(u64::MAX));
        properties.insert("f".to_owned(), PropertyValue::Double(1.5));
        properties.insert("b".to_owned(), PropertyValue::Bool(true));
        properties.insert("x".to_owned(), PropertyValue::Binary(vec![0, 255]));
        properties.insert("t".to_owned(), PropertyValue::Timestamp(1_700_000_000_123));
        properties.insert("g".to_owned(), PropertyValue::Uuid([9; 16]));
        let mut annotations = BTreeMap::new();
        annotations.insert("x-opt-partition-key".to_owned(), PropertyValue::String("p-1".into()));
        annotations.insert("x-opt-scheduled-enqueue-time".to_owned(), PropertyValue::Timestamp(1_700_000_000_000));
        annotations.insert("app-trace".to_owned(), PropertyValue::Symbol("t-1".into()));
        {
            let mut m = Message::default();
            m.message_id = Some(Id::Ulong(42));
            m.body = b"\x00payload\xff".to_vec();
            m.content_type = Some("application/json".into());
            m.content_encoding = Some("gzip".into());
            m.correlation_id = Some(Id::Uuid([7; 16]));
            m.subject = Some("subj".into());
            m.to = Some("orders".into());
            m.reply_to = Some("replies".into());
            m.group_id = Some("session-1".into());
            m.group_sequence = Some(3);
            m.reply_to_group_id = Some("session-r".into());
            m.creation_time = Some(1_700_000_000_001);
            m.absolute_expiry_time = Some(1_800_000_000_000);
            m.time_to_live = Some(Duration::from_secs(90));
            m.priority = Some(7);
            m.properties = properties;
            m.annotations = annotations;
            m
        }
    }

    /// What a receiver gets for what a sender sent: the body section re-wrapped, and
    /// the header as a broker delivers it the first time (`first-acquirer`).
    fn round_trip(m: &Message) -> (Message, u32) {
        let out = to_amqp(m);
        let received = AmqpMessage {
            header: out.header.map(|h| Header { first_acquirer: true, ..h }),
            delivery_annotations: None,
            message_annotations: out.message_annotations,
            properties: out.properties,
            application_properties: out.application_properties,
            body: Body::Data(Batch::new(vec![out.body])),
            footer: None,
        };
        from_amqp(received)
    }

    #[test]
    fn every_field_survives_a_round_trip_with_its_type() {
        let m = full();
        assert_eq!(round_trip(&m), (m.clone(), 0));
        let bare = {
            let mut m = Message::default();
            m.message_id = None;
            m.body = Vec::new();
            m
        };
        assert_eq!(round_trip(&bare), (bare.clone(), 0));
        assert!(to_amqp(&full()).header.unwrap().durable, "sent messages are durable");
    }

    #[test]
    fn ids_keep_their_amqp_type() {
        let check = |id: Id, want: MessageId| {
            let m = {
                let mut m = Message::default();
                m.message_id = Some(id.clone());
                m.correlation_id = Some(id.clone());
                m
            };
            let props = to_amqp(&m).properties.expect("properties");
            assert_eq!(props.message_id, Some(want.clone()), "{id:?}");
            assert_eq!(props.correlation_id, Some(want), "{id:?}");
            assert_eq!(round_trip(&m).0.message_id, Some(id));
        };
        check(Id::String("42".into()), MessageId::String("42".into()));
        check(Id::Ulong(42), MessageId::Ulong(42));
        check(Id::Uuid([1; 16]), MessageId::Uuid(Uuid::from([1; 16])));
        check(Id::Binary(vec![0xab, 0x01]), MessageId::Binary(Binary::from(vec![0xab, 0x01])));
        // A string that looks like a tagged id stays that string.
        check(Id::String("ulong:42".into()), MessageId::String("ulong:42".into()));
    }

    #[test]
    fn broker_owned_annotations_are_not_kept() {
        let mut annotations = MessageAnnotations::default();
        for key in [
            "x-opt-sequence-number",
            "x-opt-enqueued-time",
            "x-opt-locked-until",
            "x-opt-deadletter-source",
            "x-exchange",
            "x-routing-key",
            "x-first-death-queue",
        ] {
            annotations.0.insert(OwnedKey::from(key), Value::Long(1));
        }
        annotations.0.insert(OwnedKey::from("x-opt-partition-key"), Value::String("p".into()));
        annotations.0.insert(OwnedKey::from("mine"), Value::Int(5));
        annotations.0.insert(OwnedKey::Ulong(7), Value::Int(5));
        annotations.0.insert(OwnedKey::from("a-list"), Value::List(vec![Value::Int(1)]));
        let kept = sender_annotations(Some(annotations));
        assert_eq!(
            kept.into_iter().collect::<Vec<_>>(),
            vec![
                ("mine".to_owned(), PropertyValue::Long(5)),
                ("x-opt-partition-key".to_owned(), PropertyValue::String("p".into())),
            ]
        );
        for (key, owned) in
            [("x-opt-via-partition-key", false), ("x-opt-lock-token", true), ("x-last-death-reason", true)]
        {
            assert_eq!(broker_owned(key), owned, "{key}");
        }
    }

    #[test]
    fn the_fence_is_an_application_property_when_asked() {
        let bare = {
            let mut m = Message::default();
            m.message_id = Some(Id::from("m"));
            m
        };
        let mut out = to_amqp(&bare);
        set_fence(&mut out, "drain-fence", 7);
        set_fence(&mut out, "drain-fence", 8);
        let props = out.application_properties.expect("properties").0;
        assert_eq!(props.len(), 1, "replaced, not added twice");
        assert_eq!(props.get("drain-fence"), Some(&SimpleValue::Long(8)));
        let mut full_out = to_amqp(&full());
        set_fence(&mut full_out, "drain-fence", u64::MAX);
        let props = full_out.application_properties.expect("properties").0;
        assert_eq!(props.len(), 10, "the message's own properties are kept");
        assert_eq!(props.get("drain-fence"), Some(&SimpleValue::Long(i64::MAX)), "saturates");
    }

    fn received(body: Body<Value>, header: Option<Header>, id: Option<MessageId>) -> (Message, u32) {
        from_amqp(AmqpMessage {
            header,
            delivery_annotations: None,
            message_annotations: None,
            properties: Some(Properties { message_id: id, ..Properties::default() }),
            application_properties: None,
            body,
            footer: None,
        })
    }

    #[test]
    fn foreign_bodies_and_counts() {
        let check = |body: Body<Value>, want: &[u8]| assert_eq!(received(body, None, None).0.body, want);
        check(Body::Value(AmqpValue(Value::String("hi".into()))), b"hi");
        check(Body::Value(AmqpValue(Value::Binary(Binary::from(vec![1, 2])))), &[1, 2]);
        check(Body::Empty, b"");
        check(Body::Data(Batch::new(vec![Data(Binary::from(vec![1])), Data(Binary::from(vec![2]))])), &[1, 2]);
        // An int value is passed on as its AMQP encoding (smallint 0x54).
        check(Body::Value(AmqpValue(Value::Int(5))), &[0x54, 5]);

        let count = |header: Header| received(Body::Empty, Some(header), None).1;
        assert_eq!(count(Header { first_acquirer: true, ..Header::default() }), 0);
        assert_eq!(count(Header { first_acquirer: false, ..Header::default() }), 1);
        assert_eq!(count(Header { delivery_count: 3, first_acquirer: true, ..Header::default() }), 3);
        assert_eq!(count(Header { delivery_count: 3, first_acquirer: false, ..Header::default() }), 3);
        let (m, _) = received(Body::Empty, Some(Header::default()), Some(MessageId::Ulong(9)));
        assert_eq!((m.message_id, m.priority, m.time_to_live), (Some(Id::Ulong(9)), None, None));
    }
}

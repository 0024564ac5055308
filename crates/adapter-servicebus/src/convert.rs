//! drain-core's [`Message`] to and from AMQP 1.0 messages.
//!
//! Outgoing: one Data section with the body; `message-id`, `correlation-id`
//! (strings), `content-type`, `subject`; application properties; header
//! `durable=true` (RabbitMQ persists it; Service Bus always does).
//!
//! Incoming: the body is the concatenated Data sections; an `amqp-value` holding
//! binary or a string gives those bytes; any other body (a value, a sequence) is
//! passed on as its AMQP encoding. Message and correlation ids of other types
//! become strings (numbers in decimal, UUIDs hyphenated, binary in hex).

use drain_core::ports::{Message, PropertyValue};
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Header, Message as AmqpMessage, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Value};

/// The AMQP message to send for `message`.
pub(crate) fn to_amqp(message: &Message) -> AmqpMessage<Data> {
    let properties = Properties {
        message_id: message.message_id.clone().map(MessageId::String),
        correlation_id: message.correlation_id.clone().map(MessageId::String),
        content_type: message.content_type.clone().map(Symbol::from),
        subject: message.subject.clone(),
        ..Properties::default()
    };
    let application_properties = (!message.properties.is_empty()).then(|| {
        let mut map = ApplicationProperties::default();
        for (k, v) in &message.properties {
            map.0.insert(k.clone(), simple_value(v));
        }
        map
    });
    AmqpMessage {
        header: Some(Header { durable: true, ..Header::default() }),
        delivery_annotations: None,
        message_annotations: None,
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

fn simple_value(v: &PropertyValue) -> SimpleValue {
    match v {
        PropertyValue::String(s) => SimpleValue::String(s.clone()),
        PropertyValue::Long(n) => SimpleValue::Long(*n),
        PropertyValue::Double(f) => SimpleValue::from(*f),
        PropertyValue::Bool(b) => SimpleValue::Bool(*b),
        PropertyValue::Binary(b) => SimpleValue::Binary(Binary::from(b.clone())),
    }
}

/// drain-core's view of a received AMQP message, and its delivery count (how many
/// times it was delivered before).
pub(crate) fn from_amqp(message: AmqpMessage<Body<Value>>) -> (Message, u32) {
    let header_count = message.header.as_ref().map_or(0, |h| h.delivery_count);
    // RabbitMQ does not count `released` redeliveries but clears `first-acquirer`.
    let redelivered = message.header.as_ref().is_some_and(|h| !h.first_acquirer);
    let delivery_count = if redelivered { header_count.max(1) } else { header_count };
    let props = message.properties.unwrap_or_default();
    let properties = message
        .application_properties
        .map(|ap| ap.0.into_iter().filter_map(|(k, v)| property_value(v).map(|v| (k, v))).collect())
        .unwrap_or_default();
    let out = Message {
        message_id: props.message_id.map(id_string),
        body: body_bytes(message.body),
        content_type: props.content_type.map(|s| s.0),
        correlation_id: props.correlation_id.map(id_string),
        subject: props.subject,
        properties,
    };
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

fn property_value(v: SimpleValue) -> Option<PropertyValue> {
    Some(match v {
        SimpleValue::String(s) => PropertyValue::String(s),
        SimpleValue::Symbol(s) => PropertyValue::String(s.0),
        SimpleValue::Char(c) => PropertyValue::String(c.to_string()),
        SimpleValue::Bool(b) => PropertyValue::Bool(b),
        SimpleValue::Byte(n) => PropertyValue::Long(n.into()),
        SimpleValue::Short(n) => PropertyValue::Long(n.into()),
        SimpleValue::Int(n) => PropertyValue::Long(n.into()),
        SimpleValue::Long(n) => PropertyValue::Long(n),
        SimpleValue::Ubyte(n) => PropertyValue::Long(n.into()),
        SimpleValue::Ushort(n) => PropertyValue::Long(n.into()),
        SimpleValue::Uint(n) => PropertyValue::Long(n.into()),
        SimpleValue::Ulong(n) => match i64::try_from(n) {
            Ok(n) => PropertyValue::Long(n),
            Err(_) => PropertyValue::String(n.to_string()),
        },
        SimpleValue::Float(f) => PropertyValue::Double(f64::from(f.0)),
        SimpleValue::Double(f) => PropertyValue::Double(f.0),
        SimpleValue::Timestamp(t) => PropertyValue::Long(t.milliseconds()),
        SimpleValue::Uuid(u) => PropertyValue::String(crate::lock::LockToken::from_bytes(u.into_inner()).to_string()),
        SimpleValue::Binary(b) => PropertyValue::Binary(b.into_vec()),
        // Null, decimals and described values have no counterpart: dropped.
        _ => return None,
    })
}

/// Type tags for message ids that are not strings. The per-message claim is keyed on
/// the id string, so the mapping must be injective: ulong `42` and the string `"42"`
/// are different messages, and mapping both to `"42"` would complete one of them as a
/// duplicate of the other without ever submitting it.
const ID_TAGS: [&str; 4] = ["string:", "ulong:", "uuid:", "binary:"];

/// An AMQP message id as the string drain keys its claim on: a string id as it is
/// (the common case), other types tagged (`ulong:42`, `uuid:…`, `binary:<hex>`), and a
/// string that happens to start with a tag escaped as `string:<id>`.
fn id_string(id: MessageId) -> String {
    match id {
        MessageId::String(s) if ID_TAGS.iter().any(|t| s.starts_with(t)) => format!("string:{s}"),
        MessageId::String(s) => s,
        MessageId::Ulong(n) => format!("ulong:{n}"),
        MessageId::Uuid(u) => format!("uuid:{}", crate::lock::LockToken::from_bytes(u.into_inner())),
        MessageId::Binary(b) => {
            let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
            format!("binary:{hex}")
        }
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::messaging::{AmqpValue, Batch};
    use fe2o3_amqp::types::primitives::Uuid;

    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn ids_of_different_types_never_collide() {
        use fe2o3_amqp::types::primitives::Binary;
        let ids = [
            MessageId::String("42".into()),
            MessageId::Ulong(42),
            MessageId::String("ulong:42".into()),
            MessageId::String("string:ulong:42".into()),
            MessageId::Binary(Binary::from(b"42".to_vec())),
            MessageId::String("3432".into()),
            MessageId::String("binary:3432".into()),
            MessageId::Uuid(Uuid::from([7u8; 16])),
        ];
        let strings: Vec<String> = ids.iter().cloned().map(id_string).collect();
        let mut unique = strings.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), strings.len(), "{strings:?}");
        assert_eq!(strings[0], "42", "plain string ids are kept as they are");
        assert_eq!(strings[1], "ulong:42");
        assert_eq!(strings[2], "string:ulong:42");
    }

    fn full() -> Message {
        let mut properties = BTreeMap::new();
        properties.insert("s".to_owned(), PropertyValue::String("text".into()));
        properties.insert("n".to_owned(), PropertyValue::Long(-7));
        properties.insert("f".to_owned(), PropertyValue::Double(1.5));
        properties.insert("b".to_owned(), PropertyValue::Bool(true));
        properties.insert("x".to_owned(), PropertyValue::Binary(vec![0, 255]));
        Message {
            message_id: Some("id-1".into()),
            body: b"\x00payload\xff".to_vec(),
            content_type: Some("application/json".into()),
            correlation_id: Some("corr-9".into()),
            subject: Some("subj".into()),
            properties,
        }
    }

    /// What a receiver gets for what a sender sent: the body section re-wrapped, and
    /// the header as a broker delivers it the first time (`first-acquirer`).
    fn round_trip(m: &Message) -> (Message, u32) {
        let out = to_amqp(m);
        let received = AmqpMessage {
            header: out.header.map(|h| Header { first_acquirer: true, ..h }),
            delivery_annotations: None,
            message_annotations: None,
            properties: out.properties,
            application_properties: out.application_properties,
            body: Body::Data(Batch::new(vec![out.body])),
            footer: None,
        };
        from_amqp(received)
    }

    #[test]
    fn every_field_survives_a_round_trip() {
        let m = full();
        assert_eq!(round_trip(&m), (m.clone(), 0));
        let bare = Message { message_id: None, body: Vec::new(), ..Message::default() };
        assert_eq!(round_trip(&bare), (bare.clone(), 0));
        assert!(to_amqp(&full()).header.unwrap().durable, "sent messages are durable");
    }

    #[test]
    fn the_fence_is_an_application_property_when_asked() {
        let bare = Message { message_id: Some("m".into()), ..Message::default() };
        let mut out = to_amqp(&bare);
        set_fence(&mut out, "drain-fence", 7);
        set_fence(&mut out, "drain-fence", 8);
        let props = out.application_properties.expect("properties").0;
        assert_eq!(props.len(), 1, "replaced, not added twice");
        assert_eq!(props.get("drain-fence"), Some(&SimpleValue::Long(8)));
        let mut full_out = to_amqp(&full());
        set_fence(&mut full_out, "drain-fence", u64::MAX);
        let props = full_out.application_properties.expect("properties").0;
        assert_eq!(props.len(), 6, "the message's own properties are kept");
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
    fn foreign_bodies_ids_and_counts() {
        let check = |body: Body<Value>, want: &[u8]| assert_eq!(received(body, None, None).0.body, want);
        check(Body::Value(AmqpValue(Value::String("hi".into()))), b"hi");
        check(Body::Value(AmqpValue(Value::Binary(Binary::from(vec![1, 2])))), &[1, 2]);
        check(Body::Empty, b"");
        check(Body::Data(Batch::new(vec![Data(Binary::from(vec![1])), Data(Binary::from(vec![2]))])), &[1, 2]);
        // An int value is passed on as its AMQP encoding (smallint 0x54).
        check(Body::Value(AmqpValue(Value::Int(5))), &[0x54, 5]);

        let id = |id: MessageId| received(Body::Empty, None, Some(id)).0.message_id.unwrap();
        assert_eq!(id(MessageId::Ulong(42)), "ulong:42");
        assert_eq!(id(MessageId::Binary(Binary::from(vec![0xab, 0x01]))), "binary:ab01");
        let uuid = Uuid::from([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
        ]);
        assert_eq!(id(MessageId::Uuid(uuid)), "uuid:00112233-4455-6677-8899-aabbccddeeff");

        let count = |header: Header| received(Body::Empty, Some(header), None).1;
        assert_eq!(count(Header { first_acquirer: true, ..Header::default() }), 0);
        assert_eq!(count(Header { first_acquirer: false, ..Header::default() }), 1);
        assert_eq!(count(Header { delivery_count: 3, first_acquirer: true, ..Header::default() }), 3);
        assert_eq!(count(Header { delivery_count: 3, first_acquirer: false, ..Header::default() }), 3);
    }
}

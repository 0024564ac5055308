//! Messages as the broker keeps them: the sections a sender wrote, split without
//! re-encoding the bare message's body, and re-assembled for each delivery with the
//! header's delivery count and Service Bus's broker annotations (`x-opt-lock-token`,
//! `x-opt-locked-until`, `x-opt-sequence-number`, `x-opt-enqueued-time`).
//!
//! A batch (message format `0x80013700`, what Microsoft's SDKs send for a list of
//! messages) carries one encoded message in each Data section; [`parse_transfer`]
//! unpacks it into its messages.

use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::messaging::{
    Annotations, ApplicationProperties, Data, Header, MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp_types::primitives::{SimpleValue, Symbol, Timestamp, Uuid, Value};

use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

use crate::wire::value::encoded_len;

/// The message format of a Service Bus batch.
pub(crate) const BATCH_FORMAT: u32 = 0x8001_3700;

/// Section descriptor codes (AMQP 1.0 part 3, "Messaging").
const HEADER: u64 = 0x70;
const DELIVERY_ANNOTATIONS: u64 = 0x71;
const MESSAGE_ANNOTATIONS: u64 = 0x72;
const PROPERTIES: u64 = 0x73;
const APPLICATION_PROPERTIES: u64 = 0x74;
const DATA: u64 = 0x75;
const AMQP_SEQUENCE: u64 = 0x76;
const AMQP_VALUE: u64 = 0x77;
const FOOTER: u64 = 0x78;

/// Why a payload is not a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessageError(pub(crate) String);

impl std::fmt::Display for MessageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad(what: impl std::fmt::Display) -> MessageError {
    MessageError(format!("malformed message: {what}"))
}

/// A message as sent, minus hop-by-hop delivery annotations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredMessage {
    pub(crate) header: Header,
    pub(crate) annotations: Annotations,
    /// The properties section as encoded, when there was one.
    properties_raw: Option<Vec<u8>>,
    pub(crate) properties: Option<Properties>,
    pub(crate) application_properties: Option<ApplicationProperties>,
    /// Body sections and footer, as encoded.
    body_raw: Vec<u8>,
}

/// The descriptor code of a described section.
fn section_code(section: &[u8]) -> Result<u64, MessageError> {
    match section {
        [0x00, 0x53, code, ..] => Ok(u64::from(*code)),
        [0x00, 0x80, rest @ ..] if rest.len() >= 8 => {
            Ok(u64::from_be_bytes(rest[..8].try_into().map_err(|_| bad("descriptor"))?))
        }
        [0x00, 0xa3 | 0xb3, ..] => {
            let name: Symbol = serde_amqp::from_slice(&section[1..]).map_err(bad)?;
            Ok(match name.as_str() {
                "amqp:header:list" => HEADER,
                "amqp:delivery-annotations:map" => DELIVERY_ANNOTATIONS,
                "amqp:message-annotations:map" => MESSAGE_ANNOTATIONS,
                "amqp:properties:list" => PROPERTIES,
                "amqp:application-properties:map" => APPLICATION_PROPERTIES,
                "amqp:data:binary" => DATA,
                "amqp:amqp-sequence:list" => AMQP_SEQUENCE,
                "amqp:amqp-value:*" => AMQP_VALUE,
                "amqp:footer:map" => FOOTER,
                other => return Err(bad(format!("unknown section {other}"))),
            })
        }
        _ => Err(bad("a section is not a described type")),
    }
}

/// The sections of `payload`: (descriptor code, encoded section).
pub(crate) fn sections(payload: &[u8]) -> Result<Vec<(u64, &[u8])>, MessageError> {
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let len = encoded_len(rest).map_err(bad)?;
        let (section, tail) = rest.split_at(len);
        out.push((section_code(section)?, section));
        rest = tail;
    }
    Ok(out)
}

impl StoredMessage {
    /// Read one message (format 0).
    pub(crate) fn parse(payload: &[u8]) -> Result<StoredMessage, MessageError> {
        let mut msg = StoredMessage {
            header: Header::default(),
            annotations: Annotations::new(),
            properties_raw: None,
            properties: None,
            application_properties: None,
            body_raw: Vec::new(),
        };
        let mut bodies = 0;
        for (code, section) in sections(payload)? {
            match code {
                HEADER => msg.header = serde_amqp::from_slice(section).map_err(bad)?,
                DELIVERY_ANNOTATIONS => {}
                MESSAGE_ANNOTATIONS => {
                    msg.annotations = serde_amqp::from_slice::<MessageAnnotations>(section).map_err(bad)?.0;
                }
                PROPERTIES => {
                    msg.properties = Some(serde_amqp::from_slice(section).map_err(bad)?);
                    msg.properties_raw = Some(section.to_vec());
                }
                APPLICATION_PROPERTIES => {
                    msg.application_properties = Some(serde_amqp::from_slice(section).map_err(bad)?);
                }
                DATA | AMQP_SEQUENCE | AMQP_VALUE | FOOTER => {
                    bodies += usize::from(code != FOOTER);
                    msg.body_raw.extend_from_slice(section);
                }
                other => return Err(bad(format!("unexpected section 0x{other:x}"))),
            }
        }
        if bodies == 0 {
            return Err(bad("no body section"));
        }
        Ok(msg)
    }

    /// A message with one Data section and, when given, a string message id.
    #[cfg(test)]
    pub(crate) fn simple(body: &[u8], message_id: Option<&str>) -> StoredMessage {
        StoredMessage::in_session(body, message_id, None)
    }

    /// A message of one Data section with `message_id`, in `session` (its group-id)
    /// when given.
    pub(crate) fn in_session(body: &[u8], message_id: Option<&str>, session: Option<&str>) -> StoredMessage {
        let mut payload = Vec::new();
        if message_id.is_some() || session.is_some() {
            push(
                &mut payload,
                &Properties {
                    message_id: message_id.map(|id| MessageId::String(id.to_owned())),
                    group_id: session.map(str::to_owned),
                    ..Properties::default()
                },
            );
        }
        push(&mut payload, &Data(body.to_vec().into()));
        // Our own encoding always parses.
        StoredMessage::parse(&payload).unwrap_or_else(|_| unreachable!("a message of one Data section"))
    }

    /// The message id, if the sender set one.
    pub(crate) fn message_id(&self) -> Option<&MessageId> {
        self.properties.as_ref()?.message_id.as_ref()
    }

    /// The session id: the properties' group-id.
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.properties.as_ref()?.group_id.as_deref()
    }

    /// When the sender asked it to be enqueued (`x-opt-scheduled-enqueue-time`), Unix ms.
    pub(crate) fn scheduled_enqueue_ms(&self) -> Option<i64> {
        let key: &dyn fe2o3_amqp_types::messaging::annotations::AnnotationKey = &"x-opt-scheduled-enqueue-time";
        match self.annotations.get(key)? {
            Value::Timestamp(t) => Some(t.milliseconds()),
            Value::Long(n) => Some(*n),
            _ => None,
        }
    }

    /// Set `x-opt-scheduled-enqueue-time` (a `schedule-message` request's time wins).
    pub(crate) fn set_scheduled_enqueue_ms(&mut self, due: i64) {
        self.annotations.insert(OwnedKey::from("x-opt-scheduled-enqueue-time"), timestamp(due));
    }

    /// An application property, as a string when it is one.
    pub(crate) fn string_property(&self, name: &str) -> Option<&str> {
        match self.application_properties.as_ref()?.0.get(name)? {
            SimpleValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// Set (or replace) a string application property.
    pub(crate) fn set_property(&mut self, name: &str, value: &str) {
        self.application_properties
            .get_or_insert_with(ApplicationProperties::default)
            .0
            .insert(name.to_owned(), SimpleValue::String(value.to_owned()));
    }

    /// Merge annotations (an abandon's `modified.message-annotations`).
    pub(crate) fn annotate(&mut self, fields: impl IntoIterator<Item = (Symbol, Value)>) {
        for (k, v) in fields {
            self.annotations.insert(OwnedKey::Symbol(k), v);
        }
    }

    /// A message annotation.
    #[cfg(test)]
    pub(crate) fn annotation(&self, key: &str) -> Option<&Value> {
        self.annotations.get(&key as &dyn fe2o3_amqp_types::messaging::annotations::AnnotationKey)
    }

    /// The value of an amqp-value body.
    pub(crate) fn amqp_value(&self) -> Option<Value> {
        let parts = sections(&self.body_raw).ok()?;
        let (_, section) = parts.into_iter().find(|(code, _)| *code == AMQP_VALUE)?;
        serde_amqp::from_slice::<fe2o3_amqp_types::messaging::AmqpValue<Value>>(section).ok().map(|v| v.0)
    }

    /// The body as bytes: the Data sections concatenated, or an amqp-value's string
    /// or binary; any other body as its encoding.
    pub(crate) fn body(&self) -> Vec<u8> {
        let Ok(parts) = sections(&self.body_raw) else { return self.body_raw.clone() };
        let mut out = Vec::new();
        for (code, section) in parts {
            match code {
                DATA => {
                    if let Ok(Data(bin)) = serde_amqp::from_slice::<Data>(section) {
                        out.extend_from_slice(&bin);
                    }
                }
                AMQP_VALUE => match serde_amqp::from_slice::<fe2o3_amqp_types::messaging::AmqpValue<Value>>(section) {
                    Ok(fe2o3_amqp_types::messaging::AmqpValue(Value::String(s))) => out.extend_from_slice(s.as_bytes()),
                    Ok(fe2o3_amqp_types::messaging::AmqpValue(Value::Binary(b))) => out.extend_from_slice(&b),
                    _ => out.extend_from_slice(section),
                },
                FOOTER => {}
                _ => out.extend_from_slice(section),
            }
        }
        out
    }

    /// The bytes of one delivery: the header with `delivery_count`, the message
    /// annotations with `extra` added, then the bare message as it was sent (with
    /// application properties re-encoded when the broker added some).
    pub(crate) fn encode(&self, delivery_count: u32, extra: &[(&str, Value)]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body_raw.len() + 256);
        push(&mut out, &full_header(&self.header, delivery_count));
        let mut annotations = self.annotations.clone();
        for (k, v) in extra {
            annotations.insert(OwnedKey::from(*k), v.clone());
        }
        if !annotations.is_empty() {
            push(&mut out, &MessageAnnotations(annotations));
        }
        if let Some(raw) = &self.properties_raw {
            out.extend_from_slice(raw);
        }
        if let Some(ap) = &self.application_properties {
            push(&mut out, ap);
        }
        out.extend_from_slice(&self.body_raw);
        out
    }
}

/// The header with every field written out: serde_amqp leaves trailing defaults
/// out, and Microsoft's SDKs then read the delivery count as missing.
fn full_header(header: &Header, delivery_count: u32) -> Value {
    let ttl = header.ttl.map_or(Value::Null, Value::Uint);
    let fields = vec![
        Value::Bool(header.durable),
        Value::Ubyte(header.priority.0),
        ttl,
        Value::Bool(delivery_count == 0),
        Value::Uint(delivery_count),
    ];
    Value::Described(Box::new(Described { descriptor: Descriptor::Code(HEADER), value: Value::List(fields) }))
}

fn push<T: serde::Serialize>(out: &mut Vec<u8>, value: &T) {
    if let Err(e) = value.serialize(&mut serde_amqp::ser::Serializer::new(&mut *out)) {
        tracing::error!(error = %e, "could not encode a message section");
    }
}

/// The messages of one transfer: one for format 0, each Data section's message for
/// a batch.
pub(crate) fn parse_transfer(format: u32, payload: &[u8]) -> Result<Vec<StoredMessage>, MessageError> {
    if format != BATCH_FORMAT {
        return Ok(vec![StoredMessage::parse(payload)?]);
    }
    let mut out = Vec::new();
    for (code, section) in sections(payload)? {
        if code == DATA {
            let Data(inner) = serde_amqp::from_slice(section).map_err(bad)?;
            out.push(StoredMessage::parse(&inner)?);
        }
    }
    if out.is_empty() {
        return Err(bad("a batch without messages"));
    }
    Ok(out)
}

/// A message id as Service Bus shows it: strings as they are, numbers in decimal,
/// UUIDs hyphenated, binary in hex.
pub(crate) fn id_string(id: &MessageId) -> String {
    match id {
        MessageId::String(s) => s.clone(),
        MessageId::Ulong(n) => n.to_string(),
        MessageId::Uuid(u) => uuid_string(u.as_inner()),
        MessageId::Binary(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

/// `00112233-4455-6677-8899-aabbccddeeff`.
pub(crate) fn uuid_string(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A timestamp annotation value.
pub(crate) fn timestamp(ms: i64) -> Value {
    Value::Timestamp(Timestamp::from_milliseconds(ms))
}

/// A uuid annotation value.
pub(crate) fn uuid(bytes: [u8; 16]) -> Value {
    Value::Uuid(Uuid::from(bytes))
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::{AmqpValue, DeliveryAnnotations, Footer};
    use fe2o3_amqp_types::primitives::Binary;

    use super::*;

    fn encode_sections(parts: &[&dyn erased::Section]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            p.push_to(&mut out);
        }
        out
    }

    mod erased {
        pub(super) trait Section {
            fn push_to(&self, out: &mut Vec<u8>);
        }
        impl<T: serde::Serialize> Section for T {
            fn push_to(&self, out: &mut Vec<u8>) {
                super::push(out, self);
            }
        }
    }

    fn props(id: &str) -> Properties {
        Properties { message_id: Some(MessageId::String(id.into())), ..Properties::default() }
    }

    #[test]
    fn a_message_round_trips_with_the_broker_annotations() {
        let mut ap = ApplicationProperties::default();
        ap.0.insert("tenant".into(), SimpleValue::String("t1".into()));
        let mut da = Annotations::new();
        da.insert(OwnedKey::from("hop"), Value::Bool(true));
        let payload = encode_sections(&[
            &Header { durable: true, ..Header::default() },
            &DeliveryAnnotations(da),
            &props("m-1"),
            &ap,
            &Data(Binary::from(b"hello".to_vec())),
            &Footer(Annotations::new()),
        ]);
        let msg = StoredMessage::parse(&payload).unwrap();
        assert_eq!(msg.message_id().map(id_string).as_deref(), Some("m-1"));
        assert_eq!(msg.string_property("tenant"), Some("t1"));
        assert_eq!(msg.body(), b"hello");

        let out = msg.encode(2, &[("x-opt-sequence-number", Value::Long(5)), ("x-opt-locked-until", timestamp(9))]);
        let again = StoredMessage::parse(&out).unwrap();
        assert_eq!(again.header.delivery_count, 2);
        assert!(again.header.durable, "the sender's header fields are kept");
        assert!(!again.header.first_acquirer);
        assert_eq!(again.annotation("x-opt-sequence-number"), Some(&Value::Long(5)));
        assert_eq!(again.annotation("x-opt-locked-until"), Some(&timestamp(9)));
        assert_eq!(again.body(), b"hello");
        assert!(again.annotation("hop").is_none(), "delivery annotations are hop by hop");
        // Every header field is on the wire: a list of five (Microsoft's SDKs read a
        // missing delivery-count as None).
        let (_, header) = sections(&out).unwrap()[0];
        assert_eq!(&header[..3], &[0x00, 0x53, 0x70]);
        assert_eq!(header[3], 0xc0, "list8");
        assert_eq!(header[5], 5, "five fields");
        let codes: Vec<u64> = sections(&out).unwrap().iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, vec![HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, DATA, FOOTER]);
        assert!(msg.encode(0, &[]).len() < out.len());
        assert!(StoredMessage::parse(&msg.encode(0, &[])).unwrap().header.first_acquirer);
    }

    #[test]
    fn dead_letter_properties_and_annotations_are_added() {
        let payload = encode_sections(&[&AmqpValue(Value::String("token".into()))]);
        let mut msg = StoredMessage::parse(&payload).unwrap();
        assert_eq!(msg.body(), b"token");
        assert_eq!(msg.amqp_value(), Some(Value::String("token".into())));
        assert_eq!(msg.message_id(), None);
        msg.set_property("DeadLetterReason", "r");
        msg.annotate([(Symbol::from("note"), Value::Int(1))]);
        let again = StoredMessage::parse(&msg.encode(0, &[])).unwrap();
        assert_eq!(again.string_property("DeadLetterReason"), Some("r"));
        assert_eq!(again.annotation("note"), Some(&Value::Int(1)));
    }

    #[test]
    fn a_batch_unpacks_into_its_messages() {
        let inner = |id: &str| encode_sections(&[&props(id), &Data(Binary::from(id.as_bytes().to_vec()))]);
        let batch =
            encode_sections(&[&props("envelope"), &Data(Binary::from(inner("a"))), &Data(Binary::from(inner("b")))]);
        let msgs = parse_transfer(BATCH_FORMAT, &batch).unwrap();
        let ids: Vec<String> = msgs.iter().filter_map(|m| m.message_id().map(id_string)).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(msgs[1].body(), b"b");
        assert_eq!(parse_transfer(0, &batch).unwrap().len(), 1, "format 0: one message with two Data sections");
        assert!(parse_transfer(BATCH_FORMAT, &encode_sections(&[&props("x")])).is_err());
    }

    #[test]
    fn malformed_payloads_are_refused() {
        let check = |payload: &[u8]| assert!(StoredMessage::parse(payload).is_err(), "{payload:02x?}");
        check(&[]);
        check(&[0x40]);
        check(&encode_sections(&[&props("no body")]));
        check(&[0x00, 0x53, 0x75, 0xa0, 0x05, 1]);
        check(&encode_sections(&[&Value::Int(1)]));
    }

    #[test]
    fn ids_and_uuids_render_as_service_bus_shows_them() {
        assert_eq!(id_string(&MessageId::Ulong(42)), "42");
        assert_eq!(id_string(&MessageId::Binary(Binary::from(vec![0xab, 1]))), "ab01");
        let u = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
        assert_eq!(uuid_string(&u), "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(id_string(&MessageId::Uuid(Uuid::from(u))), "00112233-4455-6677-8899-aabbccddeeff");
    }
}

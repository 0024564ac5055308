//! Service Bus batches: several messages in one transfer (message format
//! `0x80013700`, each message encoded in a Data section of its own), as Microsoft's
//! SDKs send a list of messages. The broker keeps or refuses a batch whole and
//! applies duplicate detection to each message in it, so one outcome answers every
//! message of the batch.
//!
//! Only messages that the broker would route alike share a batch: the same session
//! (`group-id`) and the same message annotations (the partition keys, a scheduled
//! enqueue time). The envelope carries the first message's id, session and
//! partition keys, as the SDKs' does.

use fe2o3_amqp::Sendable;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::message::__private::Serializable;
use fe2o3_amqp::types::messaging::{Batch, Data, Message, MessageAnnotations, Properties};
use fe2o3_amqp::types::primitives::Binary;

/// The message format of a batch.
pub(crate) const FORMAT: u32 = 0x8001_3700;

/// The most messages one batch carries: the tick's default batch.
pub(crate) const MAX_MESSAGES: usize = 64;

/// The most bytes of encoded messages one batch carries when the link names no
/// smaller limit: Service Bus's standard tier refuses a message over 256 KiB, and a
/// batch counts as one message.
const MAX_BYTES: u64 = 256 * 1024;

/// Room left for the envelope's own sections and each Data section's framing.
const ENVELOPE_BYTES: u64 = 1024;
const SECTION_BYTES: u64 = 8;

/// The bytes a batch's messages may take on a link whose largest message is
/// `link_max` (`None`: no limit announced).
pub(crate) fn budget(link_max: Option<u64>) -> u64 {
    link_max.unwrap_or(MAX_BYTES).min(MAX_BYTES).saturating_sub(ENVELOPE_BYTES)
}

/// What one encoded message takes of a batch's budget.
pub(crate) fn cost(encoded: &[u8]) -> u64 {
    encoded.len() as u64 + SECTION_BYTES
}

/// Whether `next` may share a batch that starts with `first`.
pub(crate) fn alike(first: &Message<Data>, next: &Message<Data>) -> bool {
    let session = |m: &Message<Data>| m.properties.as_ref().and_then(|p| p.group_id.clone());
    session(first) == session(next) && first.message_annotations == next.message_annotations
}

/// `message` as one Data section's content.
pub(crate) fn encode(message: &Message<Data>) -> Vec<u8> {
    // Encoding a message built from drain's own types into a Vec cannot fail.
    serde_amqp::to_vec(&Serializable(message)).unwrap_or_default()
}

/// The partition keys, the only annotations the envelope carries.
const ENVELOPE_ANNOTATIONS: [&str; 2] = ["x-opt-partition-key", "x-opt-via-partition-key"];

/// The transfer that carries `encoded` (each an encoded message) with `first`'s
/// id, session and partition keys on its envelope.
pub(crate) fn envelope(first: &Message<Data>, encoded: Vec<Vec<u8>>) -> Sendable<Batch<Data>> {
    let properties = first.properties.as_ref().map(|p| Properties {
        message_id: p.message_id.clone(),
        group_id: p.group_id.clone(),
        ..Properties::default()
    });
    let annotations = first.message_annotations.as_ref().map(|all| {
        let mut keys = MessageAnnotations::default();
        for (k, v) in all.0.iter().filter(|(k, _)| ENVELOPE_ANNOTATIONS.iter().any(|e| **k == OwnedKey::from(*e))) {
            keys.0.insert(k.clone(), v.clone());
        }
        keys
    });
    let body = Batch::new(encoded.into_iter().map(|e| Data(Binary::from(e))).collect::<Vec<_>>());
    let message = Message {
        header: None,
        delivery_annotations: None,
        message_annotations: annotations.filter(|keys| !keys.0.is_empty()),
        properties,
        application_properties: None,
        body,
        footer: None,
    };
    Sendable { message, message_format: FORMAT, settled: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drain_core::ports::{Message as DrainMessage, PropertyValue};
    use fe2o3_amqp::types::messaging::message::__private::Deserializable;

    fn message(id: &str, session: Option<&str>) -> Message<Data> {
        let mut m = DrainMessage::new(id, id.as_bytes().to_vec());
        m.group_id = session.map(str::to_owned);
        crate::convert::to_amqp(&m)
    }

    #[test]
    fn messages_of_one_session_and_annotations_share_a_batch() {
        assert!(alike(&message("a", None), &message("b", None)));
        assert!(alike(&message("a", Some("s")), &message("b", Some("s"))));
        assert!(!alike(&message("a", Some("s")), &message("b", Some("t"))));
        assert!(!alike(&message("a", None), &message("b", Some("s"))));
        let mut partitioned = DrainMessage::new("b", b"b".to_vec());
        partitioned.annotations.insert("x-opt-partition-key".into(), PropertyValue::String("p".into()));
        assert!(!alike(&message("a", None), &crate::convert::to_amqp(&partitioned)));
    }

    #[test]
    fn the_budget_follows_the_link_and_never_passes_256_kib() {
        assert_eq!(budget(None), 256 * 1024 - 1024);
        assert_eq!(budget(Some(64 * 1024)), 63 * 1024);
        assert_eq!(budget(Some(100 * 1024 * 1024)), 256 * 1024 - 1024);
        assert_eq!(budget(Some(10)), 0);
        assert_eq!(cost(&[0; 100]), 108);
    }

    #[test]
    fn the_envelope_carries_the_first_message_s_id_and_session_and_each_message_whole() {
        let (a, b) = (message("a", Some("s")), message("b", Some("s")));
        let sendable = envelope(&a, vec![encode(&a), encode(&b)]);
        assert_eq!(sendable.message_format, FORMAT);
        let props = sendable.message.properties.as_ref().unwrap();
        assert_eq!(props.message_id, a.properties.as_ref().unwrap().message_id);
        assert_eq!(props.group_id.as_deref(), Some("s"));
        assert_eq!(sendable.message.message_annotations, None, "no partition key, no annotations");
        let sections: Vec<Vec<u8>> = sendable.message.body.into_inner().into_iter().map(|d| d.0.into_vec()).collect();
        assert_eq!(sections, vec![encode(&a), encode(&b)]);
        let Deserializable(back): Deserializable<Message<Data>> = serde_amqp::from_slice(&sections[1]).unwrap();
        assert_eq!(back.properties, b.properties);
        assert_eq!(back.body, b.body);
    }

    #[test]
    fn the_envelope_keeps_the_partition_keys_and_no_other_annotation() {
        let mut m = DrainMessage::new("a", b"a".to_vec());
        m.annotations.insert("x-opt-partition-key".into(), PropertyValue::String("p".into()));
        m.annotations.insert("x-opt-scheduled-enqueue-time".into(), PropertyValue::Long(1));
        m.annotations.insert("custom".into(), PropertyValue::String("c".into()));
        let m = crate::convert::to_amqp(&m);
        let envelope = envelope(&m, vec![encode(&m), encode(&m)]).message.message_annotations.expect("the key");
        let keys: Vec<String> = envelope.0.keys().map(|k| format!("{k:?}")).collect();
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert!(keys[0].contains("x-opt-partition-key"), "{keys:?}");
    }
}

//! How many bytes one encoded AMQP value takes, read from its constructor alone
//! (AMQP 1.0 part 1, "Types": fixed widths, size-prefixed variable widths and
//! compounds, described types). The frame code uses it to find where a performative
//! ends and a transfer's payload begins, and the message code to cut a payload into
//! its sections without decoding (and re-encoding) the ones it passes on untouched.

/// Why a value could not be measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LenError {
    /// The bytes end before the value does.
    Truncated,
    /// A constructor byte that AMQP does not define.
    UnknownCode(u8),
    /// Described types nested deeper than any real message needs.
    TooDeep,
}

impl std::fmt::Display for LenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LenError::Truncated => f.write_str("the encoded value is truncated"),
            LenError::UnknownCode(c) => write!(f, "unknown AMQP format code 0x{c:02x}"),
            LenError::TooDeep => f.write_str("described types nested too deeply"),
        }
    }
}

/// Described types may nest this deep (a descriptor that is itself described).
const MAX_DEPTH: usize = 16;

/// The length of the value that starts at `bytes[0]`.
pub(crate) fn encoded_len(bytes: &[u8]) -> Result<usize, LenError> {
    len_at(bytes, 0)
}

fn len_at(bytes: &[u8], depth: usize) -> Result<usize, LenError> {
    if depth > MAX_DEPTH {
        return Err(LenError::TooDeep);
    }
    let code = *bytes.first().ok_or(LenError::Truncated)?;
    let len = match code {
        0x00 => {
            let descriptor = len_at(&bytes[1..], depth + 1)?;
            let value = len_at(bytes.get(1 + descriptor..).ok_or(LenError::Truncated)?, depth + 1)?;
            1 + descriptor + value
        }
        // null, true, false, uint0, ulong0, list0
        0x40..=0x45 => 1,
        // ubyte, byte, smalluint, smallulong, smallint, smalllong, boolean
        0x50..=0x56 => 2,
        // ushort, short
        0x60 | 0x61 => 3,
        // uint, int, float, char, decimal32
        0x70..=0x74 => 5,
        // ulong, long, double, timestamp, decimal64
        0x80..=0x84 => 9,
        // decimal128, uuid
        0x94 | 0x98 => 17,
        // vbin8, str8, sym8, list8, map8, array8: one size byte, then that many
        0xa0 | 0xa1 | 0xa3 | 0xc0 | 0xc1 | 0xe0 => 2 + usize::from(*bytes.get(1).ok_or(LenError::Truncated)?),
        // vbin32, str32, sym32, list32, map32, array32: four size bytes
        0xb0 | 0xb1 | 0xb3 | 0xd0 | 0xd1 | 0xf0 => {
            let size: [u8; 4] =
                bytes.get(1..5).ok_or(LenError::Truncated)?.try_into().map_err(|_| LenError::Truncated)?;
            5 + usize::try_from(u32::from_be_bytes(size)).map_err(|_| LenError::Truncated)?
        }
        other => return Err(LenError::UnknownCode(other)),
    };
    if len > bytes.len() { Err(LenError::Truncated) } else { Ok(len) }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::messaging::{ApplicationProperties, Header, Properties};
    use fe2o3_amqp_types::performatives::{Attach, Flow};
    use fe2o3_amqp_types::primitives::{Array, OrderedMap, Symbol, Timestamp, Uuid, Value};

    use super::*;

    /// Every encoding measures exactly as long as serde_amqp wrote it, with or without
    /// bytes after it.
    fn check<T: serde::Serialize>(value: &T) {
        let bytes = serde_amqp::to_vec(value).expect("encodes");
        assert_eq!(encoded_len(&bytes), Ok(bytes.len()), "{bytes:02x?}");
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xde, 0xad]);
        assert_eq!(encoded_len(&longer), Ok(bytes.len()));
        if bytes.len() > 1 {
            assert_eq!(encoded_len(&bytes[..bytes.len() - 1]), Err(LenError::Truncated), "{bytes:02x?}");
        }
    }

    #[test]
    fn primitives_and_compounds() {
        check(&Value::Null);
        check(&Value::Bool(true));
        check(&Value::Ubyte(7));
        check(&Value::Ushort(700));
        check(&Value::Uint(0));
        check(&Value::Uint(200));
        check(&Value::Uint(70_000));
        check(&Value::Ulong(1 << 40));
        check(&Value::Long(-5));
        check(&Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000)));
        check(&Value::Uuid(Uuid::from([3u8; 16])));
        check(&Value::String("x".repeat(10)));
        check(&Value::String("y".repeat(300)));
        check(&Value::Binary(vec![1u8; 256].into()));
        check(&Value::Symbol(Symbol::from("com.microsoft:dead-letter")));
        check(&Value::List(vec![Value::Int(1), Value::String("a".into())]));
        check(&Value::Array(Array(vec![Value::Uuid(Uuid::from([1u8; 16])); 3])));
        let mut map = OrderedMap::new();
        map.insert(Value::String("k".into()), Value::List(vec![Value::Null; 300]));
        check(&Value::Map(map));
    }

    #[test]
    fn described_sections_and_performatives() {
        check(&Header { delivery_count: 3, ..Header::default() });
        check(&Properties { message_id: Some(String::from("m-1").into()), ..Properties::default() });
        let mut ap = ApplicationProperties::default();
        ap.0.insert("k".into(), 1i64.into());
        check(&ap);
        check(&Flow {
            next_incoming_id: Some(1),
            incoming_window: 10,
            next_outgoing_id: 0,
            outgoing_window: 10,
            handle: Some(1.into()),
            delivery_count: Some(0),
            link_credit: Some(100),
            available: None,
            drain: false,
            echo: false,
            properties: None,
        });
        let attach: Attach = serde_amqp::from_slice(&serde_amqp::to_vec(&sample_attach()).unwrap()).unwrap();
        check(&attach);
    }

    fn sample_attach() -> Attach {
        use fe2o3_amqp_types::definitions::{ReceiverSettleMode, Role, SenderSettleMode};
        use fe2o3_amqp_types::messaging::{Source, Target};
        Attach {
            name: "link".into(),
            handle: 0.into(),
            role: Role::Receiver,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::Second,
            source: Some(Box::new(Source::builder().address("q").build())),
            target: Some(Box::new(Target::builder().address("t").build().into())),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    #[test]
    fn rejects_what_is_not_amqp() {
        assert_eq!(encoded_len(&[]), Err(LenError::Truncated));
        assert_eq!(encoded_len(&[0x01]), Err(LenError::UnknownCode(0x01)));
        assert_eq!(encoded_len(&[0xb1, 0xff, 0xff, 0xff, 0xff, b'a']), Err(LenError::Truncated));
        let deep = vec![0x00; 40];
        assert_eq!(encoded_len(&deep), Err(LenError::TooDeep));
    }
}

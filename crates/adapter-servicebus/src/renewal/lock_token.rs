//! Service Bus lock tokens: which GUID locks a peek-locked delivery, and until when.
//!
//! Service Bus puts the lock token in the delivery tag (16 bytes, in .NET's GUID
//! byte order: the first three fields little-endian) and usually also in the
//! `x-opt-lock-token` delivery annotation as an AMQP `uuid` (RFC 4122 order). The
//! annotation wins when present.

use std::fmt;

use fe2o3_amqp::types::messaging::annotations::{AnnotationKey, Annotations};
use fe2o3_amqp::types::primitives::Value;

/// The annotation that carries the lock token.
pub(crate) const LOCK_TOKEN_ANNOTATION: &str = "x-opt-lock-token";
/// The message annotation with the time the lock expires.
pub(crate) const LOCKED_UNTIL_ANNOTATION: &str = "x-opt-locked-until";

/// A lock token: a GUID, stored in RFC 4122 byte order (as an AMQP `uuid`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockToken([u8; 16]);

impl LockToken {
    /// From RFC 4122 bytes (an AMQP `uuid`).
    #[must_use]
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        LockToken(bytes)
    }

    /// The RFC 4122 bytes, as sent in a `uuid`.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// From a 16-byte delivery tag in .NET GUID byte order; `None` for any other length.
    #[must_use]
    pub fn from_delivery_tag(tag: &[u8]) -> Option<Self> {
        let tag: [u8; 16] = tag.try_into().ok()?;
        let mut b = tag;
        b[0..4].reverse();
        b[4..6].reverse();
        b[6..8].reverse();
        Some(LockToken(b))
    }

    /// The lock token of a delivery: the `x-opt-lock-token` annotation (delivery
    /// annotations first, then message annotations), else the delivery tag.
    #[must_use]
    pub fn of_delivery(
        tag: &[u8],
        delivery_annotations: Option<&Annotations>,
        message_annotations: Option<&Annotations>,
    ) -> Option<Self> {
        [delivery_annotations, message_annotations]
            .into_iter()
            .flatten()
            .find_map(|a| match a.get(&LOCK_TOKEN_ANNOTATION as &dyn AnnotationKey) {
                Some(Value::Uuid(u)) => Some(LockToken(u.clone().into_inner())),
                _ => None,
            })
            .or_else(|| Self::from_delivery_tag(tag))
    }
}

/// When the lock expires, in Unix milliseconds, from `x-opt-locked-until`.
pub(crate) fn locked_until_ms(message_annotations: Option<&Annotations>) -> Option<i64> {
    match message_annotations?.get(&LOCKED_UNTIL_ANNOTATION as &dyn AnnotationKey)? {
        Value::Timestamp(t) => Some(t.milliseconds()),
        _ => None,
    }
}

/// Now, in Unix milliseconds: the clock `x-opt-locked-until` is measured on.
pub(crate) fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Whether a lock that lasts until `locked_until_ms` (`None`: the broker did not
/// say) ran out at `now_ms`.
pub(crate) fn expired(locked_until_ms: Option<i64>, now_ms: i64) -> bool {
    locked_until_ms.is_some_and(|until| until <= now_ms)
}

/// `00112233-4455-6677-8899-aabbccddeeff`.
impl fmt::Display for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for LockToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockToken({self})")
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::messaging::annotations::OwnedKey;
    use fe2o3_amqp::types::primitives::{Timestamp, Uuid};

    use super::*;

    /// `Guid.Parse("00112233-4455-6677-8899-aabbccddeeff").ToByteArray()` in .NET: the
    /// first three fields little-endian, the last eight bytes as they are.
    const DOTNET_TAG: [u8; 16] =
        [0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
    const RFC: [u8; 16] =
        [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];

    fn annotated(token: [u8; 16]) -> Annotations {
        let mut a = Annotations::new();
        a.insert(OwnedKey::from(LOCK_TOKEN_ANNOTATION), Value::Uuid(Uuid::from(token)));
        a
    }

    #[test]
    fn from_a_16_byte_delivery_tag_in_dotnet_order() {
        let token = LockToken::from_delivery_tag(&DOTNET_TAG).unwrap();
        assert_eq!(token.as_bytes(), &RFC);
        assert_eq!(token.to_string(), "00112233-4455-6677-8899-aabbccddeeff");
        assert_eq!(LockToken::from_delivery_tag(&[1, 2, 3]), None, "RabbitMQ's short tags are no lock tokens");
        assert_eq!(LockToken::from_delivery_tag(&[0; 17]), None);
    }

    #[test]
    fn the_annotation_wins_over_the_tag() {
        let other = [7u8; 16];
        let check = |da: Option<&Annotations>, ma: Option<&Annotations>, tag: &[u8], want: Option<[u8; 16]>| {
            assert_eq!(LockToken::of_delivery(tag, da, ma).map(|t| *t.as_bytes()), want);
        };
        check(Some(&annotated(other)), None, &DOTNET_TAG, Some(other));
        check(None, Some(&annotated(other)), &DOTNET_TAG, Some(other));
        check(Some(&annotated(other)), Some(&annotated([9; 16])), &DOTNET_TAG, Some(other));
        check(None, None, &DOTNET_TAG, Some(RFC));
        check(Some(&Annotations::new()), None, &DOTNET_TAG, Some(RFC));
        check(None, None, &[0, 0, 0, 1], None);
        // A lock-token annotation of the wrong type is ignored.
        let mut wrong = Annotations::new();
        wrong.insert(OwnedKey::from(LOCK_TOKEN_ANNOTATION), Value::String("x".into()));
        check(Some(&wrong), None, &DOTNET_TAG, Some(RFC));
    }

    #[test]
    fn locked_until() {
        let mut a = Annotations::new();
        assert_eq!(locked_until_ms(Some(&a)), None);
        a.insert(
            OwnedKey::from(LOCKED_UNTIL_ANNOTATION),
            Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_123)),
        );
        assert_eq!(locked_until_ms(Some(&a)), Some(1_700_000_000_123));
        assert_eq!(locked_until_ms(None), None);
    }

    #[test]
    fn expiry() {
        assert!(!expired(None, i64::MAX), "a lock the broker did not time never expires here");
        assert!(!expired(Some(1_001), 1_000));
        assert!(expired(Some(1_000), 1_000), "a lock ends at its time");
        assert!(expired(Some(999), 1_000));
    }
}

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;

/// An application property or annotation value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PropertyValue {
    /// Text.
    String(String),
    /// A symbolic name (ASCII text the protocol keeps apart from strings).
    Symbol(String),
    /// A signed integer.
    Long(i64),
    /// An unsigned integer too large for [`PropertyValue::Long`].
    Ulong(u64),
    /// A float.
    Double(f64),
    /// A flag.
    Bool(bool),
    /// Bytes.
    Binary(Vec<u8>),
    /// A point in time, milliseconds since the Unix epoch.
    Timestamp(i64),
    /// A UUID, its 16 bytes in network order.
    Uuid([u8; 16]),
}

/// A message id or correlation id, with its type: ids of different types are
/// different ids (the string `"42"` and the number 42 name two messages), and a
/// resubmit keeps the type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageId {
    /// Text (the usual case).
    String(String),
    /// An unsigned number.
    Ulong(u64),
    /// A UUID, its 16 bytes in network order.
    Uuid([u8; 16]),
    /// Bytes.
    Binary(Vec<u8>),
}

impl MessageId {
    /// The reason the tick gives when it dead-letters a message that has no id.
    pub const MISSING_REASON: &'static str = "MissingMessageId";

    /// A short stable name of the type (`string`, `ulong`, `uuid`, `binary`), for
    /// logs and for a store that keeps the type beside the id.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        match self {
            MessageId::String(_) => "string",
            MessageId::Ulong(_) => "ulong",
            MessageId::Uuid(_) => "uuid",
            MessageId::Binary(_) => "binary",
        }
    }
}

impl From<&str> for MessageId {
    fn from(id: &str) -> Self {
        MessageId::String(id.to_owned())
    }
}

impl From<String> for MessageId {
    fn from(id: String) -> Self {
        MessageId::String(id)
    }
}

impl From<u64> for MessageId {
    fn from(id: u64) -> Self {
        MessageId::Ulong(id)
    }
}

/// A string id as it is; other types tagged with their type (`ulong:42`,
/// `uuid:00112233-4455-6677-8899-aabbccddeeff`, `binary:ab01`), for logs.
impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageId::String(s) => f.write_str(s),
            MessageId::Ulong(n) => write!(f, "ulong:{n}"),
            MessageId::Uuid(b) => {
                f.write_str("uuid:")?;
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            MessageId::Binary(b) => {
                f.write_str("binary:")?;
                b.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
            }
        }
    }
}

/// A message as received and as resubmitted: everything a target accepts from a
/// sender is kept. It will grow: build one with [`Message::new`] (or `default`) and
/// set the fields you need.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct Message {
    /// The message id; the atomic claim is keyed on it. `None` when the sender set
    /// none: such a message is dead-lettered, never submitted.
    pub message_id: Option<MessageId>,
    /// The body bytes.
    pub body: Vec<u8>,
    /// MIME content type.
    pub content_type: Option<String>,
    /// Content encoding of the body (e.g. `gzip`).
    pub content_encoding: Option<String>,
    /// Correlation id.
    pub correlation_id: Option<MessageId>,
    /// Subject / label.
    pub subject: Option<String>,
    /// The address the sender meant the message for.
    pub to: Option<String>,
    /// Where replies go.
    pub reply_to: Option<String>,
    /// The group (Service Bus: the session) the message belongs to.
    pub group_id: Option<String>,
    /// The message's position in its group.
    pub group_sequence: Option<u32>,
    /// The group replies belong to (Service Bus: the reply-to session).
    pub reply_to_group_id: Option<String>,
    /// When the sender created the message, milliseconds since the Unix epoch.
    pub creation_time: Option<i64>,
    /// When the message expires, milliseconds since the Unix epoch.
    pub absolute_expiry_time: Option<i64>,
    /// How long the message lives in a queue.
    pub time_to_live: Option<Duration>,
    /// Relative priority (0 to 9 in AMQP; higher first).
    pub priority: Option<u8>,
    /// Application properties.
    pub properties: BTreeMap<String, PropertyValue>,
    /// Message annotations the sender set (broker-owned ones, such as sequence
    /// numbers and lock times, are not kept).
    pub annotations: BTreeMap<String, PropertyValue>,
}

impl Message {
    /// A message with `id` and `body`, every other field empty.
    #[must_use]
    pub fn new(id: impl Into<MessageId>, body: impl Into<Vec<u8>>) -> Self {
        Message { message_id: Some(id.into()), body: body.into(), ..Message::default() }
    }
}

/// An opaque handle for settling one delivery with the source that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryHandle(pub u64);

/// A received, locked message.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Handle to settle it with.
    pub handle: DeliveryHandle,
    /// The message.
    pub message: Message,
    /// How many times it was delivered before (0 on first delivery), when known.
    pub delivery_count: u32,
}

/// What a source can do beyond the minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// [`MessageSource::renew_lock`] works (Service Bus); generic AMQP brokers hold
    /// the delivery until the link or session ends instead.
    pub lock_renewal: bool,
    /// [`MessageSource::release`] gives a message back without counting a delivery
    /// (Service Bus's `released`), where [`MessageSource::abandon`] counts one; the
    /// tick releases a message it must not submit now only because another holder's
    /// claim is pending (the message did not fail).
    pub release: bool,
}

/// A peek-lock queue receiver.
///
/// A received delivery is locked: nobody else gets it until it is settled with
/// exactly one of complete / abandon / release / dead-letter, or its lock expires
/// (then it is redelivered).
///
/// `testkit::contract::message_source` checks every rule below against a queue the
/// test feeds; each rule's name follows its sentence.
///
/// # Errors
///
/// A source that cannot be reached answers `Err`; deliveries already received stay
/// locked and come back after their lock expires.
#[async_trait]
pub trait MessageSource: Send + Sync {
    /// What this source supports.
    fn capabilities(&self) -> Capabilities;

    /// Receive up to `max` messages, waiting at most `max_wait` for the first; returns
    /// what arrived (possibly nothing).
    ///
    /// MUST NOT return more than `max` (rule `source.receive.max`). Every message
    /// put on the queue MUST arrive, once, with its body, id and headers intact
    /// (rule `source.receive.intact`).
    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError>;

    /// Remove the message for good: it MUST NOT be delivered again
    /// (rule `source.complete.removes`).
    ///
    /// # Errors
    ///
    /// MUST answer [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) when the
    /// lock expired or the handle is unknown or already settled; the message will be
    /// (or was) redelivered (rule `source.settle.once`).
    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError>;

    /// Unlock the message: it MUST be delivered again (rule `source.abandon.redelivers`).
    ///
    /// # Errors
    ///
    /// As [`MessageSource::complete`].
    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError>;

    /// Give the message back as it was, without counting a delivery: when
    /// `capabilities().release` is true, it MUST be delivered again with the
    /// `delivery_count` it had (rule `source.release.uncounted`), and with it false
    /// answer [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) (a broker
    /// that counts every return only has [`MessageSource::abandon`]).
    ///
    /// # Errors
    ///
    /// As [`MessageSource::complete`], and `Unsupported` as above.
    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError>;

    /// Move the message to the dead-letter queue with a reason and a description: it
    /// MUST arrive there and not on the queue again (rule `source.dead-letter`).
    ///
    /// # Errors
    ///
    /// As [`MessageSource::complete`].
    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError>;

    /// Extend the delivery's lock; returns the new lock duration.
    ///
    /// # Errors
    ///
    /// MUST answer [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) when
    /// `capabilities().lock_renewal` is false, and renew a live lock when it is true
    /// (rule `source.renew.capability`); `LockLost` as for [`MessageSource::complete`].
    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError>;

    /// Give back what the source holds for receives to come (credit, prefetched
    /// messages) until the next receive, so that between ticks the process sits on no
    /// message another holder could drain. The beat calls it between ticks under a
    /// single-flight lease and while the claim store is down. Does nothing by default.
    async fn park(&self) {}
}

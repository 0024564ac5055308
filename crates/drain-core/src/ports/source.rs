use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::PortError;

/// An application property value.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// Text.
    String(String),
    /// A signed integer.
    Long(i64),
    /// A float.
    Double(f64),
    /// A flag.
    Bool(bool),
    /// Bytes.
    Binary(Vec<u8>),
}

/// A message as received and as resubmitted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    /// The message id; the atomic claim is keyed on it. `None` when the sender set
    /// none: such a message is dead-lettered, never submitted.
    pub message_id: Option<String>,
    /// The body bytes.
    pub body: Vec<u8>,
    /// MIME content type.
    pub content_type: Option<String>,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Subject / label.
    pub subject: Option<String>,
    /// Application properties.
    pub properties: BTreeMap<String, PropertyValue>,
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
}

/// A peek-lock queue receiver.
///
/// A received delivery is locked: nobody else gets it until it is settled with
/// exactly one of complete / abandon / dead-letter, or its lock expires (then it is
/// redelivered).
#[async_trait]
pub trait MessageSource: Send + Sync {
    /// What this source supports.
    fn capabilities(&self) -> Capabilities;

    /// Receive up to `max` messages, waiting at most `max_wait` for the first; returns
    /// what arrived (possibly nothing). MUST NOT return more than `max`.
    ///
    /// # Errors
    /// MUST return `Err` when the source cannot be reached; deliveries already
    /// received stay locked and come back after their lock expires.
    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError>;

    /// Remove the message for good.
    ///
    /// # Errors
    /// MUST return [`crate::ErrorKind::LockLost`] when the lock expired or the handle
    /// is unknown or already settled; the message will be (or was) redelivered.
    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError>;

    /// Unlock the message for redelivery (delivery count + 1).
    ///
    /// # Errors
    /// As [`MessageSource::complete`].
    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError>;

    /// Move the message to the dead-letter queue with a reason and a description.
    ///
    /// # Errors
    /// As [`MessageSource::complete`].
    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError>;

    /// Extend the delivery's lock; returns the new lock duration.
    ///
    /// # Errors
    /// MUST return [`crate::ErrorKind::Unsupported`] when `capabilities().lock_renewal`
    /// is false, and `LockLost` as for [`MessageSource::complete`].
    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError>;
}

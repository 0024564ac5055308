//! What tests can see of the broker without a client: counts per queue, each
//! message with its delivery count and annotations, and broker-wide counters.

use std::collections::BTreeMap;

use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::primitives::{SimpleValue, Value};

use crate::message::{id_string, uuid_string};
use crate::queue::{DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON, Entry, LockToken, Queue, QueueCounters, SubQueue};

/// Counts of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages available in the queue.
    pub active: usize,
    /// Messages of the queue locked by a receiver now.
    pub locked: usize,
    /// Messages in the dead-letter sub-queue (available or locked).
    pub dead_lettered: usize,
    /// Deferred messages of the queue not locked now.
    pub deferred: usize,
    /// Scheduled messages not due yet.
    pub scheduled: usize,
    /// What happened since the queue was created.
    pub counters: QueueCounters,
}

impl QueueStats {
    pub(crate) fn of(queue: &Queue) -> QueueStats {
        let (active, locked) = queue.counts(SubQueue::Main);
        let (dl_active, dl_locked) = queue.counts(SubQueue::DeadLetter);
        QueueStats {
            active,
            locked,
            dead_lettered: dl_active + dl_locked + queue.dead.deferred.len(),
            deferred: queue.main.deferred.len(),
            scheduled: queue.scheduled.len(),
            counters: queue.counters,
        }
    }
}

/// One message as the broker holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageInfo {
    /// Its sequence number in the queue.
    pub sequence_number: i64,
    /// The message id (strings as they are; other types as Service Bus shows them).
    pub message_id: Option<String>,
    /// Failed deliveries so far (the header's delivery-count of its next delivery).
    pub delivery_count: u32,
    /// When it was enqueued, Unix milliseconds (broker clock).
    pub enqueued_time_ms: i64,
    /// The lock token (`8-4-4-4-12` hex) and until when it holds, when locked.
    pub lock: Option<(String, i64)>,
    /// Message annotations as its next delivery carries them (the broker's
    /// `x-opt-*` included), values rendered as text.
    pub annotations: BTreeMap<String, String>,
    /// Application properties, rendered as text.
    pub application_properties: BTreeMap<String, String>,
    /// `DeadLetterReason`, in the dead-letter sub-queue.
    pub dead_letter_reason: Option<String>,
    /// `DeadLetterErrorDescription`, in the dead-letter sub-queue.
    pub dead_letter_description: Option<String>,
    /// The body: Data sections concatenated (an amqp-value string or binary as its bytes).
    pub body: Vec<u8>,
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Symbol(s) => s.0.clone(),
        Value::Long(n) => n.to_string(),
        Value::Int(n) => n.to_string(),
        Value::Uint(n) => n.to_string(),
        Value::Ulong(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Timestamp(t) => t.milliseconds().to_string(),
        Value::Uuid(u) => uuid_string(u.as_inner()),
        other => format!("{other:?}"),
    }
}

fn render_simple(v: &SimpleValue) -> String {
    match v {
        SimpleValue::String(s) => s.clone(),
        SimpleValue::Long(n) => n.to_string(),
        SimpleValue::Int(n) => n.to_string(),
        SimpleValue::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

impl MessageInfo {
    pub(crate) fn of(entry: &Entry, lock: Option<(&LockToken, i64)>) -> MessageInfo {
        let m = &entry.message;
        let mut annotations: BTreeMap<String, String> = m
            .annotations
            .iter()
            .map(|(k, v)| {
                let key = match k {
                    OwnedKey::Symbol(s) => s.0.clone(),
                    OwnedKey::Ulong(n) => n.to_string(),
                };
                (key, render(v))
            })
            .collect();
        annotations.insert("x-opt-sequence-number".into(), entry.sequence.to_string());
        annotations.insert("x-opt-enqueued-time".into(), entry.enqueued_ms.to_string());
        if let Some((token, until)) = lock {
            annotations.insert("x-opt-lock-token".into(), uuid_string(token));
            annotations.insert("x-opt-locked-until".into(), until.to_string());
        }
        let application_properties = m
            .application_properties
            .as_ref()
            .map(|ap| ap.0.iter().map(|(k, v)| (k.clone(), render_simple(v))).collect())
            .unwrap_or_default();
        MessageInfo {
            sequence_number: entry.sequence,
            message_id: m.message_id().map(id_string),
            delivery_count: entry.delivery_count,
            enqueued_time_ms: entry.enqueued_ms,
            lock: lock.map(|(t, until)| (uuid_string(t), until)),
            annotations,
            application_properties,
            dead_letter_reason: m.string_property(DEAD_LETTER_REASON).map(str::to_owned),
            dead_letter_description: m.string_property(DEAD_LETTER_DESCRIPTION).map(str::to_owned),
            body: m.body(),
        }
    }
}

/// Broker-wide counts since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerCounters {
    /// TCP connections accepted.
    pub connections: u64,
    /// SAS tokens accepted on `$cbs`.
    pub tokens_accepted: u64,
    /// SAS tokens refused (401).
    pub tokens_refused: u64,
    /// Attaches refused (no token, unknown entity, sending to a dead-letter queue).
    pub links_refused: u64,
    /// Links detached because their token expired.
    pub links_expired: u64,
    /// `com.microsoft:renew-lock` requests.
    pub renew_lock_requests: u64,
    /// `$management` requests for operations the broker does not model (answered 501).
    pub unsupported_requests: u64,
    /// Transfers of messages from producers (a batch is one), kept or refused.
    pub transfers_received: u64,
    /// Of those, batches (message format `0x80013700`).
    pub batches_received: u64,
}

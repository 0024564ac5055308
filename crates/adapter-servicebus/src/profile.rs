//! What differs between the broker profiles, as data: link addresses, the outcome
//! each settlement sends, and the capabilities the source reports.

use drain_core::ports::Capabilities;
use fe2o3_amqp::link::receiver::TerminalDeliveryState;
use fe2o3_amqp::types::definitions::{Error as AmqpError, ErrorCondition, Fields};
use fe2o3_amqp::types::messaging::{Accepted, Modified, Rejected, Released};
use fe2o3_amqp::types::primitives::{Symbol, Value};

use crate::endpoint::Profile;

/// The error condition that tells Service Bus to dead-letter a rejected message.
pub const DEAD_LETTER_CONDITION: &str = "com.microsoft:dead-letter";
/// `error.info` key with the dead-letter reason (Service Bus shows it on the DLQ copy).
pub const DEAD_LETTER_REASON: &str = "DeadLetterReason";
/// `error.info` key with the dead-letter description.
pub const DEAD_LETTER_DESCRIPTION: &str = "DeadLetterErrorDescription";

/// The application properties Service Bus sets on a dead-lettered message.
pub(crate) const DEAD_LETTER_PROPERTIES: &[&str] = &[DEAD_LETTER_REASON, DEAD_LETTER_DESCRIPTION, "DeadLetterSource"];

/// How a delivery is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle<'a> {
    /// Sent through fe2o3's disposer as `accepted` (see `source::held`); kept here so
    /// the outcome table is whole and tested.
    #[cfg_attr(not(test), allow(dead_code))]
    Complete,
    Abandon,
    DeadLetter {
        reason: &'a str,
        description: &'a str,
    },
}

impl Settle<'_> {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Settle::Complete => "complete",
            Settle::Abandon => "abandon",
            Settle::DeadLetter { .. } => "dead-letter",
        }
    }
}

impl Profile {
    /// What a source of this profile supports.
    #[must_use]
    pub fn capabilities(self) -> Capabilities {
        // Service Bus's `released` counts no delivery; RabbitMQ's abandon already is
        // `released`, which a quorum queue counts as one.
        Capabilities { lock_renewal: self == Profile::ServiceBus, release: self == Profile::ServiceBus }
    }

    /// The link address of queue `entity`: the entity path on Service Bus,
    /// `/amq/queue/<entity>` on RabbitMQ (other forms re-declare the queue and fail on
    /// queues with arguments).
    #[must_use]
    pub fn queue_address(self, entity: &str) -> String {
        match self {
            Profile::ServiceBus => entity.to_owned(),
            Profile::Generic => format!("/amq/queue/{entity}"),
        }
    }

    /// The address of `entity`'s request/response management node (Service Bus).
    pub(crate) fn management_address(entity: &str) -> String {
        format!("{entity}/$management")
    }

    /// The outcome sent for `settle`.
    pub(crate) fn outcome(self, settle: Settle<'_>) -> TerminalDeliveryState {
        match (self, settle) {
            (_, Settle::Complete) => TerminalDeliveryState::Accepted(Accepted {}),
            // Service Bus: unlock and count a failed delivery.
            (Profile::ServiceBus, Settle::Abandon) => TerminalDeliveryState::Modified(Modified {
                delivery_failed: Some(true),
                undeliverable_here: None,
                message_annotations: None,
            }),
            // RabbitMQ offers only accepted/rejected/released; `modified` ends the session.
            (Profile::Generic, Settle::Abandon) => TerminalDeliveryState::Released(Released {}),
            (Profile::ServiceBus, Settle::DeadLetter { reason, description }) => {
                TerminalDeliveryState::Rejected(Rejected { error: Some(dead_letter_error(reason, description)) })
            }
            // The queue's dead-letter exchange routes it; RabbitMQ has nowhere to keep a reason.
            (Profile::Generic, Settle::DeadLetter { .. }) => TerminalDeliveryState::Rejected(Rejected { error: None }),
        }
    }
}

/// `rejected` error of a Service Bus dead-letter: condition `com.microsoft:dead-letter`,
/// info `DeadLetterReason` and `DeadLetterErrorDescription`.
pub(crate) fn dead_letter_error(reason: &str, description: &str) -> AmqpError {
    let mut info = Fields::new();
    info.insert(Symbol::from(DEAD_LETTER_REASON), Value::String(reason.to_owned()));
    info.insert(Symbol::from(DEAD_LETTER_DESCRIPTION), Value::String(description.to_owned()));
    AmqpError {
        condition: ErrorCondition::Custom(Symbol::from(DEAD_LETTER_CONDITION)),
        description: None,
        info: Some(Box::new(info)),
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::messaging::DeliveryState;

    use super::*;

    #[test]
    fn capabilities_and_addresses() {
        assert!(Profile::ServiceBus.capabilities().lock_renewal);
        assert!(!Profile::Generic.capabilities().lock_renewal);
        assert!(Profile::ServiceBus.capabilities().release);
        assert!(!Profile::Generic.capabilities().release);
        assert_eq!(Profile::ServiceBus.queue_address("requests"), "requests");
        assert_eq!(Profile::Generic.queue_address("requests"), "/amq/queue/requests");
        assert_eq!(Profile::management_address("requests"), "requests/$management");
    }

    #[test]
    fn outcomes_per_profile() {
        let check = |profile: Profile, settle: Settle<'_>, want: &str| {
            let got = match DeliveryState::from(profile.outcome(settle)) {
                DeliveryState::Accepted(_) => "accepted".to_owned(),
                DeliveryState::Released(_) => "released".to_owned(),
                DeliveryState::Modified(m) => {
                    format!("modified(failed={:?},here={:?})", m.delivery_failed, m.undeliverable_here)
                }
                DeliveryState::Rejected(r) => format!("rejected(error={})", r.error.is_some()),
                other => format!("{other:?}"),
            };
            assert_eq!(got, want, "{profile:?} {settle:?}");
        };
        let dl = Settle::DeadLetter { reason: "r", description: "d" };
        check(Profile::ServiceBus, Settle::Complete, "accepted");
        check(Profile::ServiceBus, Settle::Abandon, "modified(failed=Some(true),here=None)");
        check(Profile::ServiceBus, dl, "rejected(error=true)");
        check(Profile::Generic, Settle::Complete, "accepted");
        check(Profile::Generic, Settle::Abandon, "released");
        check(Profile::Generic, dl, "rejected(error=false)");
    }

    #[test]
    fn dead_letter_fields() {
        let e = dead_letter_error("MissingMessageId", "no id");
        assert_eq!(e.condition, ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")));
        let info = e.info.expect("info");
        assert_eq!(info.get(&Symbol::from("DeadLetterReason")), Some(&Value::String("MissingMessageId".into())));
        assert_eq!(info.get(&Symbol::from("DeadLetterErrorDescription")), Some(&Value::String("no id".into())));
        assert_eq!(info.len(), 2);
        // On the wire: a described error (0x00 0x53 0x1d) whose condition is the symbol.
        let bytes = serde_amqp::to_vec(&DeliveryState::from(
            Profile::ServiceBus.outcome(Settle::DeadLetter { reason: "MissingMessageId", description: "no id" }),
        ))
        .unwrap();
        let hay = String::from_utf8_lossy(&bytes);
        for needle in
            ["com.microsoft:dead-letter", "DeadLetterReason", "MissingMessageId", "DeadLetterErrorDescription"]
        {
            assert!(hay.contains(needle), "{needle} is encoded");
        }
        assert_eq!(&bytes[..3], &[0x00, 0x53, 0x25], "rejected is descriptor 0x25");
    }
}

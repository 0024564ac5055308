//! Lock expiry (Service Bus): each delivery's lock token and `x-opt-locked-until`
//! are read as it arrives, and one whose lock ran out while it waited in `ready` is
//! never handed out: the broker redelivers it, and settling it would only end in
//! `LockLost`. Generic brokers hold a delivery until its link ends: no lock here.

use std::collections::VecDeque;

use drain_core::ports::Delivery;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;

use super::Actor;
use crate::endpoint::Profile;
use crate::renewal::{self, LockToken};
use crate::source::held::Deliveries;

impl Actor {
    /// The lock token of `d` and when its lock expires (Unix ms); none on generic brokers.
    pub(super) fn lock_of(&self, d: &fe2o3_amqp::Delivery<Body<Value>>) -> (Option<LockToken>, Option<i64>) {
        if self.endpoint.profile != Profile::ServiceBus {
            return (None, None);
        }
        let message = d.message();
        let da = message.delivery_annotations.as_ref().map(|a| &a.0);
        let ma = message.message_annotations.as_ref().map(|a| &a.0);
        (LockToken::of_delivery(d.delivery_tag(), da, ma), renewal::locked_until_ms(ma))
    }
}

/// The next delivery of `ready` whose lock has not run out at `now_ms`; expired ones
/// are dropped and forgotten in `held` on the way.
pub(super) fn next_ready(
    ready: &mut VecDeque<(Delivery, Option<i64>)>,
    held: &Deliveries,
    now_ms: i64,
) -> Option<Delivery> {
    while let Some((d, locked_until_ms)) = ready.pop_front() {
        if renewal::expired(locked_until_ms, now_ms) {
            // Reported, not dropped in silence: the broker redelivers it.
            tracing::warn!(message_id = ?d.message.message_id, "a prefetched delivery's lock ran out before a receive took it; the broker redelivers it");
            held.expired_waiting(d.handle.0);
            continue;
        }
        return Some(d);
    }
    None
}

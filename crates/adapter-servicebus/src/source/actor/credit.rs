//! Credit and receives: deliveries come in on the credit granted, wait in `ready`,
//! and go to the receive at the head of the queue; credit is granted again, in
//! windows, for what is wanted now.

use drain_core::PortError;
use drain_core::ports::{Delivery, DeliveryHandle};
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Actor;
use super::lock_expiry::next_ready;
use crate::convert;
use crate::error;
use crate::profile::DEAD_LETTER_PROPERTIES;
use crate::renewal::unix_now_ms;
use crate::source::held::Tracked;

/// A receive call waiting for messages.
pub(super) struct Pending {
    max: usize,
    deadline: Instant,
    /// Once the first message arrived: stop waiting for more at this time.
    pub(super) linger_until: Option<Instant>,
    pub(super) got: Vec<Delivery>,
    pub(super) reply: oneshot::Sender<Result<Vec<Delivery>, PortError>>,
}

impl Pending {
    pub(super) fn wake_at(&self) -> Instant {
        self.linger_until.map_or(self.deadline, |l| l.min(self.deadline))
    }
}

impl Actor {
    /// Queue a receive of up to `max` deliveries (none: answered at once).
    pub(super) fn receive(
        &mut self,
        max: usize,
        deadline: Instant,
        reply: oneshot::Sender<Result<Vec<Delivery>, PortError>>,
    ) {
        if max == 0 {
            let _ = reply.send(Ok(Vec::new()));
        } else {
            self.unpark();
            self.pending.push_back(Pending { max, deadline, linger_until: None, got: Vec::new(), reply });
        }
    }

    /// A delivery arrived: hold it and put it in `ready`.
    pub(super) fn on_delivery(&mut self, d: fe2o3_amqp::Delivery<Body<Value>>) {
        let info = DeliveryInfo::from(&d);
        let (token, locked_until_ms) = self.lock_of(&d);
        let (mut message, delivery_count) = convert::from_amqp(d.into_message());
        if self.opts.drop_dead_letter_properties {
            for name in DEAD_LETTER_PROPERTIES {
                message.properties.remove(*name);
            }
        }
        let handle = self.next_handle;
        self.next_handle += 1;
        self.held.insert(handle, Tracked { generation: self.generation, info, token, locked_until_ms });
        self.ready.push_back((Delivery { handle: DeliveryHandle(handle), message, delivery_count }, locked_until_ms));
    }

    /// Hand buffered deliveries to the head receive, answer it when full, and set the
    /// link credit for what is wanted now.
    pub(super) async fn progress(&mut self) {
        let now = Instant::now();
        let now_ms = unix_now_ms();
        while let Some(head) = self.pending.front_mut() {
            while head.got.len() < head.max {
                let Some(d) = next_ready(&mut self.ready, &self.held, now_ms) else { break };
                head.got.push(d);
            }
            if !head.got.is_empty() && head.linger_until.is_none() {
                head.linger_until = Some(now + self.opts.linger);
            }
            if head.got.len() < head.max {
                break;
            }
            if let Some(head) = self.pending.pop_front() {
                let _ = head.reply.send(Ok(head.got));
            }
        }
        let Some(link) = &mut self.link else { return };
        let prefetch = self.opts.prefetch;
        let want = match self.pending.front() {
            Some(head) => prefetch.max(u32::try_from(head.max - head.got.len()).unwrap_or(u32::MAX)),
            None => prefetch.saturating_sub(u32::try_from(self.ready.len()).unwrap_or(u32::MAX)),
        };
        // Credit is granted in windows, and only once the previous window is used up.
        // Changing it while transfers are in flight races: lowering it makes fe2o3
        // refuse them (transfer-limit-exceeded) and raising it lets RabbitMQ send
        // more than granted; either way deliveries stay unacknowledged until the link
        // ends. Credit left over when a receive returns early stays open; what
        // arrives on it waits in `ready` for the next receive.
        if want > 0
            && link.receiver.credit() == 0
            && let Err(e) = link.receiver.set_credit(want).await
        {
            let err = error::disposition_error(&self.what, &e);
            self.link_lost(err).await;
        }
    }

    /// The head receive's wait is over: answer with what arrived, or with the
    /// connection error when nothing could arrive.
    pub(super) fn finish_head(&mut self) {
        let Some(head) = self.pending.pop_front() else { return };
        let result = if head.got.is_empty() && self.link.is_none() { Err(self.not_connected()) } else { Ok(head.got) };
        let _ = head.reply.send(result);
    }
}

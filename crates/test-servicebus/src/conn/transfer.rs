//! What the broker receives: messages for a queue or a topic (one transfer, several
//! frames, or a batch of many messages, kept or refused whole), and requests to
//! `$cbs` and `$management`. Every
//! unsettled transfer is answered at once with a settled disposition (`accepted`,
//! also for a duplicate that is dropped), which is how Microsoft's SDKs know a send
//! completed.

use fe2o3_amqp_types::definitions::{AmqpError, ErrorCondition, Fields, LinkError, Role, SessionError};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected};
use fe2o3_amqp_types::performatives::{Disposition, Performative, Transfer};

use super::link::{INCOMING_WINDOW, Kind, LINK_CREDIT, Node, Partial};
use super::{Conn, MAX_MESSAGE_SIZE, error};
use crate::message::{BATCH_FORMAT, StoredMessage, parse_transfer};
use crate::queue::NO_SESSION_ID;
use crate::state::{Routed, State, bump};

/// A refused send. The error carries an (empty) info map: Microsoft's Python SDK
/// reads the error as a list of three fields and fails on a shorter one.
fn rejection(condition: ErrorCondition, description: &str) -> DeliveryState {
    let mut err = error(condition, description);
    err.info = Some(Box::new(Fields::new()));
    DeliveryState::Rejected(Rejected { error: Some(err) })
}

/// Why `entity` would refuse `message` (a session entity, or a topic with a
/// matching session subscription, and no session id).
fn refusal(state: &State, entity: &str, message: &StoredMessage) -> Option<String> {
    if message.session_id().is_some() {
        return None;
    }
    let needs = |key: &str| state.queue(key).is_some_and(|q| q.config.requires_session);
    let refused = match state.topics.get(entity) {
        Some(topic) => topic.routes(message).iter().any(|k| needs(k)),
        None => needs(entity),
    };
    refused.then(|| NO_SESSION_ID.to_owned())
}

impl Conn {
    pub(super) fn on_transfer(&mut self, channel: u16, t: Transfer, payload: &[u8]) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        session.next_incoming_id = session.next_incoming_id.wrapping_add(1);
        session.incoming_window = session.incoming_window.saturating_sub(1);
        let mut session_flow = false;
        if session.incoming_window < INCOMING_WINDOW / 2 {
            session.incoming_window = INCOMING_WINDOW;
            session_flow = true;
        }
        let handle = t.handle.0;
        let Some(link) = session.links.get_mut(&handle) else {
            self.end_session(
                channel,
                error(
                    ErrorCondition::SessionError(SessionError::UnattachedHandle),
                    "transfer on a handle with no link",
                ),
            );
            return;
        };
        if link.kind.broker_sends() {
            self.detach_with(
                channel,
                handle,
                error(ErrorCondition::AmqpError(AmqpError::NotAllowed), "this link only receives"),
            );
            return;
        }
        if t.aborted {
            link.partial = None;
            return;
        }
        let partial = link.partial.get_or_insert_with(Partial::default);
        if partial.delivery_id.is_none() {
            partial.delivery_id = t.delivery_id;
            partial.format = t.message_format.unwrap_or(0);
        }
        partial.settled |= t.settled == Some(true);
        partial.payload.extend_from_slice(payload);
        if partial.payload.len() as u64 > MAX_MESSAGE_SIZE {
            link.partial = None;
            let text = format!("the message is larger than {MAX_MESSAGE_SIZE} bytes");
            self.detach_with(channel, handle, error(ErrorCondition::LinkError(LinkError::MessageSizeExceeded), &text));
            return;
        }
        if t.more {
            if session_flow {
                self.send_flow(channel, None);
            }
            return;
        }
        let Some(delivery) = link.partial.take() else { return };
        link.granted = link.granted.saturating_sub(1);
        link.rx_count = link.rx_count.wrapping_add(1);
        let link_flow = link.granted < LINK_CREDIT / 2;
        if link_flow {
            link.granted = LINK_CREDIT;
        }
        let kind = link.kind.clone();
        let local = session.local;
        let outcome = match kind {
            Kind::Producer(queue) => self.accept_messages(&queue, delivery.format, &delivery.payload),
            Kind::Requests(node) => self.on_request(channel, &node, &delivery.payload),
            Kind::Consumer(_) | Kind::Responses(_) => return,
        };
        if !delivery.settled
            && let Some(id) = delivery.delivery_id
        {
            let disposition = Disposition {
                role: Role::Receiver,
                first: id,
                last: None,
                settled: true,
                state: Some(outcome),
                batchable: false,
            };
            self.send(local, Performative::Disposition(disposition));
        }
        if session_flow || link_flow {
            self.send_flow(channel, link_flow.then_some(handle));
        }
    }

    /// Enqueue what a producer sent.
    fn accept_messages(&mut self, queue: &str, format: u32, payload: &[u8]) -> DeliveryState {
        bump(&self.shared.counters.transfers_received);
        if format == BATCH_FORMAT {
            bump(&self.shared.counters.batches_received);
        }
        let messages = match parse_transfer(format, payload) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(peer = %self.peer, %queue, error = %e, "rejected a message");
                return rejection(ErrorCondition::AmqpError(AmqpError::DecodeError), &e.0);
            }
        };
        let now = self.shared.clock.now_ms();
        let mut state = self.shared.state();
        // A batch is kept whole or refused whole: check every message first.
        if let Some(why) = messages.iter().find_map(|m| refusal(&state, queue, m)) {
            return rejection(ErrorCondition::AmqpError(AmqpError::NotAllowed), &why);
        }
        for message in messages {
            match state.route(queue, message, now) {
                Routed::Kept(_) | Routed::Duplicate => {}
                Routed::Refused(why) => return rejection(ErrorCondition::AmqpError(AmqpError::NotAllowed), &why),
                Routed::Missing => {
                    return rejection(ErrorCondition::AmqpError(AmqpError::NotFound), "the queue was deleted");
                }
            }
        }
        let next = state.next_deadline();
        drop(state);
        if let Some(at) = next {
            self.shared.locked_until(at); // a scheduled message or a time to live may be due first
        }
        DeliveryState::Accepted(Accepted {})
    }

    /// Answer a request and queue the response on the link it asks for.
    fn on_request(&mut self, channel: u16, node: &Node, payload: &[u8]) -> DeliveryState {
        let request = match StoredMessage::parse(payload) {
            Ok(r) => r,
            Err(e) => {
                return DeliveryState::Rejected(Rejected {
                    error: Some(error(ErrorCondition::AmqpError(AmqpError::DecodeError), &e.0)),
                });
            }
        };
        let response = match node {
            Node::Cbs => self.put_token(&request),
            Node::Management(entity) => self.management(entity, &request),
        };
        let reply_to = request.properties.as_ref().and_then(|p| p.reply_to.clone());
        match self.response_link(channel, node, reply_to.as_deref()) {
            Some((c, h)) => {
                if let Some(link) = self.sessions.get_mut(&c).and_then(|s| s.links.get_mut(&h)) {
                    link.responses.push_back(response);
                }
            }
            None => tracing::warn!(
                peer = %self.peer,
                reply_to = reply_to.as_deref().unwrap_or(""),
                "a request whose response has no link to go to; dropped"
            ),
        }
        DeliveryState::Accepted(Accepted {})
    }

    /// The response link for a request to `node`: the one whose target is `reply_to`,
    /// else the one on the same session that receives from the node.
    fn response_link(&self, channel: u16, node: &Node, reply_to: Option<&str>) -> Option<(u16, u32)> {
        let is_response = |k: &Kind| matches!(k, Kind::Responses(n) if n == node);
        if let Some(reply_to) = reply_to {
            for (c, s) in &self.sessions {
                for (h, l) in &s.links {
                    if is_response(&l.kind) && l.reply_address.as_deref() == Some(reply_to) {
                        return Some((*c, *h));
                    }
                }
            }
        }
        let session = self.sessions.get(&channel)?;
        session.links.iter().find(|(_, l)| is_response(&l.kind)).map(|(h, _)| (channel, *h))
    }
}

//! What the broker sends: messages to consumers with credit (peek-locked, the lock
//! token as the 16-byte delivery tag in .NET's GUID byte order, which is what
//! `uuid.UUID(bytes_le=tag)` and `Guid(byte[])` read), responses to the request
//! links, and the settled dispositions that answer the client's unsettled ones.

use fe2o3_amqp_types::definitions::{AmqpError, Error, ErrorCondition, Role};
use fe2o3_amqp_types::messaging::{DeliveryState, Modified, Rejected};
use fe2o3_amqp_types::performatives::{Disposition, Flow, Performative, Transfer};
use fe2o3_amqp_types::primitives::{Symbol, Value};

use super::link::{Kind, Outgoing};
use super::{Conn, error};
use crate::queue::{LockToken, Settlement};
use crate::state::EntityRef;
use crate::wire::frame::encode_transfer;

/// Error condition of a settlement or renewal whose lock is gone.
pub(crate) const LOCK_LOST: &str = "com.microsoft:message-lock-lost";
/// Its description, as Service Bus words it.
pub(crate) const LOCK_LOST_TEXT: &str =
    "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue.";
/// Error condition of a rejected outcome that dead-letters.
const DEAD_LETTER: &str = "com.microsoft:dead-letter";

/// A lock token as a delivery tag: .NET's GUID byte order (first three fields little-endian).
pub(crate) fn delivery_tag(token: &LockToken) -> Vec<u8> {
    let mut tag = token.to_vec();
    tag[0..4].reverse();
    tag[4..6].reverse();
    tag[6..8].reverse();
    tag
}

/// One thing to send on a link.
enum Next {
    Message { entity: EntityRef, token: Option<LockToken>, until: i64, payload: Vec<u8> },
    Response(Vec<u8>),
}

impl Conn {
    /// Send what links with credit can take.
    pub(super) fn pump(&mut self) {
        let channels: Vec<u16> = self.sessions.keys().copied().collect();
        for channel in channels {
            let handles: Vec<u32> = self.sessions[&channel]
                .links
                .iter()
                .filter(|(_, l)| l.kind.broker_sends() && (l.credit > 0 || l.drain))
                .map(|(h, _)| *h)
                .collect();
            for handle in handles {
                self.pump_link(channel, handle);
            }
        }
    }

    fn pump_link(&mut self, channel: u16, handle: u32) {
        loop {
            let Some(session) = self.sessions.get_mut(&channel) else { return };
            let Some(link) = session.links.get_mut(&handle) else { return };
            if link.credit == 0 || session.remote_incoming_window == 0 {
                break;
            }
            let next = match &link.kind {
                Kind::Responses(_) => link.responses.pop_front().map(Next::Response),
                Kind::Consumer(entity) => {
                    let now = self.shared.clock.now_ms();
                    let mut state = self.shared.state();
                    let session = link.session.as_deref();
                    if let Some(s) = session
                        && !state.queue(&entity.queue).is_some_and(|q| q.holds_session(s, link.id, now))
                    {
                        break; // its session lock ran out: `check_sessions` detaches it
                    }
                    let next = if link.presettled {
                        state.take_next(entity, session, now).map(|payload| Next::Message {
                            entity: entity.clone(),
                            token: None,
                            until: 0,
                            payload,
                        })
                    } else {
                        state.lock_next(entity, session, now).map(|d| Next::Message {
                            entity: entity.clone(),
                            token: Some(d.token),
                            until: d.until_ms,
                            payload: d.payload,
                        })
                    };
                    if next.is_none() {
                        state.wait_for(entity, &self.notify);
                    }
                    next
                }
                _ => None,
            };
            let Some(next) = next else { break };
            let delivery_id = session.next_delivery_id;
            session.next_delivery_id = session.next_delivery_id.wrapping_add(1);
            link.credit -= 1;
            link.delivery_count = link.delivery_count.wrapping_add(1);
            let (tag, payload, settled, outgoing) = match next {
                Next::Message { entity, token: Some(token), until, payload } => {
                    self.shared.locked_until(until);
                    (delivery_tag(&token), payload, false, Some(Outgoing::Locked { handle, entity, token }))
                }
                Next::Message { token: None, payload, .. } => (delivery_id.to_be_bytes().to_vec(), payload, true, None),
                Next::Response(payload) => {
                    let settled = link.presettled;
                    (delivery_id.to_be_bytes().to_vec(), payload, settled, (!settled).then_some(Outgoing::Response))
                }
            };
            if let Some(o) = outgoing {
                session.unsettled.insert(delivery_id, o);
            }
            let transfer = Transfer {
                handle: link.local.into(),
                delivery_id: Some(delivery_id),
                delivery_tag: Some(tag.into()),
                message_format: Some(0),
                settled: Some(settled),
                more: false,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
            let frames = encode_transfer(&mut self.out, session.local, transfer, &payload, self.remote_max_frame);
            session.next_outgoing_id = session.next_outgoing_id.wrapping_add(frames);
            session.remote_incoming_window = session.remote_incoming_window.saturating_sub(frames);
        }
        self.finish_drain(channel, handle);
    }

    /// A drained link with nothing left to send uses up its credit and says so.
    fn finish_drain(&mut self, channel: u16, handle: u32) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(link) = session.links.get_mut(&handle) else { return };
        if !link.drain {
            return;
        }
        let empty = match &link.kind {
            Kind::Responses(_) => link.responses.is_empty(),
            Kind::Consumer(entity) => {
                let state = self.shared.state();
                state.queue(&entity.queue).is_none_or(|q| !q.has_available_in(entity.sub, link.session.as_deref()))
            }
            _ => true,
        };
        if link.credit > 0 && !empty && session.remote_incoming_window > 0 {
            return; // more to send first
        }
        link.delivery_count = link.delivery_count.wrapping_add(link.credit);
        link.credit = 0;
        link.drain = false;
        let flow = Flow {
            next_incoming_id: Some(session.next_incoming_id),
            incoming_window: session.incoming_window,
            next_outgoing_id: session.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: Some(link.local.into()),
            delivery_count: Some(link.delivery_count),
            link_credit: Some(0),
            available: None,
            drain: true,
            echo: false,
            properties: None,
        };
        let local = session.local;
        self.send(local, Performative::Flow(flow));
    }

    /// The client settles deliveries we sent (role receiver) or its own (ignored: we
    /// settle what we receive at once).
    pub(super) fn on_disposition(&mut self, channel: u16, d: &Disposition) {
        if d.role != Role::Receiver {
            return;
        }
        let Some(state) = d.state.as_ref() else { return };
        let Some(settlement) = settlement_of(state) else { return };
        let now = self.shared.clock.now_ms();
        let last = d.last.unwrap_or(d.first).max(d.first);
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let ids: Vec<u32> = session.unsettled.range(d.first..=last).map(|(id, _)| *id).collect();
        let mut echoes: Vec<(u32, DeliveryState)> = Vec::new();
        for id in ids {
            let Some(Outgoing::Locked { entity, token, .. }) = session.unsettled.get(&id).cloned() else {
                session.unsettled.remove(&id); // a response: nothing to do
                continue;
            };
            let echo = match &settlement {
                // Not modelled: the delivery stays locked and unsettled.
                Err(unsupported) => rejected(ErrorCondition::AmqpError(AmqpError::NotImplemented), unsupported),
                Ok(s) => {
                    session.unsettled.remove(&id);
                    match self.shared.state().settle(&entity, &token, s.clone(), now) {
                        Ok(()) => echo_of(state),
                        Err(_) => rejected(ErrorCondition::Custom(Symbol::from(LOCK_LOST)), LOCK_LOST_TEXT),
                    }
                }
            };
            if !d.settled {
                echoes.push((id, echo));
            }
        }
        let local = session.local;
        // Answer runs of consecutive ids with the same outcome in one disposition.
        let mut i = 0;
        while i < echoes.len() {
            let (first, state) = echoes[i].clone();
            let mut last = first;
            while i + 1 < echoes.len() && echoes[i + 1].0 == last.wrapping_add(1) && echoes[i + 1].1 == state {
                i += 1;
                last = echoes[i].0;
            }
            i += 1;
            let disposition = Disposition {
                role: Role::Sender,
                first,
                last: (last != first).then_some(last),
                settled: true,
                state: Some(state),
                batchable: false,
            };
            self.send(local, Performative::Disposition(disposition));
        }
    }
}

/// What an outcome does to a locked message; `Err` for outcomes Service Bus has but
/// this broker does not model (none left; kept for the next one).
fn settlement_of(state: &DeliveryState) -> Option<Result<Settlement, String>> {
    Some(Ok(match state {
        DeliveryState::Accepted(_) => Settlement::Complete,
        DeliveryState::Released(_) => Settlement::Release,
        // Microsoft's SDKs defer with modified, undeliverable-here set.
        DeliveryState::Modified(m) if m.undeliverable_here == Some(true) => Settlement::Defer,
        DeliveryState::Modified(m) => Settlement::Abandon {
            failed: m.delivery_failed.unwrap_or(false),
            annotations: m.message_annotations.clone().map(|f| f.into_iter().collect()).unwrap_or_default(),
        },
        DeliveryState::Rejected(r) => {
            let info = r.error.as_ref().and_then(|e| e.info.as_deref());
            let text = |key: &str| match info.and_then(|i| i.get(&Symbol::from(key))) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Symbol(s)) => Some(s.0.clone()),
                _ => None,
            };
            let is_dead_letter =
                r.error.as_ref().is_some_and(|e| e.condition == ErrorCondition::Custom(Symbol::from(DEAD_LETTER)));
            let description = text(crate::queue::DEAD_LETTER_DESCRIPTION)
                .or_else(|| r.error.as_ref().and_then(|e| e.description.clone()).filter(|_| !is_dead_letter));
            Settlement::DeadLetter { reason: text(crate::queue::DEAD_LETTER_REASON), description }
        }
        _ => return None, // received, declared, transactional: not terminal here
    }))
}

/// The outcome echoed for a settlement that worked: the one sent, with a rejected
/// one's error dropped (an echoed error means failure to Microsoft's SDKs).
fn echo_of(state: &DeliveryState) -> DeliveryState {
    match state {
        DeliveryState::Rejected(_) => DeliveryState::Rejected(Rejected { error: None }),
        DeliveryState::Modified(m) => DeliveryState::Modified(Modified {
            delivery_failed: m.delivery_failed,
            undeliverable_here: m.undeliverable_here,
            message_annotations: None,
        }),
        other => other.clone(),
    }
}

fn rejected(condition: ErrorCondition, description: &str) -> DeliveryState {
    let err: Error = error(condition, description);
    DeliveryState::Rejected(Rejected { error: Some(err) })
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::definitions::Fields;
    use fe2o3_amqp_types::messaging::{Accepted, Released};

    use super::*;

    #[test]
    fn the_tag_is_the_token_in_dotnet_order() {
        let token = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];
        assert_eq!(
            delivery_tag(&token),
            vec![0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
        );
    }

    fn dead_letter(reason: Option<&str>, description: Option<&str>, condition: &str) -> DeliveryState {
        let mut info = Fields::new();
        if let Some(r) = reason {
            info.insert(Symbol::from("DeadLetterReason"), Value::String(r.into()));
        }
        if let Some(d) = description {
            info.insert(Symbol::from("DeadLetterErrorDescription"), Value::String(d.into()));
        }
        DeliveryState::Rejected(Rejected {
            error: Some(Error {
                condition: ErrorCondition::Custom(Symbol::from(condition)),
                description: Some("desc".into()),
                info: Some(Box::new(info)),
            }),
        })
    }

    #[test]
    fn outcomes_map_to_settlements_and_echoes() {
        let check = |state: DeliveryState, want: Option<Result<Settlement, ()>>, echo: Option<DeliveryState>| {
            assert_eq!(settlement_of(&state).map(|r| r.map_err(|_| ())), want, "{state:?}");
            if let Some(e) = echo {
                assert_eq!(echo_of(&state), e);
            }
        };
        check(
            DeliveryState::Accepted(Accepted {}),
            Some(Ok(Settlement::Complete)),
            Some(DeliveryState::Accepted(Accepted {})),
        );
        check(DeliveryState::Released(Released {}), Some(Ok(Settlement::Release)), None);
        let abandon =
            Modified { delivery_failed: Some(true), undeliverable_here: Some(false), message_annotations: None };
        check(
            DeliveryState::Modified(abandon.clone()),
            Some(Ok(Settlement::Abandon { failed: true, annotations: vec![] })),
            Some(DeliveryState::Modified(abandon)),
        );
        let defer = Modified { delivery_failed: Some(true), undeliverable_here: Some(true), message_annotations: None };
        check(
            DeliveryState::Modified(defer.clone()),
            Some(Ok(Settlement::Defer)),
            Some(DeliveryState::Modified(defer)),
        );
        check(
            dead_letter(Some("Poison"), Some("bad json"), DEAD_LETTER),
            Some(Ok(Settlement::DeadLetter { reason: Some("Poison".into()), description: Some("bad json".into()) })),
            Some(DeliveryState::Rejected(Rejected { error: None })),
        );
        check(
            dead_letter(None, None, DEAD_LETTER),
            Some(Ok(Settlement::DeadLetter { reason: None, description: None })),
            None,
        );
        // A plain rejected (another condition): dead-lettered with its description.
        check(
            dead_letter(None, None, "amqp:internal-error"),
            Some(Ok(Settlement::DeadLetter { reason: None, description: Some("desc".into()) })),
            None,
        );
        check(
            DeliveryState::Rejected(Rejected { error: None }),
            Some(Ok(Settlement::DeadLetter { reason: None, description: None })),
            None,
        );
    }
}

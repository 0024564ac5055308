//! Attaching and detaching links: which entity an address names, whether the
//! connection's tokens allow it, and the answer (a refusal is an attach without the
//! terminus, then a closing detach with the error, as Service Bus answers).

use fe2o3_amqp_types::definitions::{AmqpError, Error, ErrorCondition, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::{Source, Target, TargetArchetype};
use fe2o3_amqp_types::performatives::{Attach, Detach, Performative};

use super::link::{Kind, LINK_CREDIT, Link, Node};
use super::{Conn, MAX_MESSAGE_SIZE, error};
use crate::queue::SubQueue;
use crate::state::{EntityRef, bump};

const DEAD_LETTER_SUFFIX: &str = "/$deadletterqueue";
const MANAGEMENT_SUFFIX: &str = "/$management";

/// The entity path of a link address: `amqps://host:port/q` (any scheme), `/q` and
/// `q` all name `q`; lower case, as Service Bus names are case-insensitive.
pub(crate) fn path_of(address: &str) -> String {
    let rest = match address.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map_or("", |(_, path)| path),
        None => address,
    };
    rest.trim_matches('/').to_ascii_lowercase()
}

fn address_of_target(target: Option<&TargetArchetype>) -> Option<&str> {
    match target? {
        TargetArchetype::Target(t) => t.address.as_deref(),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

impl Conn {
    /// What `path` names: `$cbs`, a queue, its dead-letter sub-queue, or either's
    /// `$management` node.
    fn resolve(&self, path: &str, client_receives: bool) -> Result<Kind, Error> {
        if path == "$cbs" {
            return Ok(if client_receives { Kind::Responses(Node::Cbs) } else { Kind::Requests(Node::Cbs) });
        }
        let (entity_path, management) = match path.strip_suffix(MANAGEMENT_SUFFIX) {
            Some(p) => (p, true),
            None => (path, false),
        };
        let (queue, sub) = match entity_path.strip_suffix(DEAD_LETTER_SUFFIX) {
            Some(q) => (q, SubQueue::DeadLetter),
            None => (entity_path, SubQueue::Main),
        };
        let state = self.shared.state();
        if queue.is_empty() || queue.contains('$') || state.queue(queue).is_none() {
            return Err(error(
                ErrorCondition::AmqpError(AmqpError::NotFound),
                &format!("The messaging entity 'sb://{}/{path}' could not be found.", self.host()),
            ));
        }
        let entity = EntityRef { queue: queue.to_owned(), sub };
        Ok(match (management, client_receives) {
            (true, true) => Kind::Responses(Node::Management(entity)),
            (true, false) => Kind::Requests(Node::Management(entity)),
            (false, true) => Kind::Consumer(entity),
            (false, false) if sub == SubQueue::DeadLetter => {
                return Err(error(
                    ErrorCondition::AmqpError(AmqpError::NotAllowed),
                    &format!("Cannot send to a dead-letter queue ('{path}')."),
                ));
            }
            (false, false) => Kind::Producer(entity.queue),
        })
    }

    /// The namespace in errors.
    fn host(&self) -> &str {
        &self.namespace
    }

    pub(super) fn on_attach(&mut self, channel: u16, attach: Attach) {
        let Some(session) = self.sessions.get(&channel) else { return };
        if session.links.contains_key(&attach.handle.0) || session.link_named(&attach.name).is_some() {
            self.end_session(
                channel,
                error(
                    ErrorCondition::SessionError(fe2o3_amqp_types::definitions::SessionError::HandleInUse),
                    "handle or link name in use",
                ),
            );
            return;
        }
        let client_receives = attach.role == Role::Receiver;
        let address = if client_receives {
            attach.source.as_ref().and_then(|s| s.address.clone())
        } else {
            address_of_target(attach.target.as_deref()).map(str::to_owned)
        }
        .unwrap_or_default();
        let path = path_of(&address);
        let now = self.shared.clock.now_ms();
        let kind = self.resolve(&path, client_receives).and_then(|kind| {
            let Some((_, claim)) = kind.entity() else { return Ok((kind, None)) };
            match self.auth.until(&path, now) {
                Some(until) => Ok((kind, Some(until))),
                None => Err(error(
                    ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess),
                    &format!(
                        "Unauthorized access. '{claim}' claim(s) are required to perform this operation. Resource: 'sb://{}/{path}'. No valid token for it was put on $cbs.",
                        self.host()
                    ),
                )),
            }
        });
        let (kind, auth_until) = match kind {
            Ok(k) => k,
            Err(err) => {
                bump(&self.shared.counters.links_refused);
                tracing::debug!(peer = %self.peer, %address, error = ?err.description, "attach refused");
                self.refuse(channel, attach, err);
                return;
            }
        };
        let broker_sends = kind.broker_sends();
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let local = session.allocate_handle();
        let reply_address = match &kind {
            Kind::Responses(_) => address_of_target(attach.target.as_deref()).map(str::to_owned),
            _ => None,
        };
        let presettled = broker_sends && attach.snd_settle_mode == SenderSettleMode::Settled;
        let reply = Attach {
            name: attach.name.clone(),
            handle: local.into(),
            role: if client_receives { Role::Sender } else { Role::Receiver },
            snd_settle_mode: if broker_sends && !presettled {
                SenderSettleMode::Unsettled
            } else {
                attach.snd_settle_mode.clone()
            },
            // We settle what we receive at once; what we send, the client settles as it asked.
            rcv_settle_mode: if broker_sends { attach.rcv_settle_mode.clone() } else { ReceiverSettleMode::First },
            source: Some(attach.source.clone().unwrap_or_else(|| Box::new(Source::default()))),
            target: Some(attach.target.clone().unwrap_or_else(|| Box::new(TargetArchetype::Target(Target::default())))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: broker_sends.then_some(0),
            max_message_size: Some(MAX_MESSAGE_SIZE),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let link = Link {
            name: attach.name,
            local,
            kind,
            address,
            reply_address,
            delivery_count: 0,
            credit: 0,
            drain: false,
            presettled,
            responses: Default::default(),
            granted: if broker_sends { 0 } else { LINK_CREDIT },
            rx_count: attach.initial_delivery_count.unwrap_or(0),
            partial: None,
            auth_until,
        };
        tracing::debug!(peer = %self.peer, link = %link.name, address = %link.address, kind = ?link.kind, "link attached");
        session.links.insert(attach.handle.0, link);
        let local_channel = session.local;
        self.send(local_channel, Performative::Attach(reply));
        if !broker_sends {
            self.send_flow(channel, Some(attach.handle.0));
        }
    }

    /// Answer an attach we do not accept: no terminus, then a closing detach.
    fn refuse(&mut self, channel: u16, attach: Attach, err: Error) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let local = session.allocate_handle();
        let local_channel = session.local;
        let client_receives = attach.role == Role::Receiver;
        let reply = Attach {
            name: attach.name,
            handle: local.into(),
            role: if client_receives { Role::Sender } else { Role::Receiver },
            snd_settle_mode: attach.snd_settle_mode,
            rcv_settle_mode: attach.rcv_settle_mode,
            source: if client_receives { None } else { attach.source },
            target: if client_receives { attach.target } else { None },
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: client_receives.then_some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.send(local_channel, Performative::Attach(reply));
        self.send(local_channel, Performative::Detach(Detach { handle: local.into(), closed: true, error: Some(err) }));
    }

    pub(super) fn on_detach(&mut self, channel: u16, detach: &Detach) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(link) = session.links.remove(&detach.handle.0) else { return };
        let local_channel = session.local;
        // Deliveries it did not settle stay locked until their locks expire (Service
        // Bus keeps a lock for its duration when the receiver goes away).
        session
            .unsettled
            .retain(|_, o| !matches!(o, super::link::Outgoing::Locked { handle, .. } if *handle == detach.handle.0));
        tracing::debug!(peer = %self.peer, link = %link.name, "link detached by the client");
        self.send(
            local_channel,
            Performative::Detach(Detach { handle: link.local.into(), closed: detach.closed, error: None }),
        );
    }

    /// Detach the client's link `handle` with `err` (its token expired).
    pub(super) fn detach_with(&mut self, channel: u16, handle: u32, err: Error) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        let Some(link) = session.links.remove(&handle) else { return };
        session.unsettled.retain(|_, o| !matches!(o, super::link::Outgoing::Locked { handle: h, .. } if *h == handle));
        let local_channel = session.local;
        tracing::info!(peer = %self.peer, link = %link.name, address = %link.address, "detaching a link: {}", err.description.as_deref().unwrap_or(""));
        self.send(
            local_channel,
            Performative::Detach(Detach { handle: link.local.into(), closed: true, error: Some(err) }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::path_of;

    #[test]
    fn addresses_name_entities() {
        let check = |address: &str, want: &str| assert_eq!(path_of(address), want, "{address}");
        check("amqps://127.0.0.1:5672/Requests", "requests");
        check("sb://ns.servicebus.windows.net/q/$DeadLetterQueue", "q/$deadletterqueue");
        check("/q/", "q");
        check("q/$management", "q/$management");
        check("$cbs", "$cbs");
        check("amqp://host", "");
    }
}

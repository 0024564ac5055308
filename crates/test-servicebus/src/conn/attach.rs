//! Attaching and detaching links: which entity an address names, whether the
//! connection's tokens allow it, which session a receiver on a session entity gets,
//! and the answer (a refusal is an attach without the terminus, then a closing
//! detach with the error, as Service Bus answers). A session receiver's answer names
//! its session in the source filter and its lock's expiry in the properties, which
//! is where Microsoft's SDKs read them.

use fe2o3_amqp_types::definitions::{AmqpError, Error, ErrorCondition, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::{Source, Target, TargetArchetype};
use fe2o3_amqp_types::performatives::{Attach, Detach, Performative};

use fe2o3_amqp_types::definitions::Fields;
use fe2o3_amqp_types::primitives::{Symbol, Value};

use super::link::{Kind, LINK_CREDIT, Link, Node};
use super::{Conn, MAX_MESSAGE_SIZE, error};
use crate::queue::SubQueue;
use crate::queue::sessions::Refusal;
use crate::state::{EntityRef, Shared, State, bump};

/// The source filter that names a session (`null`: the next available one).
const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// The attach property with the session lock's expiry.
const LOCKED_UNTIL_UTC: &str = "com.microsoft:locked-until-utc";
/// The error condition of a session another receiver holds.
const SESSION_CANNOT_BE_LOCKED: &str = "com.microsoft:session-cannot-be-locked";

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
    /// What `path` names: `$cbs`, a queue or subscription, its dead-letter
    /// sub-queue, a topic (sends only), or any of those's `$management` node.
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
        let is_topic = sub == SubQueue::Main && state.topics.contains_key(queue);
        if queue.is_empty() || queue.contains('$') || (state.queue(queue).is_none() && !is_topic) {
            return Err(error(
                ErrorCondition::AmqpError(AmqpError::NotFound),
                &format!("The messaging entity 'sb://{}/{path}' could not be found.", self.host()),
            ));
        }
        let not_allowed = |text: String| Err(error(ErrorCondition::AmqpError(AmqpError::NotAllowed), &text));
        let entity = EntityRef { queue: queue.to_owned(), sub };
        Ok(match (management, client_receives) {
            (true, true) => Kind::Responses(Node::Management(entity)),
            (true, false) => Kind::Requests(Node::Management(entity)),
            (false, true) if is_topic => {
                return not_allowed(format!(
                    "Cannot receive from a topic ('{path}'): receive from one of its subscriptions, '<topic>/Subscriptions/<name>'."
                ));
            }
            (false, true) => Kind::Consumer(entity),
            (false, false) if sub == SubQueue::DeadLetter => {
                return not_allowed(format!("Cannot send to a dead-letter queue ('{path}')."));
            }
            (false, false) if is_subscription(&state, queue) => {
                return not_allowed(format!("Cannot send to a subscription ('{path}'): send to its topic."));
            }
            (false, false) => Kind::Producer(entity.queue),
        })
    }

    /// For a receiver on a session entity: the session it asks for (`Ok(Some(None))`:
    /// the next available one); `Ok(None)` when the entity has no sessions; the error
    /// Service Bus gives when the receiver and the entity disagree.
    fn session_wanted(&self, kind: &Kind, attach: &Attach) -> Result<Option<Option<String>>, Error> {
        let Kind::Consumer(entity) = kind else { return Ok(None) };
        let filter = attach.source.as_ref().and_then(|s| s.filter.as_ref());
        let asked = filter.and_then(|f| f.iter().find(|(k, _)| k.as_str() == SESSION_FILTER)).map(|(_, v)| v);
        let state = self.shared.state();
        let sessionful =
            entity.sub == SubQueue::Main && state.queue(&entity.queue).is_some_and(|q| q.config.requires_session);
        let not_allowed = |text: &str| Err(error(ErrorCondition::AmqpError(AmqpError::NotAllowed), text));
        match (sessionful, asked) {
            (false, None) => Ok(None),
            (false, Some(_)) => not_allowed(
                "A sessionful message receiver cannot be created on an entity that does not require sessions. Ensure RequiresSession is set to true when creating a Queue or Subscription to enable sessionful behavior.",
            ),
            (true, None) => not_allowed(
                "It is not possible for an entity that requires sessions to create a non-sessionful message receiver.",
            ),
            (true, Some(Value::Null)) => Ok(Some(None)),
            (true, Some(Value::String(id))) => Ok(Some(Some(id.clone()))),
            (true, Some(other)) => Err(error(
                ErrorCondition::Custom(Symbol::from("com.microsoft:argument-error")),
                &format!("the session filter must be a string or null, got {other:?}"),
            )),
        }
    }

    /// Lock the session a receiver asked for, for link `id`.
    fn accept_session(&self, entity: &EntityRef, want: Option<&str>, id: u64) -> Result<(String, i64), Error> {
        let now = self.shared.clock.now_ms();
        let mut state = self.shared.state();
        let Some(queue) = state.queues.get_mut(&entity.queue) else {
            return Err(error(ErrorCondition::AmqpError(AmqpError::NotFound), "the entity was deleted"));
        };
        let accepted = queue.accept_session(want, id, now).map_err(|refusal| match refusal {
            Refusal::Locked(s) => error(
                ErrorCondition::Custom(Symbol::from(SESSION_CANNOT_BE_LOCKED)),
                &format!("The requested session '{s}' cannot be accepted. It may be locked by another receiver."),
            ),
            Refusal::NoneAvailable => error(
                ErrorCondition::Custom(Symbol::from("com.microsoft:timeout")),
                "No unlocked session has a message now (test-servicebus answers a next-available receiver at once instead of waiting).",
            ),
        })?;
        state.hold(id, &self.notify);
        Ok(accepted)
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
        let id = self.shared.link_id();
        let held = kind.and_then(|(kind, until)| {
            let wanted = self.session_wanted(&kind, &attach)?;
            let accepted = match (&kind, wanted) {
                (Kind::Consumer(entity), Some(want)) => Some(self.accept_session(entity, want.as_deref(), id)?),
                _ => None,
            };
            Ok((kind, until, accepted))
        });
        let (kind, auth_until, held) = match held {
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
        let mut source = attach.source.clone().unwrap_or_else(|| Box::new(Source::default()));
        let mut properties = None;
        if let Some((session_id, until)) = &held {
            // The session it got, in the filter, and until when its lock holds (.NET ticks).
            source
                .filter
                .get_or_insert_with(Default::default)
                .insert(Symbol::from(SESSION_FILTER), Value::String(session_id.clone()));
            let mut fields = Fields::new();
            fields.insert(Symbol::from(LOCKED_UNTIL_UTC), Value::Long(dotnet_ticks(*until)));
            properties = Some(fields);
        }
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
            source: Some(source),
            target: Some(attach.target.clone().unwrap_or_else(|| Box::new(TargetArchetype::Target(Target::default())))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: broker_sends.then_some(0),
            max_message_size: Some(MAX_MESSAGE_SIZE),
            offered_capabilities: None,
            desired_capabilities: None,
            properties,
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
            id,
            session: held.map(|(s, _)| s),
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
        let_go(&self.shared, &link);
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
        let_go(&self.shared, &link);
        session.unsettled.retain(|_, o| !matches!(o, super::link::Outgoing::Locked { handle: h, .. } if *h == handle));
        let local_channel = session.local;
        tracing::info!(peer = %self.peer, link = %link.name, address = %link.address, "detaching a link: {}", err.description.as_deref().unwrap_or(""));
        self.send(
            local_channel,
            Performative::Detach(Detach { handle: link.local.into(), closed: true, error: Some(err) }),
        );
    }
}

/// Whether `key` is a subscription's queue.
fn is_subscription(state: &State, key: &str) -> bool {
    state.topics.values().any(|t| t.subscriptions.iter().any(|(k, _)| k == key))
}

/// A session receiver's link is gone: its session is free again.
pub(super) fn let_go(shared: &Shared, link: &Link) {
    if let (Some(s), Kind::Consumer(entity)) = (&link.session, &link.kind) {
        shared.state().let_go(entity, s, link.id);
    }
}

/// .NET ticks (100 ns since 0001-01-01) of Unix milliseconds, as Service Bus writes
/// `com.microsoft:locked-until-utc`.
pub(crate) fn dotnet_ticks(unix_ms: i64) -> i64 {
    const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;
    unix_ms.saturating_mul(10_000).saturating_add(UNIX_EPOCH_TICKS)
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

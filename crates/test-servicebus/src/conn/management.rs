//! `$management` operations beyond renew-lock, in the shapes Microsoft's SDKs send
//! and read: session lock renewal and session state (for the session the asking
//! receiver holds), schedule and cancel, receive deferred messages by sequence
//! number, settle by lock token (`update-disposition`), and peek. A request body is
//! an amqp-value map with string keys.

use fe2o3_amqp_types::primitives::{Array, OrderedMap, Value};

use super::Conn;
use super::deliver::{LOCK_LOST, LOCK_LOST_TEXT};
use super::requests::{key_is, lock_tokens};
use crate::message::{StoredMessage, timestamp, uuid};
use crate::queue::{Delivery, Settlement};
use crate::state::EntityRef;

/// An answer: status code, error condition, description, body.
pub(super) type Reply = (u16, Option<&'static str>, String, Value);

const ARGUMENT_ERROR: &str = "com.microsoft:argument-error";
const MESSAGE_NOT_FOUND: &str = "com.microsoft:message-not-found";

fn ok(body: Value) -> Reply {
    (200, None, "OK".to_owned(), body)
}

fn bad(why: &str) -> Reply {
    (400, Some(ARGUMENT_ERROR), why.to_owned(), Value::Null)
}

fn session_lost() -> Reply {
    (
        410,
        Some(super::SESSION_LOCK_LOST),
        "The session lock has expired on the MessageSession, or this receiver does not hold the session.".to_owned(),
        Value::Null,
    )
}

/// A map of string keys.
fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = OrderedMap::new();
    for (k, v) in entries {
        m.insert(Value::String(k.to_owned()), v);
    }
    Value::Map(m)
}

/// The field `name` of a request body map.
fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Map(m) = body else { return None };
    m.iter().find(|(k, _)| key_is(k, name)).map(|(_, v)| v)
}

fn string_field(body: &Value, name: &str) -> Option<String> {
    match field(body, name)? {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// A number field of any integer type.
fn long_field(body: &Value, name: &str) -> Option<i64> {
    match field(body, name)? {
        Value::Long(n) => Some(*n),
        Value::Int(n) => Some(i64::from(*n)),
        Value::Uint(n) => Some(i64::from(*n)),
        Value::Ulong(n) => i64::try_from(*n).ok(),
        Value::Short(n) => Some(i64::from(*n)),
        Value::Ushort(n) => Some(i64::from(*n)),
        Value::Byte(n) => Some(i64::from(*n)),
        Value::Ubyte(n) => Some(i64::from(*n)),
        _ => None,
    }
}

/// An array or list of longs.
fn longs(body: &Value, name: &str) -> Option<Vec<i64>> {
    let items = match field(body, name)? {
        Value::Array(a) => &a.0,
        Value::List(l) => l,
        _ => return None,
    };
    items.iter().map(|v| if let Value::Long(n) = v { Some(*n) } else { None }).collect()
}

fn items<'a>(body: &'a Value, name: &str) -> Option<&'a [Value]> {
    match field(body, name)? {
        Value::Array(a) => Some(&a.0),
        Value::List(l) => Some(l),
        _ => None,
    }
}

/// Deliveries as `{messages: [{lock-token, message}]}`.
fn messages_body(deliveries: Vec<Delivery>) -> Value {
    let list = deliveries
        .into_iter()
        .map(|d| map(vec![("lock-token", uuid(d.token)), ("message", Value::Binary(d.payload.into()))]))
        .collect();
    map(vec![("messages", Value::List(list))])
}

impl Conn {
    /// The id of this connection's link named `name` that holds a session.
    fn holder(&self, name: Option<&str>) -> Option<u64> {
        let name = name?;
        self.sessions
            .values()
            .flat_map(|s| s.links.values())
            .find(|l| l.name == name && l.session.is_some())
            .map(|l| l.id)
    }

    /// Answer `operation` on `entity`'s `$management`; `None` when not modelled.
    pub(super) fn operation(&mut self, entity: &EntityRef, request: &StoredMessage, operation: &str) -> Option<Reply> {
        let body = request.amqp_value().unwrap_or(Value::Null);
        let now = self.shared.clock.now_ms();
        let holder = self.holder(request.string_property("associated-link-name"));
        let session = string_field(&body, "session-id");
        let op = operation.strip_prefix("com.microsoft:")?;
        let is_topic = self.shared.state().topics.contains_key(&entity.queue);
        if is_topic && !matches!(op, "schedule-message" | "cancel-scheduled-message") {
            return (op != "renew-lock").then(|| bad(&format!("{operation} is not an operation of a topic")));
        }
        Some(match op {
            "renew-session-lock" | "get-session-state" | "set-session-state" => {
                let (Some(s), Some(holder)) = (session, holder) else { return Some(session_lost()) };
                let mut state = self.shared.state();
                let Some(q) = state.queues.get_mut(&entity.queue) else { return Some(bad("no such entity")) };
                let done = match op {
                    "renew-session-lock" => {
                        q.renew_session(&s, holder, now).map(|until| map(vec![("expiration", timestamp(until))]))
                    }
                    "get-session-state" => q
                        .session_state(&s, holder, now)
                        .map(|st| map(vec![("session-state", st.map_or(Value::Null, |b| Value::Binary(b.into())))])),
                    _ => {
                        let st = match field(&body, "session-state") {
                            Some(Value::Binary(b)) => Some(b.to_vec()),
                            Some(Value::Null) | None => None,
                            Some(_) => return Some(bad("session-state must be binary or null")),
                        };
                        q.set_session_state(&s, holder, st, now).map(|()| Value::Null)
                    }
                };
                match done {
                    Ok(body) => {
                        if let Some(until) = q.session_until(&s) {
                            drop(state);
                            self.shared.locked_until(until);
                        }
                        ok(body)
                    }
                    Err(_) => session_lost(),
                }
            }
            "schedule-message" => self.schedule(entity, &body, now),
            "cancel-scheduled-message" => {
                let Some(seqs) = longs(&body, "sequence-numbers") else {
                    return Some(bad("cancel-scheduled-message needs sequence-numbers: array of long"));
                };
                match self.shared.state().cancel_scheduled(&entity.queue, &seqs) {
                    Ok(()) => ok(Value::Null),
                    Err(seq) => (
                        404,
                        Some(MESSAGE_NOT_FOUND),
                        format!("No scheduled message has sequence number {seq}."),
                        Value::Null,
                    ),
                }
            }
            "receive-by-sequence-number" => {
                let Some(seqs) = longs(&body, "sequence-numbers") else {
                    return Some(bad("receive-by-sequence-number needs sequence-numbers: array of long"));
                };
                if long_field(&body, "receiver-settle-mode") == Some(0) {
                    return Some((
                        501,
                        Some("amqp:not-implemented"),
                        "test-servicebus does not model receive-and-delete of deferred messages".to_owned(),
                        Value::Null,
                    ));
                }
                if session.is_some() && holder.is_none() {
                    return Some(session_lost());
                }
                let got = self.shared.state().lock_deferred(entity, &seqs, session.as_deref(), now);
                match got {
                    Some(Ok(deliveries)) => {
                        if let Some(d) = deliveries.first() {
                            self.shared.locked_until(d.until_ms);
                        }
                        ok(messages_body(deliveries))
                    }
                    Some(Err(missing)) => (
                        404,
                        Some(MESSAGE_NOT_FOUND),
                        format!(
                            "Failed to lock one or more specified messages. No deferred message has sequence number {}.",
                            missing.0
                        ),
                        Value::Null,
                    ),
                    None => bad("no such entity"),
                }
            }
            "update-disposition" => self.update_disposition(entity, &body, now),
            "peek-message" => {
                let from = long_field(&body, "from-sequence-number").unwrap_or(1);
                let count = long_field(&body, "message-count").unwrap_or(1).clamp(0, 1000) as usize;
                let state = self.shared.state();
                let Some(q) = state.queue(&entity.queue) else { return Some(bad("no such entity")) };
                let found = q.peek(entity.sub, from, count, session.as_deref());
                if found.is_empty() {
                    (204, None, "No messages to peek.".to_owned(), Value::Null)
                } else {
                    let list =
                        found.into_iter().map(|(_, m)| map(vec![("message", Value::Binary(m.into()))])).collect();
                    ok(map(vec![("messages", Value::List(list))]))
                }
            }
            _ => return None,
        })
    }

    /// `schedule-message`: `{messages: [{message-id, session-id?, message: binary}]}`,
    /// answered with `{sequence-numbers: array of long}`.
    fn schedule(&mut self, entity: &EntityRef, body: &Value, now: i64) -> Reply {
        let Some(list) = items(body, "messages") else { return bad("schedule-message needs messages: a list of maps") };
        let mut parsed = Vec::with_capacity(list.len());
        for item in list {
            let Some(Value::Binary(bytes)) = field(item, "message") else {
                return bad("each scheduled message needs message: binary");
            };
            match StoredMessage::parse(bytes) {
                Ok(m) => parsed.push(m),
                Err(e) => return bad(&e.0),
            }
        }
        let mut state = self.shared.state();
        let mut sequences = Vec::with_capacity(parsed.len());
        for message in parsed {
            let Some(due) = message.scheduled_enqueue_ms() else {
                return bad("a scheduled message needs x-opt-scheduled-enqueue-time");
            };
            match state.schedule(&entity.queue, message, due, now) {
                Ok(seq) => sequences.push(Value::Long(seq)),
                Err(why) => return (400, Some("amqp:not-allowed"), why, Value::Null),
            }
        }
        let next = state.next_deadline();
        drop(state);
        if let Some(at) = next {
            self.shared.locked_until(at);
        }
        ok(map(vec![("sequence-numbers", Value::Array(Array(sequences)))]))
    }

    /// `update-disposition`: settle by lock token (how the SDK settles deferred
    /// messages, and its fallback for others).
    fn update_disposition(&mut self, entity: &EntityRef, body: &Value, now: i64) -> Reply {
        let Some(tokens) = lock_tokens(Some(body.clone())).filter(|t| !t.is_empty()) else {
            return bad("update-disposition needs lock-tokens: array of uuid");
        };
        let settlement = match string_field(body, "disposition-status").as_deref() {
            Some("completed") => Settlement::Complete,
            Some("abandoned") => Settlement::Abandon { failed: true, annotations: Vec::new() },
            Some("defered" | "deferred") => Settlement::Defer,
            Some("suspended") => Settlement::DeadLetter {
                reason: string_field(body, "deadletter-reason"),
                description: string_field(body, "deadletter-description"),
            },
            other => return bad(&format!("unknown disposition-status {other:?}")),
        };
        let mut state = self.shared.state();
        for token in &tokens {
            if state.settle(entity, token, settlement.clone(), now).is_err() {
                return (410, Some(LOCK_LOST), LOCK_LOST_TEXT.to_owned(), Value::Null);
            }
        }
        drop(state);
        // The link's own record of these deliveries, if they came over it, is done.
        for session in self.sessions.values_mut() {
            session
                .unsettled
                .retain(|_, o| !matches!(o, super::link::Outgoing::Locked { token, .. } if tokens.contains(token)));
        }
        ok(Value::Null)
    }
}

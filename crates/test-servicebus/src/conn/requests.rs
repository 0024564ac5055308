//! The request/response nodes: `$cbs` (put-token of a SAS token, answered with
//! `status-code` 202 or 401) and an entity's `$management` (`com.microsoft:renew-lock`,
//! answered with `statusCode` 200 and the new expirations, or 410 when a lock is
//! lost; the other operations are in `management`, and one not modelled answers 501).
//! A response carries the request's message id as its correlation id.

use fe2o3_amqp_types::messaging::{AmqpValue, ApplicationProperties, MessageId, Properties};
use fe2o3_amqp_types::primitives::{Array, OrderedMap, SimpleValue, Symbol, Value};

use super::Conn;
use super::deliver::{LOCK_LOST, LOCK_LOST_TEXT};
use crate::message::{StoredMessage, timestamp};
use crate::sas;
use crate::state::{EntityRef, bump};

/// The renew-lock operation.
pub(crate) const RENEW_LOCK: &str = "com.microsoft:renew-lock";

/// A response message: correlation id, status fields, body.
pub(super) fn response(correlation: Option<&MessageId>, status: &[(&str, SimpleValue)], body: Value) -> Vec<u8> {
    let properties = Properties { correlation_id: correlation.cloned(), ..Properties::default() };
    let mut ap = ApplicationProperties::default();
    for (k, v) in status {
        ap.0.insert((*k).to_owned(), v.clone());
    }
    let mut out = serde_amqp::to_vec(&properties).unwrap_or_default();
    out.extend(serde_amqp::to_vec(&ap).unwrap_or_default());
    out.extend(serde_amqp::to_vec(&AmqpValue(body)).unwrap_or_default());
    out
}

fn text(s: &str) -> SimpleValue {
    SimpleValue::String(s.to_owned())
}

fn status_code(code: u16) -> SimpleValue {
    SimpleValue::Int(i32::from(code))
}

/// A map key that is a string or a symbol.
pub(super) fn key_is(key: &Value, name: &str) -> bool {
    matches!(key, Value::String(s) if s == name) || matches!(key, Value::Symbol(Symbol(s)) if s == name)
}

impl Conn {
    /// `$cbs` put-token.
    pub(super) fn put_token(&mut self, request: &StoredMessage) -> Vec<u8> {
        let id = request.message_id();
        let answer = |code: u16, description: &str| {
            response(id, &[("status-code", status_code(code)), ("status-description", text(description))], Value::Null)
        };
        if request.string_property("operation") != Some("put-token") {
            return answer(400, "the only operation of $cbs is put-token");
        }
        let Some(Value::String(token)) = request.amqp_value() else {
            return answer(400, "put-token needs the token as an amqp-value string");
        };
        let audience = request.string_property("name").unwrap_or_default();
        let now = self.shared.clock.now_ms();
        let granted = sas::check(&token, &self.shared.key_name, &self.shared.key, now).and_then(|g| {
            if sas::covers(&g.path, &sas::resource_path(audience)) {
                Ok(g)
            } else {
                Err(sas::SasError::Malformed("the token's resource does not cover the audience named in `name`"))
            }
        });
        match granted {
            Ok(g) => {
                bump(&self.shared.counters.tokens_accepted);
                tracing::debug!(peer = %self.peer, %audience, expires_ms = g.expires_ms, "token accepted");
                self.auth.tokens.retain(|t| t.path != g.path || t.expires_ms > g.expires_ms);
                self.auth.tokens.push(g);
                answer(202, "Accepted")
            }
            Err(e) => {
                bump(&self.shared.counters.tokens_refused);
                tracing::info!(peer = %self.peer, %audience, "token refused: {e}");
                answer(401, &e.to_string())
            }
        }
    }

    /// An entity's `$management` node.
    pub(super) fn management(&mut self, entity: &EntityRef, request: &StoredMessage) -> Vec<u8> {
        let id = request.message_id();
        let answer = |code: u16, condition: Option<&str>, description: &str, body: Value| {
            let mut status = vec![("statusCode", status_code(code)), ("statusDescription", text(description))];
            if let Some(c) = condition {
                status.push(("errorCondition", SimpleValue::Symbol(Symbol::from(c))));
            }
            response(id, &status, body)
        };
        let operation = request.string_property("operation").unwrap_or_default().to_owned();
        if operation != RENEW_LOCK {
            if let Some(reply) = self.operation(entity, request, &operation) {
                let (code, condition, description, body) = reply;
                return answer(code, condition, &description, body);
            }
            bump(&self.shared.counters.unsupported_requests);
            tracing::warn!(peer = %self.peer, %operation, "a $management operation this broker does not model");
            let why = format!("test-servicebus does not model the $management operation {operation:?}");
            return answer(501, Some("amqp:not-implemented"), &why, Value::Null);
        }
        bump(&self.shared.counters.renew_lock_requests);
        let tokens = match lock_tokens(request.amqp_value()) {
            Some(t) if !t.is_empty() => t,
            _ => {
                return answer(
                    400,
                    Some("com.microsoft:argument-error"),
                    "renew-lock needs a map with lock-tokens: array of uuid",
                    Value::Null,
                );
            }
        };
        let now = self.shared.clock.now_ms();
        let mut expirations = Vec::with_capacity(tokens.len());
        {
            let mut state = self.shared.state();
            for token in &tokens {
                match state.renew(entity, token, now) {
                    Ok(until) => expirations.push(timestamp(until)),
                    Err(_) => return answer(410, Some(LOCK_LOST), LOCK_LOST_TEXT, Value::Null),
                }
            }
        }
        if let Some(Value::Timestamp(last)) = expirations.last() {
            self.shared.locked_until(last.milliseconds());
        }
        let mut body = OrderedMap::new();
        body.insert(Value::String("expirations".to_owned()), Value::Array(Array(expirations)));
        answer(200, None, "OK", Value::Map(body))
    }
}

/// `{"lock-tokens": array (or list) of uuid}`.
pub(super) fn lock_tokens(body: Option<Value>) -> Option<Vec<[u8; 16]>> {
    let Some(Value::Map(map)) = body else { return None };
    let (_, list) = map.into_iter().find(|(k, _)| key_is(k, "lock-tokens"))?;
    let items = match list {
        Value::Array(a) => a.0,
        Value::List(l) => l,
        _ => return None,
    };
    items.into_iter().map(|v| if let Value::Uuid(u) = v { Some(u.into_inner()) } else { None }).collect()
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::primitives::Uuid;

    use super::*;

    #[test]
    fn lock_tokens_are_read_from_arrays_and_lists() {
        let map = |key: Value, items: Value| {
            let mut m = OrderedMap::new();
            m.insert(key, items);
            Some(Value::Map(m))
        };
        let u = |n: u8| Value::Uuid(Uuid::from([n; 16]));
        let check =
            |body: Option<Value>, want: Option<Vec<[u8; 16]>>| assert_eq!(lock_tokens(body.clone()), want, "{body:?}");
        check(
            map(Value::String("lock-tokens".into()), Value::Array(Array(vec![u(1), u(2)]))),
            Some(vec![[1; 16], [2; 16]]),
        );
        check(map(Value::Symbol(Symbol::from("lock-tokens")), Value::List(vec![u(3)])), Some(vec![[3; 16]]));
        check(map(Value::String("lock-tokens".into()), Value::List(vec![Value::Int(1)])), None);
        check(map(Value::String("other".into()), Value::List(vec![u(3)])), None);
        check(Some(Value::Null), None);
        check(None, None);
    }
}

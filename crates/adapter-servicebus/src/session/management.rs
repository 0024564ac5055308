//! The `$management` calls on a held session: `com.microsoft:renew-session-lock`,
//! `com.microsoft:get-session-state` and `com.microsoft:set-session-state`.
//!
//! Each request names the session (`session-id`) and the receiver link that holds it
//! (`associated-link-name`), like renew-lock; the answers: `{expiration: timestamp}`,
//! `{session-state: binary or null}`, and an empty 200. 410 (Gone) means the session
//! lock is lost.

use std::time::Duration;

use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Message};
use fe2o3_amqp::types::primitives::{Binary, OrderedMap, SimpleValue, Symbol, Value};
use fe2o3_amqp_management::error::Error as MgmtError;
use fe2o3_amqp_management::{Request, Response};

/// What every session call carries.
#[derive(Debug, Clone)]
pub(crate) struct SessionCall {
    pub(crate) session_id: String,
    pub(crate) link_name: String,
    pub(crate) server_timeout: Duration,
}

impl SessionCall {
    fn properties(&self) -> ApplicationProperties {
        let mut props = ApplicationProperties::default();
        let timeout = u32::try_from(self.server_timeout.as_millis()).unwrap_or(u32::MAX);
        props.0.insert("com.microsoft:server-timeout".to_owned(), SimpleValue::Uint(timeout));
        props.0.insert("associated-link-name".to_owned(), SimpleValue::String(self.link_name.clone()));
        props
    }

    fn body(&self) -> OrderedMap<String, Value> {
        let mut map = OrderedMap::new();
        map.insert("session-id".to_owned(), Value::String(self.session_id.clone()));
        map
    }
}

/// `com.microsoft:renew-session-lock`.
pub(crate) struct RenewSessionLock(pub(crate) SessionCall);
/// `com.microsoft:get-session-state`.
pub(crate) struct GetSessionState(pub(crate) SessionCall);
/// `com.microsoft:set-session-state`; `None` clears the state.
pub(crate) struct SetSessionState(pub(crate) SessionCall, pub(crate) Option<Vec<u8>>);

impl Request for RenewSessionLock {
    const OPERATION: &'static str = "com.microsoft:renew-session-lock";
    type Response = SessionExpiration;
    type Body = AmqpValue<OrderedMap<String, Value>>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        Some(self.0.properties())
    }

    fn encode_body(self) -> Self::Body {
        AmqpValue(self.0.body())
    }
}

impl Request for GetSessionState {
    const OPERATION: &'static str = "com.microsoft:get-session-state";
    type Response = SessionState;
    type Body = AmqpValue<OrderedMap<String, Value>>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        Some(self.0.properties())
    }

    fn encode_body(self) -> Self::Body {
        AmqpValue(self.0.body())
    }
}

impl Request for SetSessionState {
    const OPERATION: &'static str = "com.microsoft:set-session-state";
    type Response = Done;
    type Body = AmqpValue<OrderedMap<String, Value>>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        Some(self.0.properties())
    }

    fn encode_body(self) -> Self::Body {
        let mut map = self.0.body();
        let state = self.1.map_or(Value::Null, |b| Value::Binary(Binary::from(b)));
        map.insert("session-state".to_owned(), state);
        AmqpValue(map)
    }
}

/// The field `name` of a map answer.
fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Map(map) = body else { return None };
    map.iter().find_map(|(k, v)| match k {
        Value::String(s) | Value::Symbol(Symbol(s)) if s == name => Some(v),
        _ => None,
    })
}

/// The session lock's new expiry, Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionExpiration(pub(crate) i64);

impl Response for SessionExpiration {
    const STATUS_CODE: u16 = 200;
    type Body = Value;
    type Error = MgmtError;

    fn decode_message(message: Message<Self::Body>) -> Result<Self, Self::Error> {
        match field(&message.body, "expiration") {
            Some(Value::Timestamp(t)) => Ok(SessionExpiration(t.milliseconds())),
            _ => Err(MgmtError::DecodeError(None)),
        }
    }
}

/// The session's state (`None`: none set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionState(pub(crate) Option<Vec<u8>>);

impl Response for SessionState {
    const STATUS_CODE: u16 = 200;
    type Body = Value;
    type Error = MgmtError;

    fn decode_message(message: Message<Self::Body>) -> Result<Self, Self::Error> {
        match field(&message.body, "session-state") {
            Some(Value::Binary(b)) => Ok(SessionState(Some(b.to_vec()))),
            Some(Value::Null) | None => Ok(SessionState(None)),
            Some(_) => Err(MgmtError::DecodeError(None)),
        }
    }
}

/// A call answered 200 with nothing to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Done;

impl Response for Done {
    const STATUS_CODE: u16 = 200;
    type Body = Value;
    type Error = MgmtError;

    fn decode_message(_: Message<Self::Body>) -> Result<Self, Self::Error> {
        Ok(Done)
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp::types::primitives::Timestamp;

    use super::*;

    fn answer(fields: Vec<(&str, Value)>) -> Message<Value> {
        let map = fields.into_iter().map(|(k, v)| (Value::String(k.to_owned()), v)).collect();
        Message::builder().body(Value::Map(map)).build()
    }

    fn call() -> SessionCall {
        SessionCall { session_id: "s1".into(), link_name: "link".into(), server_timeout: Duration::from_secs(5) }
    }

    #[test]
    fn requests_name_the_session_and_the_link() {
        let mut renew = RenewSessionLock(call());
        let props = renew.encode_application_properties().expect("properties");
        assert_eq!(props.0.get("associated-link-name"), Some(&SimpleValue::String("link".into())));
        assert_eq!(props.0.get("com.microsoft:server-timeout"), Some(&SimpleValue::Uint(5_000)));
        assert_eq!(renew.encode_body().0.get("session-id"), Some(&Value::String("s1".into())));
        let set = SetSessionState(call(), Some(b"st".to_vec())).encode_body().0;
        assert_eq!(set.get("session-state"), Some(&Value::Binary(Binary::from(b"st".to_vec()))));
        let clear = SetSessionState(call(), None).encode_body().0;
        assert_eq!(clear.get("session-state"), Some(&Value::Null));
    }

    #[test]
    fn answers_are_read_or_refused() {
        let until = Value::Timestamp(Timestamp::from_milliseconds(1_700_000_000_000));
        assert_eq!(
            SessionExpiration::decode_message(answer(vec![("expiration", until)])).ok(),
            Some(SessionExpiration(1_700_000_000_000))
        );
        assert!(SessionExpiration::decode_message(answer(vec![("expiration", Value::Long(1))])).is_err());
        assert!(SessionExpiration::decode_message(answer(vec![])).is_err());
        let state = Value::Binary(Binary::from(b"x".to_vec()));
        assert_eq!(
            SessionState::decode_message(answer(vec![("session-state", state)])).ok(),
            Some(SessionState(Some(b"x".to_vec())))
        );
        assert_eq!(
            SessionState::decode_message(answer(vec![("session-state", Value::Null)])).ok(),
            Some(SessionState(None))
        );
        assert_eq!(SessionState::decode_message(answer(vec![])).ok(), Some(SessionState(None)));
        assert!(SessionState::decode_message(answer(vec![("session-state", Value::Bool(true))])).is_err());
    }
}

//! The `com.microsoft:renew-lock` request on the entity's `$management` node, and
//! its response.
//!
//! Request: application property `operation = com.microsoft:renew-lock` (plus
//! `associated-link-name`, the receiver that holds the lock, and a server timeout);
//! body an `amqp-value` map `{"lock-tokens": array of uuid}`. Response: `statusCode`
//! 200 and a map `{"expirations": array of timestamp}`, one per token; 410 (Gone)
//! when the lock is already lost.

use std::time::Duration;

use drain_core::{ErrorKind, PortError};
use fe2o3_amqp::types::messaging::{AmqpValue, ApplicationProperties, Message};
use fe2o3_amqp::types::primitives::{Array, OrderedMap, SimpleValue, Uuid, Value};
use fe2o3_amqp_management::error::Error as MgmtError;
use fe2o3_amqp_management::{Request, Response};

use super::lock_token::LockToken;

/// The operation name.
pub(crate) const RENEW_LOCK_OPERATION: &str = "com.microsoft:renew-lock";

/// A renew-lock request for one or more lock tokens.
#[derive(Debug, Clone)]
pub(crate) struct RenewLockRequest {
    pub(crate) tokens: Vec<LockToken>,
    /// The receiver link that holds the locks.
    pub(crate) link_name: Option<String>,
    pub(crate) server_timeout: Duration,
}

impl Request for RenewLockRequest {
    const OPERATION: &'static str = RENEW_LOCK_OPERATION;
    type Response = RenewLockResponse;
    type Body = AmqpValue<OrderedMap<String, Array<Uuid>>>;

    fn encode_application_properties(&mut self) -> Option<ApplicationProperties> {
        let mut props = ApplicationProperties::default();
        let timeout = u32::try_from(self.server_timeout.as_millis()).unwrap_or(u32::MAX);
        props.0.insert("com.microsoft:server-timeout".to_owned(), SimpleValue::Uint(timeout));
        if let Some(link) = &self.link_name {
            props.0.insert("associated-link-name".to_owned(), SimpleValue::String(link.clone()));
        }
        Some(props)
    }

    fn encode_body(self) -> Self::Body {
        let tokens = self.tokens.iter().map(|t| Uuid::from(*t.as_bytes())).collect();
        let mut map = OrderedMap::new();
        map.insert("lock-tokens".to_owned(), Array(tokens));
        AmqpValue(map)
    }
}

/// The new lock expirations, in Unix milliseconds, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewLockResponse {
    pub(crate) expirations_ms: Vec<i64>,
}

impl Response for RenewLockResponse {
    const STATUS_CODE: u16 = 200;
    type Body = Value;
    type Error = MgmtError;

    fn decode_message(message: Message<Self::Body>) -> Result<Self, Self::Error> {
        let bad = || MgmtError::DecodeError(None);
        let Value::Map(map) = message.body else { return Err(bad()) };
        let list = map
            .iter()
            .find_map(|(k, v)| match k {
                Value::String(s) | Value::Symbol(fe2o3_amqp::types::primitives::Symbol(s)) if s == "expirations" => {
                    Some(v)
                }
                _ => None,
            })
            .ok_or_else(bad)?;
        let items: &[Value] = match list {
            Value::Array(a) => &a.0,
            Value::List(l) => l,
            _ => return Err(bad()),
        };
        let expirations_ms = items
            .iter()
            .map(|v| match v {
                Value::Timestamp(t) => Ok(t.milliseconds()),
                _ => Err(bad()),
            })
            .collect::<Result<_, _>>()?;
        Ok(RenewLockResponse { expirations_ms })
    }
}

/// Map a failed management call to a [`PortError`]: 410 Gone -> `LockLost`.
pub(crate) fn renew_error(e: &MgmtError) -> PortError {
    if let MgmtError::Status(status) = e {
        let code = status.code.0.get();
        let desc = status.description.as_deref().unwrap_or("");
        let kind = match code {
            410 => ErrorKind::LockLost,
            401 => ErrorKind::Auth,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            408 | 500 | 503 => ErrorKind::Unavailable,
            _ => ErrorKind::Other,
        };
        return PortError::new(kind, format!("renew-lock answered {code}: {desc}"));
    }
    PortError::new(ErrorKind::Connection, format!("renew-lock failed: {e}"))
}

/// How long a lock that expires at `expires_ms` lasts from `now_ms` (Unix milliseconds).
pub(crate) fn lock_duration(now_ms: i64, expires_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(expires_ms.saturating_sub(now_ms)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use fe2o3_amqp::types::messaging::Properties;
    use fe2o3_amqp_management::error::StatusError;
    use fe2o3_amqp_management::status::StatusCode;

    use super::*;

    fn timestamp(ms: i64) -> fe2o3_amqp::types::primitives::Timestamp {
        fe2o3_amqp::types::primitives::Timestamp::from_milliseconds(ms)
    }

    const TOKEN: [u8; 16] =
        [0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff];

    #[test]
    fn request_message() {
        let req = RenewLockRequest {
            tokens: vec![LockToken::from_bytes(TOKEN), LockToken::from_bytes([1; 16])],
            link_name: Some("drain-receiver-1".into()),
            server_timeout: Duration::from_secs(60),
        };
        let msg = req.into_message();
        let ap = msg.application_properties.as_ref().unwrap();
        assert_eq!(ap.0.get("operation"), Some(&SimpleValue::String("com.microsoft:renew-lock".into())));
        assert_eq!(ap.0.get("associated-link-name"), Some(&SimpleValue::String("drain-receiver-1".into())));
        assert_eq!(ap.0.get("com.microsoft:server-timeout"), Some(&SimpleValue::Uint(60_000)));
        let tokens = msg.body.0.get("lock-tokens").expect("lock-tokens");
        assert_eq!(tokens.0.len(), 2);
        assert_eq!(tokens.0[0].as_inner(), &TOKEN);

        // Wire form of the body: amqp-value (0x00 0x53 0x77) holding a map whose
        // "lock-tokens" entry is an *array* (0xe0) of uuid (constructor 0x98).
        let body = serde_amqp::to_vec(&msg.body).unwrap();
        assert_eq!(&body[..3], &[0x00, 0x53, 0x77]);
        let key = b"lock-tokens";
        let at = body.windows(key.len()).position(|w| w == key).expect("key encoded") + key.len();
        assert_eq!(body[at], 0xe0, "array8");
        assert_eq!(body[at + 2], 2, "two elements");
        assert_eq!(body[at + 3], 0x98, "of uuid");
        assert_eq!(&body[at + 4..at + 20], &TOKEN, "RFC byte order on the wire");
    }

    fn response(status: u16, body: Value) -> Message<Value> {
        let mut ap = ApplicationProperties::default();
        ap.0.insert("statusCode".into(), SimpleValue::Int(i32::from(status)));
        Message {
            header: None,
            delivery_annotations: None,
            message_annotations: None,
            properties: Some(Properties::default()),
            application_properties: Some(ap),
            body,
            footer: None,
        }
    }

    fn expirations(key: Value, items: Vec<Value>) -> Value {
        let mut map = OrderedMap::new();
        map.insert(key, Value::Array(Array(items)));
        Value::Map(map)
    }

    #[test]
    fn response_decoding() {
        let ok = RenewLockResponse::from_message(response(
            200,
            expirations(
                Value::String("expirations".into()),
                vec![Value::Timestamp(timestamp(1_000)), Value::Timestamp(timestamp(2_000))],
            ),
        ))
        .unwrap();
        assert_eq!(ok.expirations_ms, vec![1_000, 2_000]);
        let symbol_key = expirations(Value::Symbol("expirations".into()), vec![Value::Timestamp(timestamp(5))]);
        assert_eq!(RenewLockResponse::from_message(response(200, symbol_key)).unwrap().expirations_ms, vec![5]);
        assert!(RenewLockResponse::from_message(response(200, Value::Null)).is_err());
        let wrong = expirations(Value::String("expirations".into()), vec![Value::Int(1)]);
        assert!(RenewLockResponse::from_message(response(200, wrong)).is_err());
        let gone = RenewLockResponse::from_message(response(410, Value::Null)).unwrap_err();
        assert_eq!(renew_error(&gone).kind, ErrorKind::LockLost);
    }

    #[test]
    fn status_codes_map_to_kinds() {
        let check = |code: u16, kind: ErrorKind| {
            let e =
                MgmtError::Status(StatusError { code: StatusCode(NonZeroU16::new(code).unwrap()), description: None });
            assert_eq!(renew_error(&e).kind, kind, "{code}");
        };
        check(410, ErrorKind::LockLost);
        check(401, ErrorKind::Auth);
        check(404, ErrorKind::NotFound);
        check(503, ErrorKind::Unavailable);
        check(400, ErrorKind::Other);
        assert_eq!(lock_duration(1_000, 31_000), Duration::from_secs(30));
        assert_eq!(lock_duration(5_000, 1_000), Duration::ZERO);
    }
}

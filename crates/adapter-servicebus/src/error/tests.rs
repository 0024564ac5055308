use std::io;

use fe2o3_amqp::types::definitions::SessionError;
use fe2o3_amqp::types::messaging::{Modified, Rejected, Released};

use super::*;

const WHAT: &str = "amqp://guest:***@127.0.0.1:5672/q";

fn cond(c: ErrorCondition) -> AmqpErr {
    AmqpErr { condition: c, description: Some("detail".into()), info: None }
}

fn custom(s: &str) -> ErrorCondition {
    ErrorCondition::Custom(Symbol::from(s))
}

/// One case: the mapped error has `kind` and `temporary`, and names the endpoint.
fn check(got: PortError, kind: ErrorKind, temporary: bool) {
    assert_eq!((got.kind, got.is_temporary()), (kind, temporary), "{got}");
    assert!(got.message.starts_with(WHAT) || got.message.starts_with("rejected: "), "{got}");
}

#[test]
fn broker_conditions() {
    let c = |c: ErrorCondition| condition_error(WHAT, &cond(c));
    check(c(ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess)), ErrorKind::Permission, false);
    check(c(ErrorCondition::AmqpError(AmqpError::NotFound)), ErrorKind::NotFound, false);
    check(c(ErrorCondition::AmqpError(AmqpError::ResourceDeleted)), ErrorKind::NotFound, false);
    check(c(ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded)), ErrorKind::Unavailable, true);
    check(c(ErrorCondition::AmqpError(AmqpError::PreconditionFailed)), ErrorKind::Config, false);
    check(c(ErrorCondition::AmqpError(AmqpError::InternalError)), ErrorKind::Protocol, false);
    check(c(ErrorCondition::ConnectionError(ConnectionError::ConnectionForced)), ErrorKind::Connection, true);
    check(c(ErrorCondition::LinkError(LinkError::DetachForced)), ErrorKind::Connection, true);
    check(c(ErrorCondition::SessionError(SessionError::WindowViolation)), ErrorKind::Protocol, false);
    check(c(custom("com.microsoft:message-lock-lost")), ErrorKind::LockLost, false);
    check(c(custom("com.microsoft:server-busy")), ErrorKind::Unavailable, true);
    check(c(custom("com.microsoft:entity-disabled")), ErrorKind::Unavailable, false);
    check(c(custom("com.microsoft:auth-failed")), ErrorKind::Auth, false);
    check(c(custom("x:unknown")), ErrorKind::Protocol, false);
    let e = c(ErrorCondition::AmqpError(AmqpError::NotFound));
    assert!(e.message.contains("amqp:not-found (detail)"), "{e}");
}

#[test]
fn socket_errors() {
    let io = |k: io::ErrorKind| io_error(WHAT, &io::Error::new(k, "boom"));
    check(io(io::ErrorKind::ConnectionRefused), ErrorKind::Connection, true);
    check(io(io::ErrorKind::ConnectionReset), ErrorKind::Connection, true);
    check(io(io::ErrorKind::UnexpectedEof), ErrorKind::Connection, true);
    check(io(io::ErrorKind::TimedOut), ErrorKind::Timeout, true);
    check(io(io::ErrorKind::InvalidData), ErrorKind::Connection, false);
    check(io(io::ErrorKind::Other), ErrorKind::Connection, true);
    check(timeout(WHAT, "connecting", std::time::Duration::from_secs(1)), ErrorKind::Timeout, true);
}

#[test]
fn open_errors() {
    let sasl = |code: SaslCode| open_error(WHAT, &OpenError::SaslError { code, additional_data: None });
    check(sasl(SaslCode::Auth), ErrorKind::Auth, false);
    check(sasl(SaslCode::SysPerm), ErrorKind::Auth, false);
    check(sasl(SaslCode::SysTemp), ErrorKind::Unavailable, true);
    let refused = OpenError::Io(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
    check(open_error(WHAT, &refused), ErrorKind::Connection, true);
    let closed = OpenError::RemoteClosedWithError(cond(ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess)));
    check(open_error(WHAT, &closed), ErrorKind::Permission, false);
    check(open_error(WHAT, &OpenError::ProtocolHeaderMismatch(Default::default())), ErrorKind::Protocol, false);
}

#[test]
fn stopped_sessions_and_connections_are_temporary() {
    let forced = cond(ErrorCondition::ConnectionError(ConnectionError::ConnectionForced));
    let internal = cond(ErrorCondition::AmqpError(AmqpError::InternalError));
    check(connection_stopped(WHAT, &ConnectionStopReason::RemoteClosed), ErrorKind::Connection, true);
    check(connection_stopped(WHAT, &ConnectionStopReason::RemoteClosedWithError(forced)), ErrorKind::Connection, true);
    let r = SessionStopReason::ConnectionStopped(ConnectionStopReason::RemoteClosedWithError(internal.clone()));
    check(session_stopped(WHAT, &r), ErrorKind::Connection, true);
    check(session_stopped(WHAT, &SessionStopReason::RemoteEndedWithError(internal)), ErrorKind::Connection, true);
    check(session_stopped(WHAT, &SessionStopReason::RemoteEnded), ErrorKind::Connection, true);
    let unauthorized = cond(ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess));
    check(
        receiver_attach_error(WHAT, &ReceiverAttachError::RemoteClosedWithError(unauthorized)),
        ErrorKind::Permission,
        false,
    );
    let not_found = cond(ErrorCondition::AmqpError(AmqpError::NotFound));
    check(sender_attach_error(WHAT, &SenderAttachError::RemoteClosedWithError(not_found)), ErrorKind::NotFound, false);
}

#[test]
fn send_outcomes() {
    let o = |o: Outcome| outcome_error(WHAT, &o);
    check(o(Outcome::Released(Released {})), ErrorKind::Unavailable, true);
    let modified = |here| {
        Outcome::Modified(Modified { delivery_failed: Some(true), undeliverable_here: here, message_annotations: None })
    };
    check(o(modified(None)), ErrorKind::Unavailable, true);
    check(o(modified(Some(true))), ErrorKind::Unavailable, false);
    check(o(Outcome::Rejected(Rejected { error: None })), ErrorKind::Other, false);
    let too_big = cond(ErrorCondition::LinkError(LinkError::MessageSizeExceeded));
    check(o(Outcome::Rejected(Rejected { error: Some(too_big) })), ErrorKind::Protocol, false);
    let full = cond(ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded));
    let e = o(Outcome::Rejected(Rejected { error: Some(full) }));
    check(e.clone(), ErrorKind::Unavailable, true);
    assert!(e.message.starts_with("rejected: "), "{e}");
}

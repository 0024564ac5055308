//! fe2o3-amqp's errors mapped to drain-core's [`PortError`] at the boundary.
//!
//! Refused/reset connections and timeouts are temporary; SASL and CBS failures are
//! `Auth`; `amqp:unauthorized-access` is `Permission`; `amqp:not-found` is
//! `NotFound`. Every message starts with the redacted endpoint (`what`) and never
//! contains a secret: fe2o3 never sees the URL, only a stream and the SASL profile.

use std::io;

use drain_core::{ErrorKind, Persistence, PortError};
use fe2o3_amqp::connection::{ConnectionStopReason, OpenError};
use fe2o3_amqp::link::{
    DetachError, IllegalLinkStateError, LinkStateError, ReceiverAttachError, RecvError, SendError, SenderAttachError,
    SessionStopReason,
};
use fe2o3_amqp::session::BeginError;
use fe2o3_amqp::types::definitions::{AmqpError, ConnectionError, Error as AmqpErr, ErrorCondition, LinkError};
use fe2o3_amqp::types::messaging::Outcome;
use fe2o3_amqp::types::primitives::Symbol;
use fe2o3_amqp::types::sasl::SaslCode;

/// The symbolic name of a condition, e.g. `amqp:not-found`.
pub(crate) fn condition_name(c: &ErrorCondition) -> String {
    let symbol = match c {
        ErrorCondition::AmqpError(e) => Symbol::from(e),
        ErrorCondition::ConnectionError(e) => Symbol::from(e),
        ErrorCondition::SessionError(e) => Symbol::from(e),
        ErrorCondition::LinkError(e) => Symbol::from(e),
        ErrorCondition::Custom(s) => s.clone(),
        #[allow(unreachable_patterns)]
        _ => return format!("{c:?}"),
    };
    symbol.0
}

/// An error condition sent by the broker.
pub(crate) fn condition_error(what: &str, e: &AmqpErr) -> PortError {
    let name = condition_name(&e.condition);
    let desc = e.description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default();
    let (kind, hint) = match &e.condition {
        ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess) => (
            ErrorKind::Permission,
            "the credentials lack a right on this entity (Listen/Send, or RabbitMQ permissions)",
        ),
        ErrorCondition::AmqpError(AmqpError::NotFound) => (ErrorKind::NotFound, "create the queue, or check its name"),
        ErrorCondition::AmqpError(AmqpError::ResourceLimitExceeded | AmqpError::ResourceLocked) => {
            (ErrorKind::Unavailable, "the broker is busy; retrying")
        }
        ErrorCondition::AmqpError(AmqpError::PreconditionFailed) => {
            (ErrorKind::Config, "the queue exists with other arguments than the link asked for")
        }
        ErrorCondition::AmqpError(AmqpError::ResourceDeleted) => (ErrorKind::NotFound, "the queue was deleted"),
        ErrorCondition::ConnectionError(ConnectionError::ConnectionForced | ConnectionError::Redirect)
        | ErrorCondition::LinkError(LinkError::DetachForced | LinkError::Redirect | LinkError::Stolen) => {
            (ErrorKind::Connection, "the broker closed the link; reconnecting")
        }
        ErrorCondition::Custom(s) => match s.as_str() {
            "com.microsoft:message-lock-lost" | "com.microsoft:session-lock-lost" => {
                (ErrorKind::LockLost, "the lock expired; the broker redelivers the message")
            }
            "com.microsoft:server-busy" | "com.microsoft:timeout" => (ErrorKind::Unavailable, "retrying"),
            "com.microsoft:session-cannot-be-locked" => {
                (ErrorKind::Unavailable, "another receiver holds the session; trying again later")
            }
            "com.microsoft:entity-disabled" => (ErrorKind::Unavailable, "the entity is disabled"),
            "com.microsoft:auth-failed" => (ErrorKind::Auth, "check the shared access key"),
            _ => (ErrorKind::Protocol, "unexpected broker error"),
        },
        _ => (ErrorKind::Protocol, "unexpected broker error"),
    };
    let mut err = PortError::new(kind, format!("{what}: broker error {name}{desc}: {hint}"));
    if e.condition == ErrorCondition::Custom(Symbol::from("com.microsoft:entity-disabled")) {
        err = err.with_persistence(Persistence::Permanent);
    }
    err
}

/// A socket error: refused, reset and timed-out connections are temporary; a TLS
/// failure (invalid data) is permanent.
pub(crate) fn io_error(what: &str, e: &io::Error) -> PortError {
    use io::ErrorKind as K;
    let (kind, permanent, hint) = match e.kind() {
        K::ConnectionRefused => (ErrorKind::Connection, false, "is the broker running and listening on this port?"),
        K::TimedOut | K::WouldBlock => (ErrorKind::Timeout, false, "no answer in time"),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof | K::NotConnected => {
            (ErrorKind::Connection, false, "the connection dropped")
        }
        K::InvalidData | K::InvalidInput => (
            ErrorKind::Connection,
            true,
            "TLS or protocol negotiation failed; check tls/port (5671 = TLS, 5672 = plain)",
        ),
        _ => (ErrorKind::Connection, false, "could not connect"),
    };
    let err = PortError::new(kind, format!("{what}: {e}: {hint}"));
    if permanent { err.with_persistence(Persistence::Permanent) } else { err }
}

pub(crate) fn open_error(what: &str, e: &OpenError) -> PortError {
    match e {
        OpenError::Io(io) => io_error(what, io),
        OpenError::TransportError(t) => transport_error(what, t),
        OpenError::SaslError { code, .. } => {
            let (kind, hint) = match code {
                SaslCode::SysTemp => (ErrorKind::Unavailable, "the broker's authentication is temporarily unavailable"),
                _ => (ErrorKind::Auth, "check the user name and password"),
            };
            PortError::new(kind, format!("{what}: SASL authentication failed ({code:?}): {hint}"))
        }
        OpenError::ProtocolHeaderMismatch(_) => PortError::new(
            ErrorKind::Protocol,
            format!("{what}: the server does not speak AMQP 1.0 (enable rabbitmq_amqp1_0, or check the port)"),
        ),
        OpenError::RemoteClosedWithError(err) => condition_error(what, err),
        OpenError::RemoteClosed => {
            PortError::new(ErrorKind::Connection, format!("{what}: the broker closed the connection while opening"))
        }
        other => PortError::new(ErrorKind::Protocol, format!("{what}: could not open the AMQP connection: {other}")),
    }
}

fn transport_error(what: &str, e: &fe2o3_amqp::transport::Error) -> PortError {
    match e {
        fe2o3_amqp::transport::Error::Io(io) => io_error(what, io),
        fe2o3_amqp::transport::Error::IdleTimeoutElapsed => {
            PortError::new(ErrorKind::Timeout, format!("{what}: the broker went silent (idle timeout)"))
        }
        other => PortError::new(ErrorKind::Protocol, format!("{what}: transport error: {other}")),
    }
}

pub(crate) fn connection_stopped(what: &str, reason: &ConnectionStopReason) -> PortError {
    match reason {
        ConnectionStopReason::RemoteClosedWithError(e) | ConnectionStopReason::ClosedWithError(e) => {
            let mut err = condition_error(what, e);
            if err.kind == ErrorKind::Protocol {
                err = PortError::new(ErrorKind::Connection, err.message);
            }
            err
        }
        ConnectionStopReason::Closed => PortError::new(ErrorKind::Closed, format!("{what}: closed")),
        ConnectionStopReason::RemoteClosed => {
            PortError::new(ErrorKind::Connection, format!("{what}: the broker closed the connection"))
        }
    }
}

pub(crate) fn session_stopped(what: &str, reason: &SessionStopReason) -> PortError {
    match reason {
        SessionStopReason::ConnectionStopped(c) => connection_stopped(what, c),
        SessionStopReason::RemoteEndedWithError(e) | SessionStopReason::EndedWithError(e) => {
            let mut err = condition_error(what, e);
            if err.kind == ErrorKind::Protocol {
                err = PortError::new(ErrorKind::Connection, err.message);
            }
            err
        }
        SessionStopReason::Ended => PortError::new(ErrorKind::Closed, format!("{what}: session ended")),
        SessionStopReason::RemoteEnded => {
            PortError::new(ErrorKind::Connection, format!("{what}: the broker ended the session"))
        }
    }
}

pub(crate) fn begin_error(what: &str, e: &BeginError) -> PortError {
    match e {
        BeginError::ConnectionStopped(r) => connection_stopped(what, r),
        BeginError::RemoteEndedWithError(err) => condition_error(what, err),
        other => PortError::new(ErrorKind::Connection, format!("{what}: could not begin a session: {other}")),
    }
}

pub(crate) fn receiver_attach_error(what: &str, e: &ReceiverAttachError) -> PortError {
    match e {
        ReceiverAttachError::RemoteClosedWithError(err) => condition_error(what, err),
        ReceiverAttachError::SessionStopped(r) => session_stopped(what, r),
        other => PortError::new(ErrorKind::Protocol, format!("{what}: could not attach the receiver: {other}")),
    }
}

pub(crate) fn sender_attach_error(what: &str, e: &SenderAttachError) -> PortError {
    match e {
        SenderAttachError::RemoteClosedWithError(err) => condition_error(what, err),
        SenderAttachError::SessionStopped(r) => session_stopped(what, r),
        other => PortError::new(ErrorKind::Protocol, format!("{what}: could not attach the sender: {other}")),
    }
}

pub(crate) fn link_state_error(what: &str, e: &LinkStateError) -> PortError {
    match e {
        LinkStateError::SessionStopped(r) => session_stopped(what, r),
        LinkStateError::RemoteDetachedWithError(err) | LinkStateError::RemoteClosedWithError(err) => {
            let mut err = condition_error(what, err);
            if err.kind == ErrorKind::Protocol {
                err = PortError::new(ErrorKind::Connection, err.message);
            }
            err
        }
        other => PortError::new(ErrorKind::Connection, format!("{what}: the link is gone: {other}")),
    }
}

pub(crate) fn recv_error(what: &str, e: &RecvError) -> PortError {
    match e {
        RecvError::LinkStateError(l) => link_state_error(what, l),
        other => PortError::new(ErrorKind::Protocol, format!("{what}: receive failed: {other}")),
    }
}

pub(crate) fn send_error(what: &str, e: &SendError) -> PortError {
    match e {
        SendError::LinkStateError(l) => link_state_error(what, l),
        SendError::Detached(d) => detach_error(what, d),
        SendError::MessageSizeExceeded(m) => PortError::new(
            ErrorKind::Other,
            format!("{what}: the message is {} bytes, more than the link's maximum of {}", m.size, m.max_size),
        ),
        other => PortError::new(ErrorKind::Protocol, format!("{what}: send failed: {other}")),
    }
}

pub(crate) fn detach_error(what: &str, e: &DetachError) -> PortError {
    match e {
        DetachError::SessionStopped(r) => session_stopped(what, r),
        DetachError::RemoteDetachedWithError(err) | DetachError::RemoteClosedWithError(err) => {
            condition_error(what, err)
        }
        other => PortError::new(ErrorKind::Connection, format!("{what}: the link was detached: {other}")),
    }
}

pub(crate) fn disposition_error(what: &str, e: &IllegalLinkStateError) -> PortError {
    match e {
        IllegalLinkStateError::SessionStopped(r) => session_stopped(what, r),
        IllegalLinkStateError::IllegalState => {
            PortError::new(ErrorKind::Connection, format!("{what}: the link is not attached"))
        }
    }
}

/// A non-accepted outcome of a sent message.
pub(crate) fn outcome_error(what: &str, outcome: &Outcome) -> PortError {
    match outcome {
        Outcome::Accepted(_) => PortError::new(ErrorKind::Other, format!("{what}: accepted")),
        Outcome::Rejected(r) => match &r.error {
            Some(e) => {
                let mut err = condition_error(what, e);
                err.message = format!("rejected: {}", err.message);
                err
            }
            None => PortError::new(ErrorKind::Other, format!("{what}: the broker rejected the message")),
        },
        Outcome::Released(_) => PortError::new(
            ErrorKind::Unavailable,
            format!("{what}: the broker released the message without taking it; retry later"),
        ),
        Outcome::Modified(m) => {
            let err = PortError::new(
                ErrorKind::Unavailable,
                format!(
                    "{what}: the broker did not take the message (modified, undeliverable-here={:?})",
                    m.undeliverable_here
                ),
            );
            if m.undeliverable_here == Some(true) { err.with_persistence(Persistence::Permanent) } else { err }
        }
        #[allow(unreachable_patterns)]
        other => PortError::new(ErrorKind::Protocol, format!("{what}: unexpected outcome {other:?}")),
    }
}

/// A timeout of one of our own operations.
pub(crate) fn timeout(what: &str, op: &str, after: std::time::Duration) -> PortError {
    PortError::new(ErrorKind::Timeout, format!("{what}: {op} took longer than {} ms", after.as_millis()))
}

#[cfg(test)]
mod tests;

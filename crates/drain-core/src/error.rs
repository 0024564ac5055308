//! Typed errors that every port returns: a kind, whether a retry can help, and a
//! message a user can act on.

use std::fmt;

use thiserror::Error;

/// Whether retrying the same call can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// A passing condition (a timeout, a refused connection, a store that is starting
    /// or failing over): retry later.
    Temporary,
    /// Retrying will fail the same way until someone changes something (rights,
    /// credentials, a record another program wrote, bad configuration).
    Permanent,
}

/// What went wrong, in words that fit every store and broker; an adapter maps its
/// driver's errors to these at its boundary (and documents how).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No answer within the configured timeout.
    Timeout,
    /// Could not connect, or the connection broke.
    Connection,
    /// The store or broker answers but does not serve right now (starting, loading
    /// its data, busy, failing over, read-only).
    Unavailable,
    /// A distributed store kept sending the request elsewhere: its topology is
    /// changing.
    Redirected,
    /// Authentication failed.
    Auth,
    /// The credentials lack a right for this operation.
    Permission,
    /// A record holds data drain does not write there (another program writes where
    /// drain keeps its records), or a reply had a shape drain does not know.
    WrongType,
    /// The peer broke the protocol or answered something we cannot use.
    Protocol,
    /// The entity does not exist (queue not found).
    NotFound,
    /// Our own configuration is wrong.
    Config,
    /// The component was closed.
    Closed,
    /// A message's lock expired or was lost; the broker will redeliver it.
    LockLost,
    /// The backend cannot do this (e.g. lock renewal on a generic AMQP broker).
    Unsupported,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The default persistence of this kind.
    #[must_use]
    pub fn default_persistence(self) -> Persistence {
        match self {
            ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::Unavailable | ErrorKind::Redirected => {
                Persistence::Temporary
            }
            _ => Persistence::Permanent,
        }
    }

    /// Whether a call that failed with this kind may still have been carried out by
    /// the store: it got no answer in time or its connection broke (a request is not
    /// withdrawn by a client's timeout, and a frozen server runs it when it thaws), or
    /// the answer came but could not be read. A refusal (unavailable, redirected, no
    /// right, bad credentials, no such entity) ran nothing. A request that was never
    /// sent ran nothing whatever its kind: ask [`PortError::may_have_run`].
    #[must_use]
    pub fn may_have_run(self) -> bool {
        matches!(
            self,
            ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::Protocol | ErrorKind::WrongType | ErrorKind::Other
        )
    }

    /// A short stable name, used in logs and metric labels.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Redirected => "redirected",
            ErrorKind::Auth => "auth",
            ErrorKind::Permission => "permission",
            ErrorKind::WrongType => "wrong_type",
            ErrorKind::Protocol => "protocol",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Config => "config",
            ErrorKind::Closed => "closed",
            ErrorKind::LockLost => "lock_lost",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error every port returns.
///
/// Adapters map their driver's errors to a kind at the boundary, and write a
/// message that says what to check; the message must never contain a secret.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{kind} ({persistence}): {message}")]
#[non_exhaustive]
pub struct PortError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Whether a retry can help.
    pub persistence: Persistence,
    /// What happened and what to do, for a human.
    pub message: String,
    /// The request never reached the store: no connection could be made (refused,
    /// a name that does not resolve, a store not connected yet), or the call was not
    /// made at all. Whatever the kind, it cannot have run.
    pub unsent: bool,
}

impl PortError {
    /// An error of `kind` with that kind's default persistence.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        PortError { kind, persistence: kind.default_persistence(), message: message.into(), unsent: false }
    }

    /// A call to an optional port (the release wake-up, the drain stamps) that the
    /// store, or a wrapper of it, does not offer: unsupported, and never sent.
    pub fn not_offered(port: &str) -> Self {
        PortError::new(ErrorKind::Unsupported, format!("the store does not offer the {port}")).never_sent()
    }

    /// Mark the request as never sent (see [`PortError::unsent`]).
    #[must_use]
    pub fn never_sent(mut self) -> Self {
        self.unsent = true;
        self
    }

    /// Whether the store may still have carried the failed call out: its kind says
    /// it may ([`ErrorKind::may_have_run`]) and the request was sent.
    #[must_use]
    pub fn may_have_run(&self) -> bool {
        !self.unsent && self.kind.may_have_run()
    }

    /// Override the persistence.
    #[must_use]
    pub fn with_persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Whether retrying may succeed.
    #[must_use]
    pub fn is_temporary(&self) -> bool {
        self.persistence == Persistence::Temporary
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Persistence::Temporary => "temporary",
            Persistence::Permanent => "permanent",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistence_defaults() {
        for (kind, temporary) in [
            (ErrorKind::Timeout, true),
            (ErrorKind::Connection, true),
            (ErrorKind::Unavailable, true),
            (ErrorKind::Redirected, true),
            (ErrorKind::Auth, false),
            (ErrorKind::Permission, false),
            (ErrorKind::WrongType, false),
            (ErrorKind::Config, false),
        ] {
            assert_eq!(PortError::new(kind, "x").is_temporary(), temporary, "{kind}");
        }
        let e = PortError::new(ErrorKind::Other, "boom").with_persistence(Persistence::Temporary);
        assert!(e.is_temporary());
        assert_eq!(e.to_string(), "other (temporary): boom");
    }

    #[test]
    fn an_unsent_request_ran_nothing_whatever_its_kind() {
        for kind in [ErrorKind::Timeout, ErrorKind::Connection, ErrorKind::Protocol, ErrorKind::Other] {
            let e = PortError::new(kind, "x");
            assert!(e.may_have_run(), "{kind}");
            let e = e.never_sent();
            assert!(!e.may_have_run(), "{kind}");
            assert_eq!(e.persistence, kind.default_persistence(), "{kind}");
        }
        assert!(!PortError::new(ErrorKind::Unavailable, "x").may_have_run());
    }
}

//! Driver errors mapped to drain-core's kinds, at the boundary.

use drain_core::{ErrorKind, PortError};

/// Map a tokio-postgres error of operation `op` against `endpoint` to a
/// [`PortError`]. The message names the endpoint, the SQLSTATE and what to check;
/// it never holds a password (the driver's messages do not carry one).
///
/// | PostgreSQL says | kind | persistence |
/// |---|---|---|
/// | class 08 (connection exception), `57P01`/`57P02` session ended by the server, a closed connection, I/O errors | `Connection` | temporary |
/// | `57014` query canceled (a statement timeout) | `Timeout` | temporary |
/// | `57P03`–`57P05` cannot connect now, `53xxx` out of resources, `25006` read only, `40001`/`40P01` serialization failure, deadlock | `Unavailable` | temporary |
/// | `28000`, `28P01` authentication refused | `Auth` | permanent |
/// | `42501` insufficient privilege | `Permission` | permanent |
/// | `3D000` no such database, `3F000` no such schema, `42883` no such function | `Config` | permanent |
/// | a row of a shape drain's functions never answer, anything else | `Protocol` | permanent |
#[must_use]
pub fn map_error(err: &tokio_postgres::Error, op: &str, endpoint: &str) -> PortError {
    let Some(db) = err.as_db_error() else {
        if err.is_closed() {
            return PortError::new(
                ErrorKind::Connection,
                format!("{op}: the connection to PostgreSQL at {endpoint} is closed; check the server"),
            );
        }
        let text = err.to_string();
        if text.contains("TLS") || text.contains("ssl") {
            return PortError::new(
                ErrorKind::Config,
                format!("{op}: PostgreSQL at {endpoint}: {text} (adapter-postgres does not speak TLS yet)"),
            );
        }
        return PortError::new(
            ErrorKind::Connection,
            format!("{op}: cannot talk to PostgreSQL at {endpoint}: {text}; check that it runs and is reachable"),
        );
    };
    let msg = db.message();
    let state = db.code().code();
    let (kind, hint) = match state {
        s if s.starts_with("08") => (ErrorKind::Connection, "check the server and the network"),
        "57P01" | "57P02" => {
            (ErrorKind::Connection, "the server ended the session (shutdown, restart, pg_terminate_backend)")
        }
        "57014" => (ErrorKind::Timeout, "a statement timeout or a cancel ended the call"),
        s if s.starts_with("57P") || s.starts_with("53") => {
            (ErrorKind::Unavailable, "the server is shutting down, starting or out of resources")
        }
        "25006" => (ErrorKind::Unavailable, "the server is read-only (a standby?)"),
        "40001" | "40P01" => (ErrorKind::Unavailable, "a conflicting transaction; the next call retries"),
        "28000" | "28P01" => (ErrorKind::Auth, "check the user and password of the URL"),
        "42501" => (ErrorKind::Permission, "grant the role the rights `drain doctor` lists"),
        "3D000" => (ErrorKind::Config, "the database in the URL does not exist"),
        "3F000" | "42883" | "42P01" => {
            (ErrorKind::Config, "drain's schema is missing or incomplete; run the SQL of schema_sql as an owner")
        }
        _ => (ErrorKind::Protocol, "an answer drain's functions never give"),
    };
    PortError::new(kind, format!("{op}: PostgreSQL at {endpoint} answered {state} ({msg}); {hint}"))
}

/// A reply of a shape drain's functions never give.
pub(crate) fn protocol(op: &str, endpoint: &str, what: &str) -> PortError {
    PortError::new(ErrorKind::Protocol, format!("{op}: PostgreSQL at {endpoint} answered {what}"))
}

/// No answer within the deadline.
pub(crate) fn timeout(op: &str, endpoint: &str, after: std::time::Duration) -> PortError {
    PortError::new(
        ErrorKind::Timeout,
        format!(
            "{op}: PostgreSQL at {endpoint} did not answer within {after:?} (the call may still have taken effect)"
        ),
    )
}

/// Whether the connection that answered `err` is of no further use.
pub(crate) fn breaks_connection(err: &tokio_postgres::Error) -> bool {
    match err.as_db_error() {
        None => true,
        Some(db) => {
            let state = db.code().code();
            state.starts_with("08") || state == "57P01" || state == "57P02"
        }
    }
}

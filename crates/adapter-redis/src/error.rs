//! Redis errors mapped to drain-core's [`PortError`] at the boundary.

use drain_core::{ErrorKind, PortError};
use redis::{ErrorKind as RedisKind, RedisError};

/// Map a redis-rs error to a [`PortError`] whose message names `endpoint` (a
/// `host:port` list, never a URL with credentials) and says what to check.
///
/// Temporary: timeouts, refused/reset/broken connections and other I/O errors,
/// `LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, `MASTERDOWN`, `OOM`,
/// `MOVED`/`ASK` (redirect storms), a missing cluster connection. Permanent:
/// `NOPERM` (Permission), `WRONGPASS`/`NOAUTH`/authentication failure (Auth),
/// `WRONGTYPE` (WrongType), `CROSSSLOT` and unexpected replies (Protocol), bad
/// configuration (Config), scripting disabled (Unsupported), anything else (Other).
#[must_use]
pub fn map_error(err: &RedisError, endpoint: &str) -> PortError {
    let detail = detail(err);
    let at = format!("Redis at {endpoint}");
    if let Some(code) = code(err) {
        let (kind, message) = match code.as_str() {
            "LOADING" => (ErrorKind::Unavailable, format!("{at} is loading its dataset into memory; retry shortly")),
            "BUSY" => (
                ErrorKind::Unavailable,
                format!(
                    "{at} is busy running a script or function (BUSY); if it persists, check SLOWLOG and SCRIPT KILL"
                ),
            ),
            "TRYAGAIN" => {
                (ErrorKind::Unavailable, format!("{at} asked to try again (TRYAGAIN): a slot is being resharded"))
            }
            "CLUSTERDOWN" => (
                ErrorKind::Unavailable,
                format!(
                    "the Redis Cluster at {endpoint} is down (CLUSTERDOWN): check `CLUSTER INFO` for failed nodes or unassigned slots"
                ),
            ),
            "READONLY" => (
                ErrorKind::Unavailable,
                format!(
                    "{at} is a read-only replica (READONLY): point DRAIN_REDIS_URL at the primary, or wait for the failover to finish"
                ),
            ),
            "MASTERDOWN" => (
                ErrorKind::Unavailable,
                format!("{at} is a replica that lost its primary (MASTERDOWN): wait for the failover to finish"),
            ),
            "OOM" => (
                ErrorKind::Unavailable,
                format!("{at} is out of memory (OOM): check maxmemory and the eviction policy"),
            ),
            "MOVED" | "ASK" => (
                ErrorKind::Redirected,
                format!(
                    "{at} kept redirecting ({code} {detail}): slots are migrating, or the server is a Redis Cluster and DRAIN_REDIS_CLUSTER is not on"
                ),
            ),
            "NOPERM" => (
                ErrorKind::Permission,
                format!(
                    "the Redis user lacks a right ({detail}): grant the minimal ACL in docs/operations.md (the commands drain sends on keys under DRAIN_KEY_PREFIX)"
                ),
            ),
            "WRONGPASS" => (
                ErrorKind::Auth,
                format!("{at} rejected the credentials (WRONGPASS): check the user and password in DRAIN_REDIS_URL"),
            ),
            "NOAUTH" => (
                ErrorKind::Auth,
                format!("{at} requires authentication (NOAUTH): put user:password in DRAIN_REDIS_URL"),
            ),
            // The detail names the key when a drain script knows it (a fence that is
            // not a counter).
            "WRONGTYPE" => (
                ErrorKind::WrongType,
                format!(
                    "a key under DRAIN_KEY_PREFIX holds a value of another type (WRONGTYPE {detail}): another program writes there; choose another DRAIN_KEY_PREFIX or delete the key"
                ),
            ),
            "CROSSSLOT" => (
                ErrorKind::Protocol,
                format!(
                    "one call touched keys of several hash slots (CROSSSLOT {detail}): a bug in drain's key layout, please report it"
                ),
            ),
            "NOSCRIPT" => (
                ErrorKind::Protocol,
                format!(
                    "{at} does not know a drain script even after EVAL (NOSCRIPT): is scripting restricted on this server?"
                ),
            ),
            _ => return generic_server_error(&code, &detail, &at),
        };
        return PortError::new(kind, message);
    }
    match err.kind() {
        RedisKind::Io => io_error(err, &at),
        RedisKind::AuthenticationFailed => PortError::new(
            ErrorKind::Auth,
            format!("{at} refused to authenticate: check the user and password in DRAIN_REDIS_URL ({detail})"),
        ),
        RedisKind::InvalidClientConfig => PortError::new(
            ErrorKind::Config,
            format!("the Redis configuration is invalid: {detail}; check DRAIN_REDIS_URL"),
        ),
        // Nothing was sent: there is no connection to send it on.
        RedisKind::ClusterConnectionNotFound => PortError::new(
            ErrorKind::Connection,
            format!(
                "no connection to the Redis Cluster node for this key ({at}): the cluster topology is changing; retry"
            ),
        )
        .never_sent(),
        // Asked during a failover, sentinels name no primary for a moment; a wrong
        // name answers the same, so the message says both.
        RedisKind::MasterNameNotFoundBySentinel | RedisKind::NoValidReplicasFoundBySentinel => PortError::new(
            ErrorKind::Unavailable,
            format!(
                "the sentinels at {at} name no primary now: a failover in progress (retry), or a primary name in \
                 DRAIN_REDIS_URL that they do not watch"
            ),
        )
        .never_sent(),
        RedisKind::Parse | RedisKind::UnexpectedReturnType | RedisKind::RESP3NotSupported => PortError::new(
            ErrorKind::Protocol,
            format!(
                "{at} answered something drain cannot use ({detail}): is it Redis 6.2 or later, or a compatible server?"
            ),
        ),
        _ => PortError::new(ErrorKind::Other, format!("{at}: {} {detail}", err.category())),
    }
}

/// The error code: redis-rs' known server kinds and extension codes alike.
fn code(err: &RedisError) -> Option<String> {
    if let Some(code) = err.code() {
        return Some(code.to_owned());
    }
    // Pipeline errors and `Extension` errors created elsewhere: the text starts with the code.
    let text = err.to_string();
    let first = text.split([' ', ':']).next().unwrap_or_default();
    (first.len() >= 3 && first.bytes().all(|b| b.is_ascii_uppercase())).then(|| first.to_owned())
}

fn detail(err: &RedisError) -> String {
    err.detail().map_or_else(|| err.to_string(), str::to_owned)
}

fn generic_server_error(code: &str, detail: &str, at: &str) -> PortError {
    let lower = detail.to_ascii_lowercase();
    if lower.contains("max number of clients") {
        return PortError::new(
            ErrorKind::Unavailable,
            format!("{at} has reached maxclients: lower the pool size of some clients, or raise maxclients"),
        );
    }
    if lower.contains("unknown command") && (lower.contains("eval") || lower.contains("script")) {
        return PortError::new(
            ErrorKind::Unsupported,
            format!("{at} does not allow Lua scripts ({detail}): drain needs EVAL/EVALSHA"),
        );
    }
    if lower.contains("user executing the script can't run") || lower.contains("no permissions to run") {
        // A right missing for a command a script runs (Redis names the script and its
        // line, not the command; `RedisStore::missing_rights` names it).
        return PortError::new(
            ErrorKind::Permission,
            format!(
                "the Redis user lacks a right a drain script needs ({detail}): grant the minimal ACL in docs/operations.md; `drain doctor` names the missing command"
            ),
        );
    }
    if lower.contains("error running script") || lower.contains("user_script") {
        return PortError::new(ErrorKind::Protocol, format!("a drain script failed on {at}: {detail}"));
    }
    PortError::new(ErrorKind::Other, format!("{at} answered {code} {detail}"))
}

fn io_error(err: &RedisError, at: &str) -> PortError {
    if err.is_timeout() {
        return PortError::new(
            ErrorKind::Timeout,
            format!(
                "{at} did not answer in time: is it overloaded, paused or unreachable? (the connect and response timeouts are configurable)"
            ),
        );
    }
    // A refused connection or a name that does not resolve: no request was sent.
    // (A broken connection or a TLS error may come after one was.)
    if err.is_connection_refusal() {
        return PortError::new(
            ErrorKind::Connection,
            format!("{at} refused the connection: is redis-server running and DRAIN_REDIS_URL right?"),
        )
        .never_sent();
    }
    if err.is_connection_dropped() {
        return PortError::new(
            ErrorKind::Connection,
            format!("the connection to {at} broke ({err}); it is re-established on the next call"),
        );
    }
    let text = err.to_string();
    let lower = text.to_ascii_lowercase();
    if lower.contains("dns") || lower.contains("lookup") || lower.contains("resolve") {
        return PortError::new(
            ErrorKind::Connection,
            format!("cannot resolve the host of {at} ({text}): check the host name in DRAIN_REDIS_URL"),
        )
        .never_sent();
    }
    if lower.contains("certificate") || lower.contains("tls") {
        return PortError::new(
            ErrorKind::Connection,
            format!("the TLS handshake with {at} failed ({text}): check rediss:// and the server's certificate"),
        );
    }
    PortError::new(ErrorKind::Connection, format!("I/O error talking to {at}: {text}"))
}

/// The error of an operation cut off by the store's own deadline.
pub(crate) fn deadline_error(endpoint: &str, deadline: std::time::Duration) -> PortError {
    PortError::new(
        ErrorKind::Timeout,
        format!(
            "Redis at {endpoint} did not answer within {deadline:?} (connect + response timeout): is it overloaded, paused or unreachable?"
        ),
    )
}

/// A key under the prefix holds something drain did not write (`WRONGTYPE` in
/// spirit: permanent until someone deletes it).
pub(crate) fn wrong_type(endpoint: &str, what: &str) -> PortError {
    PortError::new(
        ErrorKind::WrongType,
        format!(
            "Redis at {endpoint}: {what}; another program writes under DRAIN_KEY_PREFIX: choose another prefix or delete the key"
        ),
    )
}

/// The error of a reply that does not have the shape a drain script returns.
pub(crate) fn shape_error(op: &str, endpoint: &str, what: &str) -> PortError {
    PortError::new(
        ErrorKind::Protocol,
        format!(
            "{op}: Redis at {endpoint} answered {what}, not what the drain script returns: is another program using this key prefix?"
        ),
    )
}

#[cfg(test)]
mod tests {
    use drain_core::Persistence::{self, Permanent, Temporary};

    use std::io;

    use super::*;

    /// An I/O error of `kind` as redis-rs reports it.
    fn io(kind: io::ErrorKind) -> RedisError {
        RedisError::from(io::Error::new(kind, "simulated"))
    }

    /// A server error reply as it arrives on the wire.
    fn server(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => RedisError::from(e),
            Err(e) => e,
            Ok(other) => panic!("not an error reply: {other:?}"),
        }
    }

    #[track_caller]
    fn check(err: RedisError, kind: ErrorKind, persistence: Persistence, hint: &str) {
        let got = map_error(&err, "127.0.0.1:6380");
        assert_eq!((got.kind, got.persistence), (kind, persistence), "{err:?} -> {got:?}");
        assert!(got.message.contains(hint), "message {:?} should contain {hint:?}", got.message);
    }

    #[test]
    fn mapping() {
        use io::ErrorKind as Io;
        check(
            io(Io::ConnectionRefused),
            ErrorKind::Connection,
            Temporary,
            "Redis at 127.0.0.1:6380 refused the connection: is redis-server running and DRAIN_REDIS_URL right?",
        );
        check(io(Io::TimedOut), ErrorKind::Timeout, Temporary, "did not answer in time");
        check(io(Io::ConnectionReset), ErrorKind::Connection, Temporary, "re-established");
        check(io(Io::BrokenPipe), ErrorKind::Connection, Temporary, "broke");
        check(io(Io::UnexpectedEof), ErrorKind::Connection, Temporary, "broke");
        check(io(Io::Other), ErrorKind::Connection, Temporary, "I/O error");
        check(server("LOADING Redis is loading the dataset in memory"), ErrorKind::Unavailable, Temporary, "loading");
        check(server("BUSY Redis is busy running a script"), ErrorKind::Unavailable, Temporary, "SCRIPT KILL");
        check(
            server("TRYAGAIN Multiple keys request during rehashing"),
            ErrorKind::Unavailable,
            Temporary,
            "resharded",
        );
        check(server("CLUSTERDOWN The cluster is down"), ErrorKind::Unavailable, Temporary, "CLUSTER INFO");
        check(
            server("READONLY You can't write against a read only replica."),
            ErrorKind::Unavailable,
            Temporary,
            "primary",
        );
        check(server("MASTERDOWN Link with MASTER is down"), ErrorKind::Unavailable, Temporary, "failover");
        check(
            server("OOM command not allowed when used memory > 'maxmemory'"),
            ErrorKind::Unavailable,
            Temporary,
            "maxmemory",
        );
        check(server("MOVED 3999 127.0.0.1:6381"), ErrorKind::Redirected, Temporary, "DRAIN_REDIS_CLUSTER");
        check(server("ASK 3999 127.0.0.1:6381"), ErrorKind::Redirected, Temporary, "migrating");
        check(server("ERR max number of clients reached"), ErrorKind::Unavailable, Temporary, "maxclients");
        check(
            server("NOPERM User drain has no permissions to run the 'evalsha' command"),
            ErrorKind::Permission,
            Permanent,
            "'evalsha'",
        );
        check(
            server("WRONGPASS invalid username-password pair or user is disabled."),
            ErrorKind::Auth,
            Permanent,
            "DRAIN_REDIS_URL",
        );
        check(server("NOAUTH Authentication required."), ErrorKind::Auth, Permanent, "user:password");
        check(
            RedisError::from((RedisKind::AuthenticationFailed, "Password authentication failed")),
            ErrorKind::Auth,
            Permanent,
            "check the user and password",
        );
        check(
            server("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ErrorKind::WrongType,
            Permanent,
            "DRAIN_KEY_PREFIX",
        );
        check(server("CROSSSLOT Keys in request don't hash to the same slot"), ErrorKind::Protocol, Permanent, "bug");
        check(server("ERR unknown command 'EVALSHA'"), ErrorKind::Unsupported, Permanent, "Lua");
        check(server("ERR Error running script (call to f_1): oops"), ErrorKind::Protocol, Permanent, "script failed");
        check(
            server(
                "ERR The user executing the script can't run this command or subcommand script: 1f2e, on @user_script:4.",
            ),
            ErrorKind::Permission,
            Permanent,
            "drain doctor",
        );
        check(server("ERR something new"), ErrorKind::Other, Permanent, "something new");
        check(
            RedisError::from((RedisKind::InvalidClientConfig, "Redis URL did not parse")),
            ErrorKind::Config,
            Permanent,
            "DRAIN_REDIS_URL",
        );
        check(RedisError::from((RedisKind::UnexpectedReturnType, "bad")), ErrorKind::Protocol, Permanent, "cannot use");
        check(
            RedisError::from((RedisKind::ClusterConnectionNotFound, "none")),
            ErrorKind::Connection,
            Temporary,
            "topology",
        );
    }

    /// Only an error that comes before any request was sent says the call ran
    /// nothing; one that may come after it (a reset, a timeout) may have run.
    #[test]
    fn a_refused_connection_ran_nothing() {
        use io::ErrorKind as Io;
        assert!(!map_error(&io(Io::ConnectionRefused), "127.0.0.1:6380").may_have_run());
        let cluster = RedisError::from((RedisKind::ClusterConnectionNotFound, "no connection"));
        assert!(!map_error(&cluster, "127.0.0.1:6380").may_have_run());
        for kind in [Io::ConnectionReset, Io::BrokenPipe, Io::UnexpectedEof, Io::TimedOut, Io::Other] {
            assert!(map_error(&io(kind), "127.0.0.1:6380").may_have_run(), "{kind:?}");
        }
    }

    #[test]
    fn messages_never_carry_the_password() {
        // A URL with credentials inside a driver message is scrubbed by the store;
        // the mapping itself names only the endpoint it is given.
        let got = map_error(&io(io::ErrorKind::ConnectionRefused), "cache:6380");
        assert!(!got.message.contains('@'));
        assert!(got.message.contains("cache:6380"));
    }
}

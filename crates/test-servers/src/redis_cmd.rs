//! One command on a fresh connection, through redis-rs' blocking client: test setup
//! and probes need no pool and no runtime.

use std::io;
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};

/// One reply, as tests compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …` (an error reply is still a reply).
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…`; `None` for nil.
    Bulk(Option<Vec<u8>>),
    /// `*…`; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

impl From<Value> for Reply {
    fn from(v: Value) -> Self {
        match v {
            Value::Okay => Reply::Simple("OK".to_owned()),
            Value::SimpleString(s) => Reply::Simple(s),
            Value::ServerError(e) => Reply::Error(match e.details() {
                Some(details) => format!("{} {details}", e.code()),
                None => e.code().to_owned(),
            }),
            Value::Int(n) => Reply::Int(n),
            Value::BulkString(b) => Reply::Bulk(Some(b)),
            Value::Nil => Reply::Bulk(None),
            Value::Array(items) | Value::Set(items) => Reply::Array(Some(items.into_iter().map(Reply::from).collect())),
            other => Reply::Simple(format!("{other:?}")),
        }
    }
}

/// Connect to 127.0.0.1:`port`, authenticate with `password` if given, send `args`
/// as one command, read its reply. Nothing else is sent (no `CLIENT SETINFO`), so a
/// test that counts the server's commands counts only its own.
pub(crate) fn command(port: u16, password: Option<&str>, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let mut settings = RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(p) = password {
        settings = settings.set_password(p);
    }
    let info: ConnectionInfo = ("127.0.0.1", port).into_connection_info().map_err(io::Error::other)?;
    let client = redis::Client::open(info.set_redis_settings(settings)).map_err(io::Error::other)?;
    let mut conn = client.get_connection_with_timeout(timeout).map_err(io::Error::other)?;
    conn.set_read_timeout(Some(timeout)).map_err(io::Error::other)?;
    conn.set_write_timeout(Some(timeout)).map_err(io::Error::other)?;
    let Some((verb, rest)) = args.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    let mut cmd = redis::cmd(verb);
    cmd.arg(rest);
    redis::ConnectionLike::req_command(&mut conn, &cmd).map(Reply::from).map_err(io::Error::other)
}

//! Just enough RESP2 to send one command and read one reply over a fresh socket.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …` (an error reply is still a reply).
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…`; `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*…`; `None` for the null array.
    Array(Option<Vec<Reply>>),
}

/// Connect to 127.0.0.1:`port`, authenticate with `password` if given, send `args`
/// as one command, read its reply.
pub(crate) fn command(port: u16, password: Option<&str>, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut out = Vec::new();
    if let Some(p) = password {
        out.extend(encode(&["AUTH", p]));
    }
    out.extend(encode(args));
    stream.write_all(&out)?;
    let mut reader = BufReader::new(stream);
    if password.is_some()
        && let Reply::Error(e) = read_reply(&mut reader)?
    {
        return Ok(Reply::Error(e));
    }
    read_reply(&mut reader)
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_reply<R: BufRead>(r: &mut R) -> io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).ok_or_else(|| bad("empty line"))?;
    let int = || rest.parse::<i64>().map_err(|_| bad(line));
    match kind {
        "+" => Ok(Reply::Simple(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Int(int()?)),
        "$" => {
            let Ok(len) = usize::try_from(int()?) else { return Ok(Reply::Bulk(None)) };
            let mut buf = vec![0; len + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(len);
            Ok(Reply::Bulk(Some(buf)))
        }
        "*" => {
            let Ok(len) = usize::try_from(int()?) else { return Ok(Reply::Array(None)) };
            (0..len).map(|_| read_reply(r)).collect::<io::Result<Vec<_>>>().map(|v| Reply::Array(Some(v)))
        }
        _ => Err(bad(line)),
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("not RESP: {what:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(wire: &str, expected: Reply) {
        assert_eq!(read_reply(&mut wire.as_bytes()).expect("parse"), expected);
    }

    #[test]
    fn replies() {
        check("+PONG\r\n", Reply::Simple("PONG".into()));
        check("-ERR no\r\n", Reply::Error("ERR no".into()));
        check(":-3\r\n", Reply::Int(-3));
        check("$4\r\na\r\nb\r\n", Reply::Bulk(Some(b"a\r\nb".to_vec())));
        check("$-1\r\n", Reply::Bulk(None));
        check("*-1\r\n", Reply::Array(None));
        check("*2\r\n:1\r\n$1\r\nx\r\n", Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(Some(b"x".to_vec()))])));
        assert_eq!(encode(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
        assert!(read_reply(&mut "?\r\n".as_bytes()).is_err());
    }
}

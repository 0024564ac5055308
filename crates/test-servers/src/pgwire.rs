//! Just enough of PostgreSQL's frontend/backend protocol (3.0) to run test setup
//! SQL on a private server with trust authentication: a startup message, simple
//! queries, text rows. No dependency, no TLS, no password.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// One result row: each column as text, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// Connect as `user` to `database` on 127.0.0.1:`port`, run `sql` (one or more
/// statements, the simple query protocol) and return every row of every result.
///
/// # Errors
/// When the server cannot be reached, asks for a password, answers an error
/// (`SQLSTATE` and message in the error text), or answers garbage.
pub(crate) fn query(port: u16, user: &str, database: &str, sql: &str, timeout: Duration) -> io::Result<Vec<Row>> {
    let mut stream = TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    startup(&mut stream, user, database)?;
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    send(&mut stream, b'Q', &body)?;
    let rows = read_results(&mut stream);
    let _ = send(&mut stream, b'X', &[]);
    rows
}

fn startup(stream: &mut TcpStream, user: &str, database: &str) -> io::Result<()> {
    let mut body = 196_608_i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", database)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let len = i32::try_from(body.len() + 4).map_err(io::Error::other)?;
    let mut msg = len.to_be_bytes().to_vec();
    msg.extend_from_slice(&body);
    stream.write_all(&msg)?;
    loop {
        let (kind, body) = receive(stream)?;
        match kind {
            b'R' if body.get(..4) == Some(&[0, 0, 0, 0]) => {}
            b'R' => return Err(io::Error::other("the server asked for a password (test servers use trust auth)")),
            b'E' => return Err(db_error(&body)),
            b'Z' => return Ok(()),
            _ => {}
        }
    }
}

fn read_results(stream: &mut TcpStream) -> io::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut failed = None;
    loop {
        let (kind, body) = receive(stream)?;
        match kind {
            b'D' => rows.push(data_row(&body)?),
            b'E' => failed = Some(db_error(&body)),
            b'Z' => return failed.map_or(Ok(rows), Err),
            _ => {}
        }
    }
}

fn data_row(body: &[u8]) -> io::Result<Row> {
    let bad = || io::Error::other("malformed data row");
    let n = u16::from_be_bytes(body.get(..2).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    let mut at = 2;
    let mut row = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let len = i32::from_be_bytes(body.get(at..at + 4).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        at += 4;
        if len < 0 {
            row.push(None);
            continue;
        }
        let len = usize::try_from(len).map_err(|_| bad())?;
        let value = body.get(at..at + len).ok_or_else(bad)?;
        row.push(Some(String::from_utf8_lossy(value).into_owned()));
        at += len;
    }
    Ok(row)
}

/// `ERROR 42501: permission denied …` from an ErrorResponse body.
fn db_error(body: &[u8]) -> io::Error {
    let (mut code, mut message) = (String::new(), String::new());
    for field in body.split(|&b| b == 0) {
        match field.split_first() {
            Some((b'C', rest)) => code = String::from_utf8_lossy(rest).into_owned(),
            Some((b'M', rest)) => message = String::from_utf8_lossy(rest).into_owned(),
            _ => {}
        }
    }
    io::Error::other(format!("ERROR {code}: {message}"))
}

fn send(stream: &mut TcpStream, kind: u8, body: &[u8]) -> io::Result<()> {
    let len = i32::try_from(body.len() + 4).map_err(io::Error::other)?;
    let mut msg = vec![kind];
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(body);
    stream.write_all(&msg)
}

fn receive(stream: &mut TcpStream) -> io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    stream.read_exact(&mut head)?;
    let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let len = usize::try_from(len).ok().and_then(|l| l.checked_sub(4)).ok_or_else(|| io::Error::other("bad length"))?;
    if len > 64 << 20 {
        return Err(io::Error::other("message too long"));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok((head[0], body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_errors_parse() {
        let mut body = 2u16.to_be_bytes().to_vec();
        body.extend_from_slice(&1i32.to_be_bytes());
        body.push(b'7');
        body.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(data_row(&body).expect("row"), vec![Some("7".to_owned()), None]);
        assert!(data_row(&body[..5]).is_err(), "a cut row is an error, not a panic");
        let err = db_error(b"SERROR\0C42501\0Mpermission denied\0\0");
        assert_eq!(err.to_string(), "ERROR 42501: permission denied");
    }
}

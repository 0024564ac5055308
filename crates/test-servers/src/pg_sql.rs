//! Test setup SQL on a private server with trust authentication, through
//! tokio-postgres' simple query protocol on a runtime of its own.

use std::io;
use std::time::Duration;

use tokio_postgres::{NoTls, SimpleQueryMessage};

/// One result row: each column as text, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// Connect as `user` to `database` on 127.0.0.1:`port`, run `sql` (one or more
/// statements) and return every row of every result, within `timeout`.
///
/// The query runs on a thread of its own with a current-thread runtime, so that
/// async tests may call it as the blocking call it is.
///
/// # Errors
/// When the server cannot be reached, asks for a password, answers an error
/// (`ERROR <SQLSTATE>: <message>`), or does not answer within `timeout`.
pub(crate) fn query(port: u16, user: &str, database: &str, sql: &str, timeout: Duration) -> io::Result<Vec<Row>> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                match tokio::time::timeout(timeout, run(port, user, database, sql, timeout)).await {
                    Ok(rows) => rows,
                    Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {timeout:?}"))),
                }
            })
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the query thread panicked")))
    })
}

async fn run(port: u16, user: &str, database: &str, sql: &str, timeout: Duration) -> io::Result<Vec<Row>> {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(port).user(user).dbname(database).connect_timeout(timeout);
    let (client, connection) = config.connect(NoTls).await.map_err(pg_error)?;
    let driver = tokio::spawn(connection);
    let answer = client.simple_query(sql).await.map_err(pg_error);
    drop(client);
    let _ = driver.await;
    Ok(answer?
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect()),
            _ => None,
        })
        .collect())
}

/// `ERROR 42501: permission denied …` for a server's error, as tests match it.
fn pg_error(e: tokio_postgres::Error) -> io::Error {
    match e.as_db_error() {
        Some(db) => io::Error::other(format!("ERROR {}: {}", db.code().code(), db.message())),
        None => io::Error::other(e),
    }
}

//! A private PostgreSQL for the binary's tests, and the roles of docs/operations.md:
//! a schema owner that creates drain's schema and a role that may only run its
//! functions.

use std::process::Command;

pub use test_servers::PostgresServer;

use crate::drain;

/// A private PostgreSQL (a test fails saying what to install when it is not).
pub fn postgres() -> PostgresServer {
    PostgresServer::start()
}

/// The schema owner of docs/operations.md: may create schemas in database `postgres`.
pub const OWNER: &str = "drain_owner";
/// The role of docs/operations.md that only runs drain's functions.
pub const APP: &str = "drain_app";

/// `postgres://<user>:<password>@127.0.0.1:<port>/postgres`: the private server trusts
/// loopback, so the password is never checked, but it is in every URL drain reads
/// (and must never show).
pub fn url_with_password(pg: &PostgresServer, user: &str, password: &str) -> String {
    pg.url_for(user, "postgres").replacen(&format!("//{user}@"), &format!("//{user}:{password}@"), 1)
}

/// Run `sql` as the superuser; panics with the server's error.
pub fn sql(pg: &PostgresServer, sql: &str) -> Vec<Vec<Option<String>>> {
    pg.sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The one value of a one-row, one-column query.
pub fn value(pg: &PostgresServer, query: &str) -> Option<String> {
    let rows = sql(pg, query);
    assert_eq!(rows.len(), 1, "{query}: {rows:?}");
    rows[0][0].clone()
}

/// The roles of docs/operations.md, as it shows them: [`OWNER`] creates drain's
/// schema with adapter-postgres' `schema_sql` and grants [`APP`] the right to run its
/// functions (`grant_sql`) and nothing more.
pub fn least_privilege(pg: &PostgresServer) {
    sql(
        pg,
        &format!(
            "CREATE ROLE {OWNER} LOGIN; GRANT CREATE ON DATABASE postgres TO {OWNER}; \
             CREATE ROLE {APP} LOGIN;"
        ),
    );
    let create = adapter_postgres::schema_sql("drain").expect("schema sql");
    let grants = adapter_postgres::grant_sql("drain", APP).expect("grant sql");
    pg.sql_as(OWNER, "postgres", &format!("{create}\n{grants}")).expect("the owner creates the schema");
}

/// `drain <args>` with `DRAIN_STORE_URL=url`.
pub fn on(url: &str, args: &[&str]) -> Command {
    let mut c = drain();
    c.args(args).env("DRAIN_STORE_URL", url);
    c
}

//! drain's schema: the versioned SQL, its creation on first use, the grants of a
//! role that only runs drain.

use drain_core::{ErrorKind, PortError};
use tokio_postgres::Client;

use crate::config::PostgresConfig;
use crate::error::map_error;

/// The schema version this crate writes and reads: 2 adds the fence checks
/// (`src/schema_v2.sql`), 3 the owner backlogs of `drain owners`
/// (`src/schema_v3.sql`), 4 the drain stamps (`src/schema_v4.sql`), 5 fences never
/// below the server's clock (`src/schema_v5.sql`), 6 a stamped peek that reads the
/// claims and the stamps of one instant (`src/schema_v6.sql`). A store that finds an older
/// version upgrades it as it would create it (the SQL is idempotent).
pub const SCHEMA_VERSION: i32 = 6;

const SCHEMA_V1: &str = include_str!("schema_v1.sql");
const SCHEMA_V2: &str = include_str!("schema_v2.sql");
const SCHEMA_V3: &str = include_str!("schema_v3.sql");
const SCHEMA_V4: &str = include_str!("schema_v4.sql");
const SCHEMA_V5: &str = include_str!("schema_v5.sql");
const SCHEMA_V6: &str = include_str!("schema_v6.sql");

/// The SQL that creates drain's schema `schema` (tables, functions, version rows),
/// or upgrades an older version of it, idempotent: run it as a role that may create
/// the schema when drain's own role may not (`drain doctor` prints it), then
/// [`grant_sql`] (again after an upgrade: it grants the functions that exist).
///
/// # Errors
/// `Config` when `schema` is not a plain identifier (lower-case ASCII letters,
/// digits and `_`, not starting with a digit, 1 to 63 bytes).
pub fn schema_sql(schema: &str) -> Result<String, PortError> {
    check_schema(schema)?;
    Ok(format!("{SCHEMA_V1}\n{SCHEMA_V2}\n{SCHEMA_V3}\n{SCHEMA_V4}\n{SCHEMA_V5}\n{SCHEMA_V6}")
        .replace("@SCHEMA@", schema))
}

/// The SQL that lets `role` run drain on schema `schema` and nothing more: `USAGE`
/// on the schema and `EXECUTE` on drain's functions (they are `SECURITY DEFINER`:
/// the role needs no right on the tables).
///
/// # Errors
/// As [`schema_sql`]; `role` may be any text (it is quoted).
pub fn grant_sql(schema: &str, role: &str) -> Result<String, PortError> {
    check_schema(schema)?;
    let role = quote_ident(role);
    Ok(format!(
        "GRANT USAGE ON SCHEMA {schema} TO {role};\nGRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};\n"
    ))
}

pub(crate) fn check_schema(schema: &str) -> Result<(), PortError> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !schema.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(PortError::new(
            ErrorKind::Config,
            format!("schema name {schema:?}: use lower-case ASCII letters, digits and _, not starting with a digit"),
        ))
    }
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Check drain's schema on a fresh connection, creating it when it is missing and
/// the configuration allows.
pub(crate) async fn ensure(client: &Client, config: &PostgresConfig) -> Result<(), PortError> {
    let endpoint = config.endpoint();
    let schema = &config.schema;
    let version_sql = format!("SELECT {schema}.schema_version()");
    let state = match client.query_one(version_sql.as_str(), &[]).await {
        Ok(row) => match row.try_get::<_, Option<i32>>(0).ok().flatten() {
            // Older: upgrade it below, as a missing one is created.
            Some(v) if v < SCHEMA_VERSION => format!("at version {v} (this drain needs {SCHEMA_VERSION})"),
            version => return check_version(version, schema),
        },
        Err(e) => {
            let code = e.code().map(|c| c.code().to_owned()).unwrap_or_default();
            match code.as_str() {
                // No schema, or no version function in it: create it below.
                "3F000" | "42883" => "missing".to_owned(),
                "42501" => return Err(no_execute(client, schema, &endpoint).await),
                _ => return Err(map_error(&e, "checking drain's schema", &endpoint)),
            }
        }
    };
    if !config.create_schema {
        return Err(PortError::new(
            ErrorKind::Config,
            format!(
                "drain's schema {schema} is {state} in the database at {endpoint} and creating it is off: \
                 run the SQL of adapter_postgres::schema_sql (drain doctor prints it) as an owner, then grant_sql"
            ),
        ));
    }
    let sql = schema_sql(schema)?;
    // Two stores creating it at once: the second waits, then finds it.
    let script = format!(
        "BEGIN;\nSELECT pg_advisory_xact_lock(hashtext('drain schema ' || {lit}));\n{sql}\nCOMMIT;",
        lit = quote_literal(schema)
    );
    if let Err(e) = client.batch_execute(&script).await {
        let _ = client.batch_execute("ROLLBACK").await;
        if e.code().is_some_and(|c| c.code() == "42501") {
            let role = current_user(client).await;
            return Err(PortError::new(
                ErrorKind::Permission,
                format!(
                    "role {role} may not create or upgrade drain's schema {schema} ({state}) in the \
                     database at {endpoint} (it needs CREATE on the database, and to own the schema to \
                     upgrade it): have an owner run the SQL of \
                     adapter_postgres::schema_sql, then adapter_postgres::grant_sql for {role} (drain doctor prints both)"
                ),
            ));
        }
        return Err(map_error(&e, "creating drain's schema", &endpoint));
    }
    let row = client
        .query_one(version_sql.as_str(), &[])
        .await
        .map_err(|e| map_error(&e, "checking drain's schema", &endpoint))?;
    check_version(row.try_get::<_, Option<i32>>(0).ok().flatten(), schema)
}

fn check_version(version: Option<i32>, schema: &str) -> Result<(), PortError> {
    match version {
        Some(SCHEMA_VERSION) => Ok(()),
        Some(v) if v > SCHEMA_VERSION => Err(PortError::new(
            ErrorKind::Config,
            format!(
                "drain's schema {schema} is at version {v}, newer than this drain knows ({SCHEMA_VERSION}): upgrade drain"
            ),
        )),
        other => Err(PortError::new(
            ErrorKind::Config,
            format!(
                "drain's schema {schema} reports version {other:?}; expected {SCHEMA_VERSION}: rerun schema_sql as an owner"
            ),
        )),
    }
}

async fn no_execute(client: &Client, schema: &str, endpoint: &str) -> PortError {
    let role = current_user(client).await;
    PortError::new(
        ErrorKind::Permission,
        format!(
            "role {role} may not run drain's functions in schema {schema} at {endpoint} (it needs USAGE on the schema \
             and EXECUTE on its functions): have an owner run the SQL of adapter_postgres::grant_sql for {role} \
             (drain doctor prints it)"
        ),
    )
}

async fn current_user(client: &Client) -> String {
    match client.query_one("SELECT current_user::text", &[]).await {
        Ok(row) => row.try_get::<_, String>(0).unwrap_or_else(|_| "(unknown)".to_owned()),
        Err(_) => "(unknown)".to_owned(),
    }
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_quoted() {
        assert!(schema_sql("drain").expect("plain").contains("CREATE SCHEMA IF NOT EXISTS drain;"));
        assert!(!schema_sql("drain").expect("plain").contains("@SCHEMA@"));
        for bad in ["", "Drain", "1x", "a;drop", "a b", &"x".repeat(64)] {
            assert_eq!(schema_sql(bad).expect_err(bad).kind, ErrorKind::Config, "{bad}");
        }
        let grants = grant_sql("drain", "app\"x").expect("grant");
        assert!(grants.contains("TO \"app\"\"x\";"), "{grants}");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}

//! `drain doctor` on PostgreSQL: connectivity, round-trip time, drain's schema and
//! its version, and the role's right to run each function one subcommand calls.
//!
//! It only reads (adapter-postgres' `inspect`, the catalog's privilege functions):
//! a probe lease would leave its row behind for good (lease rows keep their fence),
//! and the schema is never created here. When the schema is missing and the role
//! may not create it, the SQL to run as an owner is printed, from adapter-postgres'
//! `schema_sql` and `grant_sql`.

use adapter_postgres::{Inspection, SCHEMA_VERSION, SchemaState, functions, grant_sql, schema_sql};
use drain_core::{ErrorKind, PortError, Switch};

use super::{Mode, Report, mode_name};
use crate::compose;
use crate::config::{Config, Secret};
use crate::out::outln;

/// What a failed connect means for the operator.
fn explain(e: &PortError) -> String {
    match e.kind {
        ErrorKind::Auth => format!("authentication failed (user/password in DRAIN_STORE_URL): {e}"),
        ErrorKind::Permission => format!("the role lacks a right drain needs (docs/operations.md, PostgreSQL): {e}"),
        _ => e.to_string(),
    }
}

/// The functions `mode` calls with these switches.
pub(crate) fn needed(mode: Mode, c: &Config) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    match mode {
        Mode::Run => {
            out.extend(functions::VERSION);
            if c.singleflight.computes() {
                out.extend(functions::LEASES);
            }
            if c.atomic_claim.computes() {
                out.extend(functions::CLAIMS);
            }
            // `drain run` deletes expired claims now and then.
            out.extend(functions::PURGE);
        }
        // `drain owners` and `drain run --owners N`: owner claims, the backlogs and,
        // claim-aware, their peeks and the release wake-up.
        Mode::Owners => {
            out.extend(functions::VERSION);
            out.extend(functions::LEASES);
            out.extend(functions::BACKLOGS);
            if c.claim_aware.computes() {
                out.extend(functions::OWNER_PEEKS);
            }
            if c.claim_aware == Switch::On && c.release_wake != Switch::Off {
                out.extend(functions::WAKE);
            }
        }
        Mode::Leases => out.extend(functions::LISTING),
    }
    out
}

pub(super) async fn checks(r: &mut Report, mode: Mode, c: &Config, url: &Secret) {
    let config = compose::postgres_config(c, url);
    let found = match adapter_postgres::inspect(&config).await {
        Ok(i) => i,
        Err(e) => {
            r.fail("postgres connect", explain(&e));
            return;
        }
    };
    r.ok(
        "postgres connect",
        format!(
            "{} as role {} (database {}, PostgreSQL {})",
            config.endpoint(),
            found.role,
            found.database,
            found.server_version
        ),
    );
    r.ok("postgres rtt", format!("median {:.2} ms over 5 round trips", found.rtt.as_secs_f64() * 1000.0));
    super::server_clock(r, "postgres", u64::try_from(found.server_micros).unwrap_or(0));
    let schema = config.schema.as_str();
    match &found.schema {
        SchemaState::Version(v) if *v == SCHEMA_VERSION => r.ok("schema", format!("{schema} at version {v}")),
        SchemaState::Version(v) => {
            r.fail(
                "schema",
                format!("{schema} at version {v}; this drain reads version {SCHEMA_VERSION}: upgrade drain"),
            );
        }
        // The rights check below fails and says what to grant.
        SchemaState::Unreadable(why) => {
            r.warn("schema", format!("{schema} is there; its version cannot be read: {why}"))
        }
        SchemaState::Missing if found.may_create && mode != Mode::Leases => {
            r.ok(
                "schema",
                format!("{schema} is missing; role {} may create it: `drain run` does on first use", found.role),
            );
            return;
        }
        SchemaState::Missing => {
            missing_schema(r, mode, schema, &found);
            return;
        }
    }
    let lacking = found.missing(schema, &needed(mode, c));
    if lacking.is_empty() {
        r.ok("rights", format!("role {} may run every function `drain {}` calls", found.role, mode_name(mode)));
    } else {
        r.fail(
            "rights",
            format!(
                "role {} lacks {}, which `drain {}` needs: have an owner run the grants below (docs/operations.md)",
                found.role,
                lacking.join(", "),
                mode_name(mode)
            ),
        );
        if let Ok(sql) = grant_sql(schema, &found.role) {
            print_sql(&sql);
        }
    }
}

/// The schema is missing and `drain run` cannot create it (or `drain leases` has
/// nothing to list): say so, and print the SQL that creates it and the grants.
fn missing_schema(r: &mut Report, mode: Mode, schema: &str, found: &Inspection) {
    let why = if found.may_create {
        format!("`drain {}` never creates it (`drain run` does, on first use)", mode_name(mode))
    } else {
        format!("role {} may not create it (CREATE on database {})", found.role, found.database)
    };
    r.fail("schema", format!("drain's schema {schema} is missing; {why}: as an owner, run the SQL below"));
    if let (Ok(create), Ok(grants)) = (schema_sql(schema), grant_sql(schema, &found.role)) {
        print_sql(&create);
        print_sql(&grants);
    }
}

/// SQL to copy, as it is (one statement may span lines).
fn print_sql(sql: &str) {
    for line in sql.lines() {
        outln!("{line}");
    }
}

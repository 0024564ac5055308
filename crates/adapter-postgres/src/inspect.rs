//! What an operator's tools read, on a connection of their own that never creates
//! or changes anything: [`inspect`] (the server, the role and its rights on drain's
//! schema, for `drain doctor`) and [`list`] (the leases and claims of a prefix, for
//! `drain leases`).

use std::time::{Duration, Instant};

use drain_core::ports::MessageId;
use drain_core::{ErrorKind, PortError};
use tokio_postgres::Client;

use crate::config::PostgresConfig;
use crate::error::{map_error, timeout};
use crate::schema::check_schema;
use crate::store::remaining;

/// drain's functions by what calls them, to check a role's rights against
/// ([`Inspection::missing`]).
pub mod functions {
    /// Every store connection checks the schema version with it.
    pub const VERSION: &[&str] = &["schema_version"];
    /// The single-flight lease of `drain run` (and owner claims).
    pub const LEASES: &[&str] = &["acquire", "renew", "release", "peek"];
    /// The per-message claim of `drain run`.
    pub const CLAIMS: &[&str] = &["claim_batch", "settle_batch"];
    /// Claim-aware admission's peeks (`drain owners`, `drain run --owners`).
    pub const OWNER_PEEKS: &[&str] = &["peek_owners"];
    /// The release wake-up.
    pub const WAKE: &[&str] = &["wake_channel", "peek_and_wait", "acquire_or_wait", "release_and_wake"];
    /// `drain leases` ([`list`](crate::list)).
    pub const LISTING: &[&str] = &["list_leases", "list_claims"];
    /// Purging expired rows.
    pub const PURGE: &[&str] = &["purge_expired"];
    /// Fences checked where the writes land (schema version 2): the lease check
    /// of `PostgresStore::fenced` and the marks of `FenceMarks`.
    pub const FENCES: &[&str] = &["current_fence", "fence_is_current", "admit_fence"];
    /// The owner backlogs of `drain owners` (schema version 3).
    pub const BACKLOGS: &[&str] = &["push_backlog", "take_batch", "record_batch", "backlog_pending"];
    /// Drain stamps (schema version 4): skipping served requests.
    pub const MARKS: &[&str] = &["peek_marked", "acquire_marked", "release_drained"];
}

/// drain's schema as [`inspect`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaState {
    /// No schema of that name in the database.
    Missing,
    /// The schema answers this version.
    Version(i32),
    /// The schema is there, but its version could not be read (the reason).
    Unreadable(String),
}

/// The server, the role, and the role's rights on drain's schema.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// `server_version` as the server reports it.
    pub server_version: String,
    /// The role connected (`current_user`).
    pub role: String,
    /// The database connected to.
    pub database: String,
    /// The median of five `SELECT 1` round trips.
    pub rtt: Duration,
    /// The server's clock, microseconds since the Unix epoch, when it was asked (a
    /// fence is never below it: compare it with yours).
    pub server_micros: i64,
    /// Whether the role may create schemas in the database (`CREATE`), which
    /// creating drain's schema on first use needs.
    pub may_create: bool,
    /// The schema's state.
    pub schema: SchemaState,
    /// Whether the role may use the schema (`USAGE`).
    pub usage: bool,
    /// drain's functions found in the schema, each with whether the role may run it.
    pub executable: Vec<(String, bool)>,
}

impl Inspection {
    /// What the role lacks to call every function of `needed`: `USAGE on schema S`
    /// and `EXECUTE on S.f()` for each function missing or not executable.
    #[must_use]
    pub fn missing(&self, schema: &str, needed: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        if !self.usage {
            out.push(format!("USAGE on schema {schema}"));
        }
        for f in needed {
            let ok = self.executable.iter().any(|(name, exec)| name == f && *exec);
            if !ok {
                out.push(format!("EXECUTE on {schema}.{f}()"));
            }
        }
        out
    }
}

/// Connect as `config` says and read, without creating or changing anything: the
/// server version, the role, the round-trip time, whether drain's schema is there
/// and at which version, and the role's rights on it.
///
/// # Errors
/// As [`PostgresStore::connect`](crate::PostgresStore::connect) when the server
/// cannot be reached or refuses the role; `Config` for a bad schema name.
pub async fn inspect(config: &PostgresConfig) -> Result<Inspection, PortError> {
    check_schema(&config.schema)?;
    let endpoint = config.endpoint();
    let client = connect(config, &endpoint).await?;
    let op = "inspect";
    let q = |sql: &'static str| bounded(config, op, &endpoint, client.query(sql, &[]));
    let mut rtts = Vec::with_capacity(5);
    for _ in 0..5 {
        let start = Instant::now();
        q("SELECT 1").await?;
        rtts.push(start.elapsed());
    }
    rtts.sort();
    let schema = config.schema.as_str();
    let rows = bounded(
        config,
        op,
        &endpoint,
        client.query(
            "SELECT current_user::text, current_database()::text, current_setting('server_version'), \
                    has_database_privilege(current_database(), 'CREATE'), n.oid IS NOT NULL, \
                    coalesce(has_schema_privilege(n.oid, 'USAGE'), false), \
                    floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
             FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1",
            &[&schema],
        ),
    )
    .await?;
    let row = rows.first().ok_or_else(|| crate::error::protocol(op, &endpoint, "no row"))?;
    let col = |i: usize| crate::error::protocol(op, &endpoint, &format!("column {i} of an unexpected type"));
    let role: String = row.try_get(0).map_err(|_| col(0))?;
    let database: String = row.try_get(1).map_err(|_| col(1))?;
    let server_version: String = row.try_get(2).map_err(|_| col(2))?;
    let may_create: bool = row.try_get(3).map_err(|_| col(3))?;
    let exists: bool = row.try_get(4).map_err(|_| col(4))?;
    let usage: bool = row.try_get(5).map_err(|_| col(5))?;
    let server_micros: i64 = row.try_get(6).map_err(|_| col(6))?;
    let rows = bounded(
        config,
        op,
        &endpoint,
        client.query(
            "SELECT p.proname::text, bool_and(has_function_privilege(p.oid, 'EXECUTE')) \
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = $1 GROUP BY p.proname ORDER BY p.proname",
            &[&schema],
        ),
    )
    .await?;
    let executable = rows
        .iter()
        .map(|r| Ok((r.try_get::<_, String>(0).map_err(|_| col(0))?, r.try_get::<_, bool>(1).map_err(|_| col(1))?)))
        .collect::<Result<Vec<_>, PortError>>()?;
    let version_runs = executable.iter().any(|(f, exec)| f == "schema_version" && *exec);
    let schema_state = if !exists {
        SchemaState::Missing
    } else if !usage || !version_runs {
        SchemaState::Unreadable(format!("role {role} may not run {schema}.schema_version()"))
    } else {
        let sql = format!("SELECT {schema}.schema_version()");
        match bounded(config, op, &endpoint, client.query(sql.as_str(), &[])).await {
            Ok(rows) => match rows.first().and_then(|r| r.try_get::<_, Option<i32>>(0).ok().flatten()) {
                Some(v) => SchemaState::Version(v),
                None => SchemaState::Unreadable("schema_version() answered no version".to_owned()),
            },
            Err(e) => SchemaState::Unreadable(e.message),
        }
    };
    Ok(Inspection {
        server_version,
        role,
        database,
        rtt: rtts[2],
        server_micros,
        may_create,
        schema: schema_state,
        usage,
        executable,
    })
}

/// A lease row of the prefix (free ones keep their fence).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLease {
    /// `queue` (a single-flight lease) or `owner` (an owner claim).
    pub kind: String,
    /// The queue or owner.
    pub name: String,
    /// The holder, `None` when free.
    pub holder: Option<String>,
    /// Time left, `None` when free.
    pub remaining: Option<Duration>,
    /// The last fence handed out.
    pub fence: u64,
}

/// A live pending claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingClaim {
    /// The message.
    pub id: MessageId,
    /// Who submits it.
    pub holder: String,
    /// Time left before a redelivery may take over.
    pub remaining: Duration,
}

/// The live claims of one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueClaims {
    /// The queue.
    pub queue: String,
    /// Its pending claims.
    pub pending: Vec<PendingClaim>,
    /// Its `done` claims still within the dedup window.
    pub done: u64,
}

/// Everything [`list`] found under the prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// Lease rows, by kind and name.
    pub leases: Vec<ListedLease>,
    /// Live claims, by queue.
    pub claims: Vec<QueueClaims>,
}

/// The leases and live claims of `config`'s prefix, in two calls (`list_leases()`,
/// `list_claims()`) on a connection of its own; the schema is never created.
///
/// # Errors
/// `Config` when drain's schema is missing, `Permission` when the role may not run
/// the two functions, otherwise as every operation.
pub async fn list(config: &PostgresConfig) -> Result<Listing, PortError> {
    check_schema(&config.schema)?;
    let endpoint = config.endpoint();
    let client = connect(config, &endpoint).await?;
    let s = &config.schema;
    let prefix = config.key_prefix.as_str();
    let bad = |op: &str, what: &str| crate::error::protocol(op, &endpoint, what);
    let op = "list_leases";
    let sql = format!("SELECT kind, name, holder, remaining_us, fence FROM {s}.list_leases($1)");
    let rows = bounded(config, op, &endpoint, client.query(sql.as_str(), &[&prefix])).await?;
    let mut listing = Listing::default();
    for row in &rows {
        let fence: i64 = row.try_get(4).map_err(|e| bad(op, &e.to_string()))?;
        let us: Option<i64> = row.try_get(3).map_err(|e| bad(op, &e.to_string()))?;
        listing.leases.push(ListedLease {
            kind: row.try_get(0).map_err(|e| bad(op, &e.to_string()))?,
            name: row.try_get(1).map_err(|e| bad(op, &e.to_string()))?,
            holder: row.try_get(2).map_err(|e| bad(op, &e.to_string()))?,
            remaining: us.map(remaining),
            fence: u64::try_from(fence).map_err(|_| bad(op, "a negative fence"))?,
        });
    }
    let op = "list_claims";
    let sql = format!("SELECT queue, id_type, id, holder, remaining_us, done FROM {s}.list_claims($1)");
    let rows = bounded(config, op, &endpoint, client.query(sql.as_str(), &[&prefix])).await?;
    for row in &rows {
        let queue: String = row.try_get(0).map_err(|e| bad(op, &e.to_string()))?;
        if listing.claims.last().is_none_or(|q| q.queue != queue) {
            listing.claims.push(QueueClaims { queue: queue.clone(), ..QueueClaims::default() });
        }
        let Some(entry) = listing.claims.last_mut() else { continue };
        let id_type: Option<String> = row.try_get(1).map_err(|e| bad(op, &e.to_string()))?;
        match id_type {
            None => {
                let done: i64 = row.try_get(5).map_err(|e| bad(op, &e.to_string()))?;
                entry.done = u64::try_from(done).unwrap_or(0);
            }
            Some(t) => {
                let bytes: Vec<u8> = row.try_get(2).map_err(|e| bad(op, &e.to_string()))?;
                let holder: Option<String> = row.try_get(3).map_err(|e| bad(op, &e.to_string()))?;
                let us: i64 = row.try_get(4).map_err(|e| bad(op, &e.to_string()))?;
                entry.pending.push(PendingClaim {
                    id: message_id(&t, bytes),
                    holder: holder.unwrap_or_default(),
                    remaining: remaining(us),
                });
            }
        }
    }
    Ok(listing)
}

/// A message id from its stored type and bytes (the claim store's key).
fn message_id(id_type: &str, bytes: Vec<u8>) -> MessageId {
    match id_type {
        "string" => MessageId::String(String::from_utf8_lossy(&bytes).into_owned()),
        "ulong" => match <[u8; 8]>::try_from(bytes.as_slice()) {
            Ok(b) => MessageId::Ulong(u64::from_be_bytes(b)),
            Err(_) => MessageId::Binary(bytes),
        },
        "uuid" => match <[u8; 16]>::try_from(bytes.as_slice()) {
            Ok(b) => MessageId::Uuid(b),
            Err(_) => MessageId::Binary(bytes),
        },
        _ => MessageId::Binary(bytes),
    }
}

async fn connect(config: &PostgresConfig, endpoint: &str) -> Result<Client, PortError> {
    let (client, _task) = tokio::time::timeout(config.connect_timeout, crate::conn::connect_client(config))
        .await
        .map_err(|_| timeout("connect", endpoint, config.connect_timeout))??;
    Ok(client)
}

/// `fut` within the response timeout, its error mapped.
async fn bounded<T>(
    config: &PostgresConfig,
    op: &str,
    endpoint: &str,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PortError> {
    match tokio::time::timeout(config.response_timeout, fut).await {
        Ok(r) => r.map_err(|e| map_error(&e, op, endpoint)),
        Err(_) => Err(timeout(op, endpoint, config.response_timeout)),
    }
}

/// Whether `url` parses as a PostgreSQL connection URL (or libpq's `key=value`
/// form); the error names what is wrong, never the password.
///
/// # Errors
/// `Config` with the driver's reason.
pub fn check_url(url: &str) -> Result<(), PortError> {
    url.parse::<tokio_postgres::Config>()
        .map(|_| ())
        .map_err(|e| PortError::new(ErrorKind::Config, format!("not a PostgreSQL URL: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_back_as_their_type() {
        assert_eq!(message_id("string", b"m-1".to_vec()), MessageId::from("m-1"));
        assert_eq!(message_id("ulong", 7u64.to_be_bytes().to_vec()), MessageId::Ulong(7));
        assert_eq!(message_id("uuid", vec![1; 16]), MessageId::Uuid([1; 16]));
        assert_eq!(message_id("ulong", vec![1, 2]), MessageId::Binary(vec![1, 2]), "a short ulong stays bytes");
    }

    #[test]
    fn urls_are_checked_without_showing_the_password() {
        assert!(check_url("postgres://drain:s3cret@db:5432/app").is_ok());
        let e = check_url("postgres://drain:s3cret@db:notaport/app").expect_err("bad port");
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(!e.message.contains("s3cret"), "{e}");
    }

    #[test]
    fn missing_rights_name_the_schema_and_function() {
        let i = Inspection {
            server_version: "16".into(),
            role: "app".into(),
            database: "db".into(),
            rtt: Duration::ZERO,
            server_micros: 0,
            may_create: false,
            schema: SchemaState::Version(1),
            usage: true,
            executable: vec![("acquire".into(), true), ("renew".into(), false)],
        };
        assert_eq!(
            i.missing("drain", &["acquire", "renew", "peek"]),
            ["EXECUTE on drain.renew()", "EXECUTE on drain.peek()"]
        );
    }
}

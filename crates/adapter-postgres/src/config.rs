//! [`PostgresConfig`]: where PostgreSQL is, which schema and prefix drain uses, and
//! how patient to be.

use std::fmt;
use std::time::Duration;

use drain_runtime::redact::redact;

/// How to reach PostgreSQL. Build it with [`PostgresConfig::new`] and adjust it with
/// the builder methods or the public fields.
///
/// `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresConfig {
    /// `postgres://[user[:password]@]host[:port][/database][?param=value…]` (or
    /// `postgresql://…`, or libpq's `key=value` form). TLS is not supported yet: a
    /// URL that requires it fails to connect with a `Config` error.
    pub url: String,
    /// The schema that holds drain's tables and functions (an identifier: lower-case
    /// ASCII letters, digits and `_`, not starting with a digit, at most 63 bytes).
    pub schema: String,
    /// Every lease, claim and waiter row carries this prefix: tenants sharing one
    /// schema keep apart by prefix, as they do by key prefix on Redis.
    pub key_prefix: String,
    /// Connections the operations are spread over (round robin; each pipelines the
    /// calls given to it). At least 1.
    pub connections: usize,
    /// How long one connection attempt (TCP, startup, authentication, preparing
    /// drain's statements) may take.
    pub connect_timeout: Duration,
    /// How long one operation (one function call) may take once connected.
    pub response_timeout: Duration,
    /// Create the schema on first use when it is missing (needs the right to create
    /// it; otherwise connecting fails with a `Permission` error naming the right,
    /// and [`schema_sql`](crate::schema_sql) is the SQL to run by hand).
    pub create_schema: bool,
}

/// Default [`PostgresConfig::schema`].
pub const DEFAULT_SCHEMA: &str = "drain";
/// Default [`PostgresConfig::key_prefix`].
pub const DEFAULT_KEY_PREFIX: &str = "drain";
/// Default [`PostgresConfig::connections`].
pub const DEFAULT_CONNECTIONS: usize = 4;
/// Default [`PostgresConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default [`PostgresConfig::response_timeout`].
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

impl PostgresConfig {
    /// A configuration for `url` with the defaults: schema [`DEFAULT_SCHEMA`], key
    /// prefix [`DEFAULT_KEY_PREFIX`], [`DEFAULT_CONNECTIONS`] connections,
    /// [`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_RESPONSE_TIMEOUT`], the schema created
    /// on first use.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            connections: DEFAULT_CONNECTIONS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            create_schema: true,
        }
    }

    /// The same configuration in another schema.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The same configuration under another key prefix.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The same configuration over `n` connections (at least 1).
    #[must_use]
    pub fn connections(mut self, n: usize) -> Self {
        self.connections = n.max(1);
        self
    }

    /// The same configuration with these timeouts.
    #[must_use]
    pub fn timeouts(mut self, connect: Duration, response: Duration) -> Self {
        self.connect_timeout = connect;
        self.response_timeout = response;
        self
    }

    /// The same configuration, creating the schema on first use or not.
    #[must_use]
    pub fn create_schema(mut self, on: bool) -> Self {
        self.create_schema = on;
        self
    }

    /// The longest one operation can take before it answers `Timeout`, a
    /// reconnect included: connect timeout + response timeout.
    #[must_use]
    pub fn operation_deadline(&self) -> Duration {
        self.connect_timeout + self.response_timeout
    }

    /// `host:port` of the server(s), for messages (never a secret).
    #[must_use]
    pub fn endpoint(&self) -> String {
        match self.url.parse::<tokio_postgres::Config>() {
            Ok(cfg) => {
                let ports = cfg.get_ports();
                cfg.get_hosts()
                    .iter()
                    .enumerate()
                    .map(|(i, host)| {
                        let host = match host {
                            tokio_postgres::config::Host::Tcp(h) => h.clone(),
                            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
                        };
                        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                        format!("{host}:{port}")
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            }
            Err(_) => redact(&self.url),
        }
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &redact(&self.url))
            .field("schema", &self.schema)
            .field("key_prefix", &self.key_prefix)
            .field("connections", &self.connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("create_schema", &self.create_schema)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("postgres://drain:s3cret@db:5432/app"), "postgres://drain:***@db:5432/app");
        // User information without a `:` may be a password: hidden whole.
        assert_eq!(redact("postgres://drain@db/app"), "postgres://***@db/app");
        assert_eq!(redact("postgresql://db/app?user=a&password=s3cret"), "postgresql://db/app?user=a&password=***");
        // libpq's form: a pair's value runs to the next `;` or `&`, over-redacting.
        assert_eq!(redact("host=db password=s3cret user=a"), "host=db password=***");
        assert_eq!(redact("postgres://u:p@ss@db/x"), "postgres://u:***@db/x");
        let cfg = PostgresConfig::new("postgres://drain:s3cret@db:6543/app");
        assert!(!format!("{cfg:?}").contains("s3cret"));
        assert_eq!(cfg.endpoint(), "db:6543");
        assert_eq!(PostgresConfig::new("postgres://db/app").endpoint(), "db:5432");
        assert_eq!(cfg.connections(0).connections, 1);
    }
}

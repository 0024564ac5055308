//! [`RedisConfig`]: where Redis is and how patient to be with it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use drain_runtime::redact::redact;

/// How to reach Redis. Build it with [`RedisConfig::new`] and adjust the public
/// fields; the app fills it from `DRAIN_REDIS_URL` and `DRAIN_REDIS_CLUSTER`.
///
/// `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// `redis://[user[:password]@]host[:port][/db]`, or `rediss://…` for TLS.
    /// In cluster mode, one or more seed nodes separated by commas
    /// (`redis://a:7000,redis://b:7001`); the rest of the cluster is discovered.
    pub url: String,
    /// Use the Redis Cluster protocol (`DRAIN_REDIS_CLUSTER=on`).
    pub cluster: bool,
    /// Every key the store reads or writes starts with `<key_prefix>:`
    /// (`DRAIN_KEY_PREFIX`): tenants sharing one Redis keep apart by prefix.
    pub key_prefix: String,
    /// How long one connection attempt (TCP, TLS, `HELLO`/`AUTH`) may take.
    pub connect_timeout: Duration,
    /// How long one round trip may take once connected.
    pub response_timeout: Duration,
    /// For `rediss://`: a PEM file of the CA certificate(s) to trust *instead of* the
    /// system roots (a private CA, a test certificate). `None`: the system roots.
    /// Read at connect; an unreadable file or one without a PEM certificate is a
    /// `Config` error.
    pub tls_ca_file: Option<PathBuf>,
}

/// Default [`RedisConfig::key_prefix`].
pub const DEFAULT_KEY_PREFIX: &str = "drain";
/// Default [`RedisConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default [`RedisConfig::response_timeout`].
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

impl RedisConfig {
    /// A standalone configuration for `url` with the defaults: key prefix
    /// [`DEFAULT_KEY_PREFIX`], [`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_RESPONSE_TIMEOUT`].
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            cluster: false,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            tls_ca_file: None,
        }
    }

    /// The same configuration trusting the CA certificate(s) in the PEM file at
    /// `path` for `rediss://` instead of the system roots.
    #[must_use]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// The same configuration under another key prefix.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The same configuration in cluster mode.
    #[must_use]
    pub fn cluster(mut self, on: bool) -> Self {
        self.cluster = on;
        self
    }

    /// The same configuration with other timeouts.
    #[must_use]
    pub fn timeouts(mut self, connect: Duration, response: Duration) -> Self {
        self.connect_timeout = connect;
        self.response_timeout = response;
        self
    }

    /// The longest one operation may take: a reconnect (bounded by the connect
    /// timeout, no retries inside a call) plus a round trip (bounded by the response
    /// timeout). redis-rs enforces both; then the call returns a temporary
    /// `Timeout` or `Connection` error. In Cluster mode it is also the overall
    /// bound of one request including redirects and retries.
    #[must_use]
    pub fn operation_deadline(&self) -> Duration {
        self.connect_timeout + self.response_timeout
    }

    /// The seed URLs (one unless cluster mode lists several), trimmed.
    pub(crate) fn urls(&self) -> Vec<&str> {
        seeds(&self.url).into_iter().map(str::trim).filter(|u| !u.is_empty()).collect()
    }

    /// `host:port` of every seed, without scheme, credentials or database: what
    /// error messages name.
    #[must_use]
    pub fn endpoint(&self) -> String {
        self.urls().iter().map(|u| host_port(u)).collect::<Vec<_>>().join(",")
    }

    /// Whether any seed uses TLS (`rediss://`).
    #[must_use]
    pub fn uses_tls(&self) -> bool {
        self.urls().iter().any(|u| u.starts_with("rediss://"))
    }

    /// The password of the first seed, if the URL carries one (to scrub messages).
    pub(crate) fn password(&self) -> Option<&str> {
        let url = self.urls().into_iter().next()?;
        let (_, rest) = url.split_once("://")?;
        let userinfo = rest.rsplit_once('@')?.0;
        userinfo.split_once(':').map(|(_, p)| p).filter(|p| !p.is_empty())
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("cluster", &self.cluster)
            .field("key_prefix", &self.key_prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

/// `url` cut at the commas that start another `redis://` or `rediss://` URL (a
/// Cluster seed list); a comma anywhere else, e.g. in a password, stays in its URL.
fn seeds(url: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in url.match_indices(',') {
        let next = url[i + 1..].trim_start();
        if next.starts_with("redis://") || next.starts_with("rediss://") {
            out.push(&url[start..i]);
            start = i + 1;
        }
    }
    out.push(&url[start..]);
    out
}

/// What follows `scheme://` split at its last `@` into user information and the
/// rest. Everything before the last `@` counts as user information, even a `/`,
/// `?`, `#` or `,` (a password that was not percent-encoded), as in drain-runtime's
/// redaction, so an endpoint never names part of a password.
fn userinfo(rest: &str) -> (Option<&str>, &str) {
    match rest.rsplit_once('@') {
        Some((userinfo, after)) => (Some(userinfo), after),
        None => (None, rest),
    }
}

/// The authority part of what follows the user information: up to the first `/`,
/// `?` or `#`.
fn authority(rest: &str) -> &str {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    &rest[..end]
}

/// `host:port` of one URL (default port 6379), for messages.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = authority(userinfo(rest).1);
    if host.is_empty() {
        return "127.0.0.1:6379".to_owned();
    }
    // `[::1]:6379`, `[::1]`, `host:6379`, `host`.
    let has_port = match host.rfind(']') {
        Some(close) => host[close..].contains(':'),
        None => host.contains(':'),
    };
    if has_port { host.to_owned() } else { format!("{host}:6379") }
}

/// Scrub `text` for display: credentials in any URL it contains (drain-runtime's one
/// redaction), and the literal `password` when it is long enough to replace safely
/// (a short one would mask ordinary words).
pub(crate) fn scrub(text: &str, password: Option<&str>) -> String {
    let secrets: Vec<&str> = password.filter(|p| p.len() >= 4).into_iter().collect();
    drain_runtime::redact::scrub(text, &secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(url: &str, redacted: &str, endpoint: &str) {
        assert_eq!(redact(url), redacted, "redact {url}");
        assert_eq!(RedisConfig::new(url).endpoint(), endpoint, "endpoint of {url}");
        let debug = format!("{:?}", RedisConfig::new(url));
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn redaction_and_endpoints() {
        check("redis://127.0.0.1:6380", "redis://127.0.0.1:6380", "127.0.0.1:6380");
        check("redis://127.0.0.1", "redis://127.0.0.1", "127.0.0.1:6379");
        check("redis://drain:hunter2@cache:6380/2", "redis://drain:***@cache:6380/2", "cache:6380");
        check("rediss://:hunter2@cache.example", "rediss://:***@cache.example", "cache.example:6379");
        check("redis://hunter2@cache", "redis://***@cache", "cache:6379");
        check("redis://u:p%40ss:hunter2@h:1", "redis://u:***@h:1", "h:1");
        check("redis://h:1/0?protocol=resp3&password=hunter2", "redis://h:1/0?protocol=resp3&password=***", "h:1");
        check(
            "redis://u:hunter2@a:7000, redis://u:hunter2@b:7001",
            "redis://u:***@a:7000, redis://u:***@b:7001",
            "a:7000,b:7001",
        );
        check("redis://[::1]:6390", "redis://[::1]:6390", "[::1]:6390");
        check("redis://[::1]", "redis://[::1]", "[::1]:6379");
        check("not a url", "not a url", "not a url:6379");
        // Passwords that were not percent-encoded (found by `fuzz/` target redis_url).
        check("redis://:#@", "redis://:***@", "127.0.0.1:6379");
        check("redis://u:hun/ter2@h:1/0", "redis://u:***@h:1/0", "h:1");
        check("redis://u:hun?ter2@h:1", "redis://u:***@h:1", "h:1");
        check("rediss://u:hun#ter2@h", "rediss://u:***@h", "h:6379");
        check("redis://u:hun,ter2@h:1", "redis://u:***@h:1", "h:1");
        // Ambiguous: a seed list whose first seed is `u:a`; a password holding
        // `,redis://` must be percent-encoded.
        check("redis://u:a,redis://b@h:1", "redis://u:a,redis://***@h:1", "u:a,h:1");
        check(
            "redis://u:hun,ter2@a:7000,redis://u:hun,ter2@b:7001",
            "redis://u:***@a:7000,redis://u:***@b:7001",
            "a:7000,b:7001",
        );
        check("redis://h:1/0?user=a@b", "redis://h:***@b", "b:6379");
    }

    #[test]
    fn password_and_scrub() {
        assert_eq!(RedisConfig::new("redis://u:hunter2@h").password(), Some("hunter2"));
        assert_eq!(RedisConfig::new("redis://:hunter2@h/0").password(), Some("hunter2"));
        assert_eq!(RedisConfig::new("redis://h").password(), None);
        assert_eq!(RedisConfig::new("redis://u:hun/ter,2@h").password(), Some("hun/ter,2"));
        assert_eq!(RedisConfig::new("redis://u:hun,ter2@h").urls(), ["redis://u:hun,ter2@h"]);
        assert_eq!(
            scrub("cannot reach redis://u:hunter2@h:1 (hunter2)", Some("hunter2")),
            "cannot reach redis://u:***@h:1 (***)"
        );
        assert_eq!(scrub("a b", Some("a")), "a b", "short passwords are not replaced blindly");
    }

    #[test]
    fn defaults() {
        let c =
            RedisConfig::new("redis://h").cluster(true).timeouts(Duration::from_millis(5), Duration::from_millis(7));
        assert!(c.cluster);
        assert_eq!(c.operation_deadline(), Duration::from_millis(12));
        assert!(!c.uses_tls());
        assert!(RedisConfig::new("rediss://h").uses_tls());
    }
}

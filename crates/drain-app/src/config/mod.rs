//! The configuration layer: the only code that reads the environment.
//!
//! Everything is read once, at start: the environment, and optionally a TOML file
//! given with `--config` (the environment wins). Each value is parsed by the rule
//! in drain-core's `settings` (or here, for addresses and URLs); a bad value gives
//! the default or the clamped value with one warning, never a panic, and never
//! silently disables a safety feature. A value that cannot be used safely at all (a
//! `*_URL` with an unknown scheme, or set but blank) is a fatal [`ConfigError`].

pub(crate) mod registry;
mod render;
pub(crate) mod settings;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use drain_core::Switch;
use drain_core::admission::SchedulerConfig;
use drain_core::tick::{InFlight, TickConfig};
use settings::{Parsed, Warning};

pub(crate) use drain_runtime::redact::{Secret, redact, scrub};
pub(crate) use render::{effective_table, flags_markdown};

use registry::{Kind, SETTINGS, setting};

/// Where an effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Origin {
    /// The registry default.
    Default,
    /// The environment.
    Env,
    /// The `--config` file.
    File,
}

/// A setting as resolved: shown value (redacted) and where it came from.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Effective {
    pub(crate) name: &'static str,
    pub(crate) value: String,
    pub(crate) origin: Origin,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("config file {path}: {reason}")]
    FileSyntax { path: String, reason: String },
    /// `value` is redacted; it is quoted and escaped, so the message stays one line.
    #[error("{name}={value:?}: {reason}")]
    Invalid { name: &'static str, value: String, reason: String },
    /// Two settings that cannot both be set.
    #[error("{0}")]
    Conflict(String),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// The typed configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) singleflight: Switch,
    pub(crate) lease_ttl: Duration,
    pub(crate) lease_renew: Switch,
    pub(crate) atomic_claim: Switch,
    pub(crate) claim_ttl: Duration,
    pub(crate) claim_pending: Duration,
    pub(crate) drain_concurrency: usize,
    pub(crate) drain_batch: usize,
    /// `SERVICEBUS_DRAIN_MAX_IN_FLIGHT` (zero: a fixed window).
    pub(crate) drain_max_in_flight: usize,
    pub(crate) drain_max_wait: Duration,
    /// `SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS` (zero: no automatic renewal).
    pub(crate) max_lock_renewal: Duration,
    pub(crate) claim_aware: Switch,
    pub(crate) release_wake: Switch,
    pub(crate) skip_served: Switch,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) max_retry_timers: usize,
    pub(crate) beat_interval: Duration,
    pub(crate) worker_concurrency: usize,
    pub(crate) shutdown_grace: Duration,
    /// Redis, from `DRAIN_STORE_URL` (`redis://`, `rediss://`, `redis+sentinel://`) or
    /// `DRAIN_REDIS_URL`.
    pub(crate) redis_url: Option<Secret>,
    /// PostgreSQL, from `DRAIN_STORE_URL` (`postgres://`, `postgresql://`).
    pub(crate) postgres_url: Option<Secret>,
    pub(crate) redis_cluster: bool,
    pub(crate) redis_ca_file: Option<PathBuf>,
    pub(crate) source_url: Option<Secret>,
    pub(crate) target_url: Option<Secret>,
    pub(crate) target_fence_property: Option<String>,
    /// `DRAIN_SOURCE_SESSIONS`: `None` off, `Some(empty)` any session, else these.
    pub(crate) source_sessions: Option<Vec<String>>,
    pub(crate) max_sessions: usize,
    pub(crate) session_idle: Duration,
    /// `DRAIN_SOURCE_DEAD_LETTER_PROPERTIES=drop`.
    pub(crate) drop_dead_letter_properties: bool,
    pub(crate) key_prefix: String,
    pub(crate) instance_id: String,
    pub(crate) metrics_addr: Option<SocketAddr>,
    pub(crate) log_filter: String,
    pub(crate) log_format: LogFormat,
}

/// A loaded configuration with what `drain config` shows.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub(crate) config: Config,
    pub(crate) effective: Vec<Effective>,
    pub(crate) warnings: Vec<Warning>,
}

impl Config {
    /// The clear secret parts of every configured URL (passwords, SAS keys, their
    /// percent-decoded forms), for scrubbing free text such as a panic message.
    pub(crate) fn secret_parts(&self) -> Vec<String> {
        [&self.redis_url, &self.postgres_url, &self.source_url, &self.target_url]
            .into_iter()
            .flatten()
            .flat_map(Secret::parts)
            .collect()
    }

    /// The owner admission settings (docs/flags.md), with the worker count as turn slots.
    pub(crate) fn scheduler_config(&self) -> SchedulerConfig {
        {
            let mut m = SchedulerConfig::default();
            m.claim_aware = self.claim_aware;
            m.release_wake = self.release_wake;
            m.skip_served = self.skip_served;
            m.workers = self.worker_concurrency;
            m.backoff_min = self.backoff_min;
            m.backoff_max = self.backoff_max;
            m.max_retry_timers = self.max_retry_timers;
            m
        }
    }

    /// The tick settings for `queue`.
    pub(crate) fn tick_config(&self, queue: &str) -> TickConfig {
        let mut tick = TickConfig::new(queue);
        tick.singleflight = self.singleflight;
        tick.lease_ttl = self.lease_ttl;
        tick.renew = self.lease_renew;
        tick.atomic_claim = self.atomic_claim;
        tick.claim_done_ttl = self.claim_ttl;
        tick.claim_pending_ttl = self.claim_pending;
        tick.concurrency = self.drain_concurrency;
        // The lease keeps the other workers from racing for the queue: the holder
        // drains with their capacity, so single-flight costs no latency.
        tick.held_concurrency = Some(self.drain_concurrency.saturating_mul(self.worker_concurrency.max(1)));
        tick.batch = self.drain_batch;
        tick.in_flight = match self.drain_max_in_flight {
            0 => InFlight::Fixed,
            max => InFlight::Adaptive { max },
        };
        if self.source_sessions.is_some() {
            // A session's messages are submitted one at a time, in order: with more
            // in flight, one that fails goes back while the next ones land.
            tick.concurrency = 1;
            tick.held_concurrency = None;
            tick.in_flight = InFlight::Fixed;
        }
        tick.max_wait = self.drain_max_wait;
        tick
    }
}

/// Read the process environment (registry names only) and the optional file.
#[allow(clippy::disallowed_methods, reason = "the configuration layer is what reads the environment")]
pub(crate) fn load(file: Option<&Path>) -> Result<Loaded, ConfigError> {
    let mut env = BTreeMap::new();
    let mut warnings = Vec::new();
    for (name, v) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let known = setting(name).map(|s| s.name);
        if known.is_none() {
            if let Some(w) = unknown_variable(name) {
                warnings.push(w);
            }
            continue;
        }
        let value = match v.into_string() {
            Ok(v) => v,
            Err(raw) => {
                let lossy = raw.to_string_lossy().into_owned();
                warnings.push(Warning::new(name, "<not UTF-8>", "not valid UTF-8; read lossily"));
                lossy
            }
        };
        env.insert(name.to_owned(), value);
    }
    let file_values = match file {
        Some(path) => Some(read_file(path)?),
        None => None,
    };
    let mut loaded = resolve(&env, file_values.as_ref(), &default_instance_id())?;
    warnings.append(&mut loaded.warnings);
    loaded.warnings = warnings;
    Ok(loaded)
}

/// The prefixes of drain's variables: an unknown name with one of them is most likely
/// a typo of a known one, which would otherwise be ignored in silence.
const PREFIXES: [&str; 3] = ["DRAIN_", "SERVICEBUS_", "PROJECTION_"];

/// Variables with a known prefix that are not settings of drain, but of its tests
/// (they are read by the test suites, never by the binary).
fn ignored(name: &str) -> bool {
    name.starts_with("DRAIN_TEST_")
}

/// The warning for an unknown variable `name` with one of drain's prefixes, naming
/// the closest known setting; `None` for any other variable. Its value is not shown
/// (a misspelt URL may hold a password), and not shown as empty either.
pub(crate) fn unknown_variable(name: &str) -> Option<Warning> {
    if !PREFIXES.iter().any(|p| name.starts_with(p)) || ignored(name) {
        return None;
    }
    Some(Warning::new(name, "<not shown>", format!("not a setting of drain; ignored{}", closest_hint(name))))
}

/// `"; did you mean NAME?"` for the closest registry name, when one is close enough.
fn closest_hint(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    let best = SETTINGS.iter().map(|s| (strsim::damerau_levenshtein(&upper, s.name), s.name)).min_by_key(|(d, _)| *d);
    match best {
        // Close: a few edits, relative to the name's length.
        Some((d, known)) if d <= 3.max(known.len() / 4) => format!("; did you mean {known}?"),
        _ => String::new(),
    }
}

fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "drain".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Parse a TOML file of `NAME = value` pairs (names as in the registry).
fn read_file(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError::File { path: shown.clone(), reason: e.to_string() })?;
    parse_file(&shown, &text)
}

pub(crate) fn parse_file(path: &str, text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::FileSyntax {
        path: path.to_owned(),
        // toml's message quotes the offending line, which may hold a secret.
        reason: redact(e.message()),
    })?;
    let mut out = BTreeMap::new();
    for (key, value) in table {
        let name = key.to_ascii_uppercase();
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            // The same grammar as the environment: `true` is On, but `false` is not
            // `off` (only `off` disables a default-on switch), so it keeps the
            // default with a warning, as `SERVICEBUS_ATOMIC_CLAIM=false` would.
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ConfigError::FileSyntax {
                    path: path.to_owned(),
                    reason: format!("{key}: expected a string, integer or boolean, found {}", other.type_str()),
                });
            }
        };
        out.insert(name, value);
    }
    Ok(out)
}

/// Resolve every setting from the environment and the file (environment wins).
pub(crate) fn resolve(
    env: &BTreeMap<String, String>,
    file: Option<&BTreeMap<String, String>>,
    default_instance: &str,
) -> Result<Loaded, ConfigError> {
    let mut r = Resolver { env, file, effective: Vec::new(), warnings: Vec::new() };
    if let Some(file) = file {
        for name in file.keys() {
            if setting(name).is_none() {
                let hint = closest_hint(name);
                r.warnings.push(Warning::new(name, "", format!("unknown setting in the config file; ignored{hint}")));
            }
        }
    }
    let (bmin_raw, bmax_raw) =
        (r.raw("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS"), r.raw("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS"));
    let (bmin, bmax) = settings::ordered_window(
        ("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", int_rule("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS"), bmin_raw.as_deref()),
        ("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS", int_rule("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS"), bmax_raw.as_deref()),
    );
    let instance = settings::instance_id("DRAIN_INSTANCE_ID", r.raw("DRAIN_INSTANCE_ID").as_deref(), default_instance);
    let (redis_url, postgres_url) = r.store_urls()?;
    let config = Config {
        singleflight: r.switch("SERVICEBUS_DRAIN_SINGLEFLIGHT"),
        lease_ttl: Duration::from_secs(r.int("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS")),
        lease_renew: r.switch("SERVICEBUS_DRAIN_LEASE_RENEW"),
        atomic_claim: r.switch("SERVICEBUS_ATOMIC_CLAIM"),
        claim_ttl: Duration::from_secs(r.int("SERVICEBUS_ATOMIC_CLAIM_TTL_SECONDS")),
        claim_pending: Duration::from_secs(r.int("SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS")),
        drain_concurrency: r.count("SERVICEBUS_DRAIN_CONCURRENCY"),
        drain_batch: r.count("SERVICEBUS_DRAIN_BATCH"),
        drain_max_in_flight: r.count("SERVICEBUS_DRAIN_MAX_IN_FLIGHT"),
        drain_max_wait: Duration::from_millis(r.int("SERVICEBUS_DRAIN_MAX_WAIT_MS")),
        max_lock_renewal: Duration::from_secs(r.int("SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS")),
        claim_aware: r.switch("PROJECTION_DRAIN_CLAIM_AWARE"),
        release_wake: r.switch("PROJECTION_DRAIN_RELEASE_WAKE"),
        skip_served: r.switch("PROJECTION_DRAIN_SKIP_SERVED"),
        backoff_min: Duration::from_secs(r.take("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", bmin)),
        backoff_max: Duration::from_secs(r.take("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS", bmax)),
        max_retry_timers: r.count("PROJECTION_DRAIN_MAX_RETRY_TIMERS"),
        beat_interval: Duration::from_secs(r.int("DRAIN_BEAT_INTERVAL_SECONDS")),
        worker_concurrency: r.count("DRAIN_WORKER_CONCURRENCY"),
        shutdown_grace: Duration::from_secs(r.int("DRAIN_SHUTDOWN_GRACE_SECONDS")),
        redis_url,
        postgres_url,
        redis_cluster: r.switch("DRAIN_REDIS_CLUSTER") == Switch::On,
        redis_ca_file: r.path("DRAIN_REDIS_CA_FILE"),
        source_url: r.url("DRAIN_SOURCE_URL", &["amqp://", "amqps://", "endpoint="])?,
        target_url: r.url("DRAIN_TARGET_URL", &["amqp://", "amqps://", "endpoint="])?,
        target_fence_property: r.fence_property(),
        source_sessions: r.source_sessions(),
        max_sessions: r.count("DRAIN_SOURCE_MAX_SESSIONS"),
        session_idle: Duration::from_secs(r.int("DRAIN_SOURCE_SESSION_IDLE_SECONDS")),
        drop_dead_letter_properties: r.dead_letter_properties(),
        key_prefix: r.key_prefix()?,
        instance_id: r.take("DRAIN_INSTANCE_ID", instance),
        metrics_addr: r.metrics_addr(),
        log_filter: r.log_filter(),
        log_format: r.log_format(),
    };
    Ok(Loaded { config, effective: r.effective, warnings: r.warnings })
}

/// The rule of the integer setting `name`.
fn int_rule(name: &str) -> settings::IntRule {
    match setting(name).map(|s| s.kind) {
        Some(Kind::Int(rule, _)) => rule,
        _ => unreachable!("{name} is declared as an integer in the registry"),
    }
}

struct Resolver<'a> {
    env: &'a BTreeMap<String, String>,
    file: Option<&'a BTreeMap<String, String>>,
    effective: Vec<Effective>,
    warnings: Vec<Warning>,
}

impl Resolver<'_> {
    fn raw_with_origin(&self, name: &str) -> (Option<String>, Origin) {
        if let Some(v) = self.env.get(name) {
            return (Some(v.clone()), Origin::Env);
        }
        if let Some(v) = self.file.and_then(|f| f.get(name)) {
            return (Some(v.clone()), Origin::File);
        }
        (None, Origin::Default)
    }

    fn raw(&self, name: &str) -> Option<String> {
        self.raw_with_origin(name).0
    }

    /// Record the effective value and warning of a parsed setting; return its value.
    fn take<T: ToString>(&mut self, name: &'static str, parsed: Parsed<T>) -> T {
        let (_, set_in) = self.raw_with_origin(name);
        // A value that fell back to the default comes from the default, whatever
        // was set (the warning says what was set, and where).
        let origin = if parsed.defaulted { Origin::Default } else { set_in };
        let secret = setting(name).is_some_and(|s| s.secret);
        let shown = parsed.value.to_string();
        self.effective.push(Effective { name, value: if secret { redact(&shown) } else { shown }, origin });
        if let Some(mut w) = parsed.warning {
            if set_in == Origin::File {
                w.message.push_str(" (set in the config file)");
            }
            self.warnings.push(w);
        }
        parsed.value
    }

    fn switch(&mut self, name: &'static str) -> Switch {
        let Some(Kind::Switch(default)) = setting(name).map(|s| s.kind) else {
            unreachable!("{name} is declared as a switch in the registry");
        };
        let parsed = settings::parse_switch(name, self.raw(name).as_deref(), default);
        self.take(name, parsed)
    }

    fn int(&mut self, name: &'static str) -> u64 {
        let parsed = int_rule(name).parse(name, self.raw(name).as_deref());
        self.take(name, parsed)
    }

    fn count(&mut self, name: &'static str) -> usize {
        usize::try_from(self.int(name)).unwrap_or(usize::MAX)
    }

    /// A URL must start with one of `schemes` (case-insensitive); anything else,
    /// blank included, is fatal, because falling back to the embedded default would
    /// silently turn a fleet-wide lease or claim into a per-process one (and drain a
    /// demo queue instead of the real one). Only an unset variable means "embedded".
    fn url(&mut self, name: &'static str, schemes: &[&str]) -> Result<Option<Secret>, ConfigError> {
        let Some(raw) = self.raw(name).map(|v| v.trim().to_owned()) else {
            self.take(name, Parsed::clean("unset".to_owned()));
            return Ok(None);
        };
        if raw.is_empty() {
            return Err(ConfigError::Invalid {
                name,
                value: raw,
                reason: format!(
                    "set but blank; unset it for the embedded default, or give a URL starting with {}",
                    schemes.join(", ")
                ),
            });
        }
        let lower = raw.to_ascii_lowercase();
        if !schemes.iter().any(|s| lower.starts_with(s)) {
            return Err(ConfigError::Invalid {
                name,
                value: redact(&raw),
                reason: format!("must start with one of {}", schemes.join(", ")),
            });
        }
        self.take(name, Parsed::clean(raw.clone()));
        Ok(Some(Secret::url(raw)))
    }

    /// The store: `DRAIN_STORE_URL` by its scheme, or `DRAIN_REDIS_URL` (Redis, as
    /// before there was a choice); both set is fatal, since which one wins would be a
    /// guess. Answers (Redis, PostgreSQL); both `None` is the embedded store.
    fn store_urls(&mut self) -> Result<(Option<Secret>, Option<Secret>), ConfigError> {
        const STORE: &str = "DRAIN_STORE_URL";
        let redis = self.url("DRAIN_REDIS_URL", &["redis://", "rediss://", "redis+sentinel://"])?;
        let store = self.url(STORE, &["redis://", "rediss://", "redis+sentinel://", "postgres://", "postgresql://"])?;
        match (redis, store) {
            (Some(_), Some(_)) => Err(ConfigError::Conflict(
                "DRAIN_STORE_URL and DRAIN_REDIS_URL are both set: set only DRAIN_STORE_URL \
                 (DRAIN_REDIS_URL is its older name, for Redis only)"
                    .to_owned(),
            )),
            (redis, None) => Ok((redis, None)),
            (None, Some(url)) if url.expose().to_ascii_lowercase().starts_with("postgres") => {
                adapter_postgres::check_url(url.expose()).map_err(|e| ConfigError::Invalid {
                    name: STORE,
                    value: url.to_string(),
                    reason: e.message,
                })?;
                Ok((None, Some(url)))
            }
            (None, Some(url)) => Ok((Some(url), None)),
        }
    }

    /// `DRAIN_KEY_PREFIX`: unset is `drain`; anything else must be a valid prefix.
    /// A bad one is fatal, never replaced by the shared default: two tenants would
    /// silently share keys, and one tenant's messages would be completed as the
    /// other's duplicates.
    fn key_prefix(&mut self) -> Result<String, ConfigError> {
        const NAME: &str = "DRAIN_KEY_PREFIX";
        let Some(raw) = self.raw(NAME) else {
            return Ok(self.take(NAME, Parsed::clean("drain".to_owned())));
        };
        match settings::key_prefix(&raw) {
            Ok(prefix) => Ok(self.take(NAME, Parsed::clean(prefix))),
            Err(reason) => Err(ConfigError::Invalid {
                name: NAME,
                // Never a secret, but whatever was pasted here goes through the same mask.
                value: redact(&raw),
                reason: format!("{reason}; unset it for the shared prefix `drain`"),
            }),
        }
    }

    /// A file path; unset or blank is `None`. Whether it can be read is checked
    /// where it is used (a clear error at connect).
    fn path(&mut self, name: &'static str) -> Option<PathBuf> {
        let raw = self.raw(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        self.take(name, Parsed::clean(raw.clone().unwrap_or_else(|| "unset".to_owned())));
        raw.map(PathBuf::from)
    }

    /// An application property name: unset or blank is `None`; 1-128 printable
    /// ASCII characters, anything else is `None` with a warning (the messages then
    /// go out unchanged, as with the setting unset).
    fn fence_property(&mut self) -> Option<String> {
        const NAME: &str = "DRAIN_TARGET_FENCE_PROPERTY";
        let raw = self.raw(NAME).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let parsed = match raw {
            None => Parsed::clean(None),
            Some(v) if v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()) => Parsed::clean(Some(v)),
            Some(v) => Parsed::fallback(
                None,
                Warning::new(
                    NAME,
                    &v,
                    "not 1-128 printable ASCII characters without spaces; no fence property is sent",
                ),
            ),
        };
        let value = parsed.value.clone();
        let shown = Parsed {
            value: value.clone().unwrap_or_else(|| "unset".to_owned()),
            warning: parsed.warning,
            defaulted: parsed.defaulted,
        };
        self.take(NAME, shown);
        value
    }

    fn metrics_addr(&mut self) -> Option<SocketAddr> {
        const NAME: &str = "DRAIN_METRICS_ADDR";
        const DEFAULT: &str = "127.0.0.1:9464";
        let default: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9464));
        let raw = self.raw(NAME);
        let parsed = match raw.as_deref().map(str::trim) {
            None => Parsed::clean(Some(default)),
            Some(v) if v.eq_ignore_ascii_case("off") => Parsed::clean(None),
            Some(v) => match v.parse::<SocketAddr>() {
                Ok(a) => Parsed::clean(Some(a)),
                Err(_) => Parsed::fallback(
                    Some(default),
                    Warning::new(NAME, v, format!("not `host:port` or `off`; using {DEFAULT}")),
                ),
            },
        };
        let value = parsed.value;
        let shown = Parsed {
            value: value.map_or_else(|| "off".to_owned(), |a| a.to_string()),
            warning: parsed.warning,
            defaulted: parsed.defaulted,
        };
        self.take(NAME, shown);
        value
    }

    /// `DRAIN_LOG`: comma-separated directives, each a level (`info`) or
    /// `target=level` (`drain=debug`). Anything else, including a bare target that
    /// would silently switch every other log off, is `info` with a warning.
    fn log_filter(&mut self) -> String {
        const NAME: &str = "DRAIN_LOG";
        const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
        let raw = self.raw(NAME);
        let parsed = match raw.as_deref().map(str::trim) {
            None => Parsed::clean("info".to_owned()),
            Some(v) => {
                let valid_target = |t: &str| {
                    !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'))
                };
                let ok = !v.is_empty()
                    && v.split(',').all(|d| {
                        let d = d.trim();
                        let level = d.rsplit_once('=').map_or(d, |(_, l)| l).to_ascii_lowercase();
                        let target_ok = d.rsplit_once('=').is_none_or(|(t, _)| valid_target(t));
                        LEVELS.contains(&level.as_str()) && target_ok
                    });
                if ok {
                    Parsed::clean(v.to_owned())
                } else {
                    Parsed::fallback(
                        "info".to_owned(),
                        Warning::new(NAME, v, "not a list of `level` or `target=level` directives; using `info`"),
                    )
                }
            }
        };
        self.take(NAME, parsed)
    }

    fn log_format(&mut self) -> LogFormat {
        const NAME: &str = "DRAIN_LOG_FORMAT";
        let raw = self.raw(NAME);
        let parsed = match raw.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            None => Parsed::clean(LogFormat::Text),
            Some(v) if v == "json" => Parsed::clean(LogFormat::Json),
            Some(v) if v == "text" => Parsed::clean(LogFormat::Text),
            Some(v) => Parsed::fallback(LogFormat::Text, Warning::new(NAME, &v, "not `text` or `json`; using text")),
        };
        let value = parsed.value;
        let shown = Parsed {
            value: if value == LogFormat::Json { "json" } else { "text" }.to_owned(),
            warning: parsed.warning,
            defaulted: parsed.defaulted,
        };
        self.take(NAME, shown);
        value
    }
}

mod servicebus;

#[cfg(test)]
mod tests;

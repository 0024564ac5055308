//! [`RedisStore`]: connection, round-trip accounting, error mapping, `SCAN`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drain_core::ports::Observer;
use drain_core::{ErrorKind, Event, PortError};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::{Cmd, Pipeline, RedisError, ServerErrorKind, Value};

use crate::config::{RedisConfig, scrub};
use crate::conn::{Conn, exclusive_config};
use crate::error::{deadline_error, map_error, shape_error};
use crate::keys::KeySpace;
use crate::reply;
use crate::scripts::{LuaScript, SCRIPTS};

/// drain-core's [`LeaseStore`](drain_core::ports::LeaseStore) and
/// [`ClaimStore`](drain_core::ports::ClaimStore) on Redis, standalone or Cluster.
///
/// Cheap to clone (clones share the connection). Every port operation is one
/// round trip on one shared multiplexed connection (per hash slot in Cluster
/// mode); [`RedisStore::scan`] opens one of its own. Must be used inside
/// a Tokio runtime with time enabled.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
    observer: Option<Arc<dyn Observer>>,
}

struct Inner {
    conn: Conn,
    keys: KeySpace,
    releases: crate::releases::ReleaseCounters,
    config: RedisConfig,
    endpoint: String,
    deadline: Duration,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("endpoint", &self.inner.endpoint)
            .field("cluster", &self.inner.config.cluster)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// A string key's value and time to live, as [`RedisStore::scan`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// The value.
    pub value: String,
    /// Time to live; `None` when the key has none.
    pub remaining: Option<Duration>,
}

/// Why a round trip failed, before mapping.
pub(crate) enum Failure {
    Redis(RedisError),
    Deadline,
}

impl RedisStore {
    /// Connect to Redis (or the Cluster's seed nodes) and load the scripts.
    ///
    /// # Errors
    /// `Config` for an unusable configuration; otherwise the mapped error of the
    /// connection attempt (temporary when the server is merely unreachable, so the
    /// caller may retry).
    pub async fn connect(config: RedisConfig) -> Result<RedisStore, PortError> {
        validate(&config)?;
        if config.uses_tls() {
            // redis-rs builds its rustls config from the process default provider.
            // Install ring unless the application installed one already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let endpoint = config.endpoint();
        let deadline = config.operation_deadline();
        let password = config.password().map(str::to_owned);
        let fail = |f: Failure| connect_error(f, &endpoint, deadline, password.as_deref());
        let ca = read_ca(&config)?;
        let conn = match tokio::time::timeout(deadline, Conn::connect(&config, ca.as_deref())).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(fail(Failure::Redis(e))),
            Err(_) => return Err(fail(Failure::Deadline)),
        };
        let store = RedisStore {
            inner: Arc::new(Inner {
                conn,
                keys: KeySpace::new(config.key_prefix.clone()),
                releases: crate::releases::ReleaseCounters::default(),
                endpoint: endpoint.clone(),
                deadline,
                config,
            }),
            observer: None,
        };
        store.load_scripts().await?;
        Ok(store)
    }

    /// The same store reporting one [`Event::StoreOp`] per round trip to `observer`.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The configuration it was connected with.
    #[must_use]
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// What the release subscriptions of this store (and its clones) saw.
    #[must_use]
    pub fn release_counters(&self) -> crate::releases::ReleaseCounters {
        self.inner.releases.clone()
    }

    /// The key layout under the configured prefix.
    #[must_use]
    pub fn keys(&self) -> &KeySpace {
        &self.inner.keys
    }

    /// `host:port` of the server or seed nodes, as error messages name it.
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// One `PING` round trip (every node in Cluster mode); its duration.
    ///
    /// # Errors
    /// The mapped error when the server does not answer.
    pub async fn ping(&self) -> Result<Duration, PortError> {
        let start = Instant::now();
        self.query("ping", &redis::cmd("PING")).await?;
        Ok(start.elapsed())
    }

    /// Every string key under the store's prefix ([`KeySpace::scan_pattern`]) with
    /// its value and TTL, sorted by key (`drain leases` sorts them with
    /// [`KeySpace::parse`]). Uses `SCAN … TYPE string` (never `KEYS`) on a
    /// connection opened for the call (on every primary in Cluster mode), one page of up to 1000 keys
    /// per round trip, then one pipelined read per page. Keys that expire meanwhile
    /// are left out.
    ///
    /// # Errors
    /// The mapped error of the first failed round trip.
    pub async fn scan(&self) -> Result<Vec<(String, Scanned)>, PortError> {
        let pattern = self.inner.keys.scan_pattern();
        let pattern = pattern.as_str();
        let mut found = BTreeMap::new();
        if let Some(client) = self.inner.conn.client() {
            let config = exclusive_config(&self.inner.config);
            let mut conn = self
                .timed("scan", client.get_multiplexed_async_connection_with_config(&config))
                .await
                .map_err(|f| self.error("scan", f))?;
            let mut cursor = 0u64;
            loop {
                let cmd = scan_cmd(cursor, pattern);
                let (next, keys) = self
                    .timed("scan", cmd.query_async::<(u64, Vec<String>)>(&mut conn))
                    .await
                    .map_err(|f| self.error("scan", f))?;
                if !keys.is_empty() {
                    let pipe = peek_pipe(&keys);
                    let values: Vec<Value> = self
                        .timed("scan", pipe.query_async::<Vec<Value>>(&mut conn))
                        .await
                        .map_err(|f| self.error("scan", f))?;
                    collect(&mut found, keys, &values, "scan", &self.inner.endpoint)?;
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        } else if let Some(cluster) = self.inner.conn.cluster() {
            for (host, port) in self.primaries().await? {
                let mut cursor = 0u64;
                loop {
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port });
                    let mut node = cluster.clone();
                    let value = self
                        .timed("scan", node.route_command(scan_cmd(cursor, pattern), route))
                        .await
                        .map_err(|f| self.error("scan", f))?;
                    let (next, keys): (u64, Vec<String>) = redis::from_redis_value(value)
                        .map_err(|_| shape_error("scan", &self.inner.endpoint, "an unexpected SCAN reply"))?;
                    if !keys.is_empty() {
                        let held = self.read_keys("scan", &keys).await?;
                        for (key, h) in keys.into_iter().zip(held) {
                            if let Some(h) = h {
                                found.insert(key, h);
                            }
                        }
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// The primaries of the cluster, from `CLUSTER NODES`.
    async fn primaries(&self) -> Result<Vec<(String, u16)>, PortError> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("NODES");
        let text: String = redis::from_redis_value(self.query("scan", &cmd).await?)
            .map_err(|_| shape_error("scan", &self.inner.endpoint, "an unexpected CLUSTER NODES reply"))?;
        Ok(reply::cluster_primaries(&text))
    }

    /// `SCRIPT LOAD` every script (on every primary in Cluster mode), so the hot
    /// path only ever sends `EVALSHA`.
    async fn load_scripts(&self) -> Result<(), PortError> {
        for script in SCRIPTS.all() {
            let mut cmd = redis::cmd("SCRIPT");
            cmd.arg("LOAD").arg(script.source);
            match self.query("script_load", &cmd).await {
                Ok(_) => {}
                // A user without `script|load` can still run the scripts: the first
                // EVALSHA falls back to EVAL, which caches them.
                Err(e) if e.kind == ErrorKind::Permission => {}
                Err(mut e) => {
                    e.message = format!("loading the {} script: {}", script.name, e.message);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The standalone server's client (behind sentinels, the primary they named
    /// last); `None` on a Cluster.
    pub(crate) fn standalone_client(&self) -> Option<redis::Client> {
        self.inner.conn.client()
    }

    /// Run one round trip, timed and observed.
    ///
    /// No timer of its own on the hot path: redis-rs bounds every round trip
    /// already (connect timeout with no reconnect retries, response timeout; the
    /// cluster connection's overall timeout).
    pub(crate) async fn timed<T, E, F: Future<Output = Result<T, E>>>(
        &self,
        op: &'static str,
        call: F,
    ) -> Result<T, Failure>
    where
        Failure: From<E>,
    {
        let start = self.observer.as_ref().map(|_| Instant::now());
        let result = call.await.map_err(Failure::from);
        if let (Some(observer), Some(start)) = (&self.observer, start) {
            observer.observe(&Event::StoreOp { op, duration: start.elapsed() });
        }
        let timed_out = match &result {
            Ok(_) => false,
            Err(Failure::Deadline) => true,
            Err(Failure::Redis(e)) => {
                self.inner.conn.note_error(e);
                e.is_timeout()
            }
        };
        self.inner.conn.note(timed_out);
        result
    }

    /// One command on the hot-path connection.
    pub(crate) async fn query(&self, op: &'static str, cmd: &Cmd) -> Result<Value, PortError> {
        self.timed(op, self.inner.conn.cmd(cmd)).await.map_err(|f| self.error(op, f))
    }

    /// One pipeline on the hot-path connection.
    pub(crate) async fn pipeline(&self, op: &'static str, pipe: &Pipeline) -> Result<Vec<Value>, PortError> {
        self.timed(op, self.inner.conn.pipe(pipe)).await.map_err(|f| self.error(op, f))
    }

    /// `EVALSHA`, and on `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a failover to a node
    /// that never saw `SCRIPT LOAD`) `EVAL` with the source in the same call, which
    /// also caches the script again.
    pub(crate) async fn eval(
        &self,
        op: &'static str,
        script: &LuaScript,
        keys: &[&str],
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, PortError> {
        let key_bytes: usize = keys.iter().map(|k| k.len()).sum();
        self.eval_keys(op, script, keys, key_bytes, args).await
    }

    /// [`Self::eval`] with keys of any argument type ([`crate::keys::LeaseKeyArg`]
    /// writes a lease's keys into the command without a string each); `key_bytes`
    /// sizes the command.
    pub(crate) async fn eval_keys<K: redis::ToRedisArgs>(
        &self,
        op: &'static str,
        script: &LuaScript,
        keys: &[K],
        key_bytes: usize,
        args: impl Fn(&mut Cmd),
    ) -> Result<Value, PortError> {
        // Sized up front, with room for the verb, the key count and the callers' few
        // arguments: without it the lease bench fell under its guard (docs/performance.md).
        let build = |verb: &str, body: &str| {
            let mut cmd = Cmd::with_capacity(keys.len() + 8, key_bytes + body.len() + 128);
            cmd.arg(verb).arg(body).arg(keys.len()).arg(keys);
            args(&mut cmd);
            cmd
        };
        match self.timed(op, self.inner.conn.cmd(&build("EVALSHA", &script.sha))).await {
            Ok(v) => Ok(v),
            Err(Failure::Redis(e)) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.query(op, &build("EVAL", script.source)).await
            }
            Err(f) => Err(self.error(op, f)),
        }
    }

    /// Whether this store talks to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.conn.cluster().is_some()
    }

    /// Split key indices into groups that one script or pipeline may touch: all of
    /// them on a standalone server, one group per hash slot on a Cluster (in order
    /// of first appearance).
    pub(crate) fn groups<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<Vec<usize>> {
        if self.inner.conn.cluster().is_none() {
            return vec![keys.enumerate().map(|(i, _)| i).collect()];
        }
        let mut order: Vec<Vec<usize>> = Vec::new();
        let mut by_slot: HashMap<Slot, usize> = HashMap::new();
        for (i, key) in keys.enumerate() {
            let g = *by_slot.entry(Slot::for_key(key)).or_insert_with(|| {
                order.push(Vec::new());
                order.len() - 1
            });
            order[g].push(i);
        }
        order
    }

    /// Map a failure for a caller: kind, a message naming the operation and the
    /// endpoint, never the password.
    pub(crate) fn error(&self, op: &str, failure: Failure) -> PortError {
        let mut e = match failure {
            Failure::Redis(e) => map_error(&e, &self.inner.endpoint),
            Failure::Deadline => deadline_error(&self.inner.endpoint, self.inner.deadline),
        };
        e.message = scrub(&format!("{op}: {}", e.message), self.inner.config.password());
        e
    }
}

impl From<RedisError> for Failure {
    fn from(e: RedisError) -> Self {
        Failure::Redis(e)
    }
}

fn validate(config: &RedisConfig) -> Result<(), PortError> {
    let bad = |what: &str| Err(PortError::new(ErrorKind::Config, what.to_owned()));
    if config.urls().is_empty() {
        return bad("the Redis URL is empty: set DRAIN_REDIS_URL to redis://host:port");
    }
    if config.key_prefix.is_empty() {
        return bad("the Redis key prefix is empty: set DRAIN_KEY_PREFIX");
    }
    if config.connect_timeout.is_zero() || config.response_timeout.is_zero() {
        return bad("the Redis connect and response timeouts must be above zero");
    }
    let sentinel = config.url.trim().starts_with(crate::sentinel::SCHEME);
    if sentinel && config.cluster {
        return bad("a redis+sentinel:// URL names one primary: turn cluster mode off");
    }
    let known = |u: &str| u.starts_with("redis://") || u.starts_with("rediss://");
    if let Some(url) = config.urls().into_iter().find(|u| !sentinel && !known(u)) {
        return Err(PortError::new(
            ErrorKind::Config,
            format!(
                "{} is not a redis://, rediss:// or redis+sentinel:// URL: check DRAIN_REDIS_URL",
                drain_runtime::redact::redact(url)
            ),
        ));
    }
    Ok(())
}

fn connect_error(failure: Failure, endpoint: &str, deadline: Duration, password: Option<&str>) -> PortError {
    let mut e = match failure {
        Failure::Redis(e) => map_error(&e, endpoint),
        Failure::Deadline => deadline_error(endpoint, deadline),
    };
    e.message = scrub(&format!("connect: {}", e.message), password);
    e
}

/// The PEM of [`RedisConfig::tls_ca_file`], when set.
pub(crate) fn read_ca(config: &RedisConfig) -> Result<Option<Vec<u8>>, PortError> {
    let Some(path) = &config.tls_ca_file else { return Ok(None) };
    let bad = |why: String| Err(PortError::new(ErrorKind::Config, why));
    if !config.uses_tls() {
        return bad(format!("a TLS CA file ({}) is set, but the Redis URL is not rediss://", path.display()));
    }
    match std::fs::read(path) {
        Ok(pem) if pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") => Ok(Some(pem)),
        Ok(_) => bad(format!("the TLS CA file {} holds no PEM certificate", path.display())),
        Err(e) => bad(format!("cannot read the TLS CA file {}: {e}", path.display())),
    }
}

fn scan_cmd(cursor: u64, pattern: &str) -> Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000).arg("TYPE").arg("string");
    cmd
}

/// `GET k` + `PTTL k` for every key, one pipeline.
pub(crate) fn peek_pipe<K: AsRef<str>>(keys: impl IntoIterator<Item = K>) -> Pipeline {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("GET").arg(key.as_ref()).cmd("PTTL").arg(key.as_ref());
    }
    pipe
}

fn collect(
    found: &mut BTreeMap<String, Scanned>,
    keys: Vec<String>,
    values: &[Value],
    op: &str,
    endpoint: &str,
) -> Result<(), PortError> {
    if values.len() != keys.len() * 2 {
        return Err(shape_error(op, endpoint, "a pipeline reply of the wrong length"));
    }
    for (key, pair) in keys.into_iter().zip(values.chunks(2)) {
        if let Some(h) =
            reply::holding(&pair[0], &pair[1]).ok_or_else(|| shape_error(op, endpoint, "a non-string value"))?
        {
            found.insert(key, h);
        }
    }
    Ok(())
}

//! The hot-path connection: one multiplexed connection (standalone) or the async
//! cluster connection, shared by every task.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{PoisonError, RwLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisResult, TlsCertificates, Value};

use crate::config::RedisConfig;
use crate::sentinel::Sentinels;

/// After this many round trips in a row timed out, the standalone connection is
/// replaced: a half-open TCP connection (a silent failover, a dropped NAT entry)
/// never reports an error by itself.
const TIMEOUTS_BEFORE_RECONNECT: u32 = 2;

/// The shared connection.
pub(crate) enum Conn {
    /// A standalone server behind a reconnecting multiplexed connection.
    Single(Box<Single>),
    /// A Redis Cluster: one multiplexed connection per node, slot routing,
    /// `MOVED`/`ASK` handling and reconnection inside redis-rs.
    Cluster(ClusterConnection),
}

/// The standalone connection and what it takes to replace it.
pub(crate) struct Single {
    client: RwLock<redis::Client>,
    config: ConnectionManagerConfig,
    current: RwLock<ConnectionManager>,
    timeouts_in_a_row: AtomicU32,
    /// The sentinels that name the primary (`redis+sentinel://`).
    sentinels: Option<Sentinels>,
    /// A round trip suggested that the primary moved: ask the sentinels first.
    moved: AtomicBool,
}

impl Conn {
    /// Connect (eagerly: the first round trip proves the server is there). `ca` is
    /// the PEM of [`RedisConfig::tls_ca_file`], already read.
    pub(crate) async fn connect(config: &RedisConfig, ca: Option<&[u8]>) -> RedisResult<Conn> {
        let urls = config.urls();
        if config.cluster {
            let mut builder = ClusterClientBuilder::new(urls)
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .overall_response_timeout(Some(config.operation_deadline()))
                .retries(3)
                .min_retry_wait(20)
                .max_retry_wait(500);
            if let Some(ca) = ca {
                builder = builder.certs(certificates(ca));
            }
            return Ok(Conn::Cluster(builder.build()?.get_async_connection().await?));
        }
        let sentinels = Sentinels::from_url(&config.url)?;
        let client = match &sentinels {
            Some(sentinels) => sentinels.primary().await?,
            None => client(config, ca)?,
        };
        let manager_config = manager_config(config);
        let manager = ConnectionManager::new_with_config(client.clone(), manager_config.clone()).await?;
        Ok(Conn::Single(Box::new(Single {
            client: RwLock::new(client),
            config: manager_config,
            current: RwLock::new(manager),
            timeouts_in_a_row: AtomicU32::new(0),
            sentinels,
            moved: AtomicBool::new(false),
        })))
    }

    /// One command, one round trip. A server error reply is an `Err`.
    pub(crate) async fn cmd(&self, cmd: &Cmd) -> RedisResult<Value> {
        let value = match self {
            Conn::Single(s) => s.handle().await?.send_packed_command(cmd).await,
            Conn::Cluster(c) => c.clone().req_packed_command(cmd).await,
        }?;
        match value {
            Value::ServerError(e) => Err(RedisError::from(e)),
            v => Ok(v),
        }
    }

    /// A pipeline, one round trip (in cluster mode all its keys must share a
    /// slot). Any error reply inside fails the whole call with that error.
    pub(crate) async fn pipe(&self, pipe: &Pipeline) -> RedisResult<Vec<Value>> {
        let n = pipe.len();
        let values = match self {
            Conn::Single(s) => s.handle().await?.send_packed_commands(pipe, 0, n).await,
            Conn::Cluster(c) => c.clone().req_packed_commands(pipe, 0, n).await,
        }?;
        values
            .into_iter()
            .map(|v| match v {
                Value::ServerError(e) => Err(RedisError::from(e)),
                v => Ok(v),
            })
            .collect()
    }

    /// The standalone server's client (the primary the sentinels named last), to
    /// open a connection of its own.
    pub(crate) fn client(&self) -> Option<redis::Client> {
        match self {
            Conn::Single(s) => Some(s.client.read().unwrap_or_else(PoisonError::into_inner).clone()),
            Conn::Cluster(_) => None,
        }
    }

    /// A round trip failed with `e`: behind sentinels, one that suggests that the
    /// primary moved has the next round trip ask them first.
    pub(crate) fn note_error(&self, e: &RedisError) {
        if let Conn::Single(s) = self
            && s.sentinels.is_some()
            && crate::sentinel::suggests_a_move(e)
        {
            s.moved.store(true, Ordering::Relaxed);
        }
    }

    /// The cluster connection, when in cluster mode.
    pub(crate) fn cluster(&self) -> Option<&ClusterConnection> {
        match self {
            Conn::Cluster(c) => Some(c),
            Conn::Single(_) => None,
        }
    }

    /// Record how a round trip ended: a success resets the timeout streak, a
    /// streak of timeouts replaces the standalone connection.
    pub(crate) fn note(&self, timed_out: bool) {
        let Conn::Single(s) = self else { return };
        if !timed_out {
            if s.timeouts_in_a_row.load(Ordering::Relaxed) != 0 {
                s.timeouts_in_a_row.store(0, Ordering::Relaxed);
            }
            return;
        }
        if s.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1 >= TIMEOUTS_BEFORE_RECONNECT {
            s.timeouts_in_a_row.store(0, Ordering::Relaxed);
            if s.sentinels.is_some() {
                // The next round trip asks the sentinels, then replaces.
                s.moved.store(true, Ordering::Relaxed);
            } else {
                s.replace();
            }
        }
    }
}

impl Single {
    /// The connection to use; behind sentinels that may have moved the primary,
    /// first the primary they name now (an error when none answers).
    async fn handle(&self) -> RedisResult<ConnectionManager> {
        if let Some(sentinels) = &self.sentinels
            && self.moved.swap(false, Ordering::Relaxed)
        {
            match sentinels.primary().await {
                Ok(primary) => {
                    *self.client.write().unwrap_or_else(PoisonError::into_inner) = primary;
                    self.replace();
                }
                Err(e) => {
                    self.moved.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(self.current.read().unwrap_or_else(PoisonError::into_inner).clone())
    }

    /// Swap in a fresh, lazily connecting manager; calls in flight on the old one
    /// finish or fail on their own.
    fn replace(&self) {
        let client = self.client.read().unwrap_or_else(PoisonError::into_inner).clone();
        if let Ok(fresh) = ConnectionManager::new_lazy_with_config(client, self.config.clone()) {
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        }
    }
}

/// The standalone client: system roots, or only the CA in `ca` for `rediss://`.
pub(crate) fn client(config: &RedisConfig, ca: Option<&[u8]>) -> RedisResult<redis::Client> {
    let [url] = config.urls()[..] else {
        return Err(RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "several URLs are only allowed with DRAIN_REDIS_CLUSTER=on",
        )));
    };
    match ca {
        Some(ca) => redis::Client::build_with_tls(url, certificates(ca)),
        None => redis::Client::open(url),
    }
}

/// A client of the first URL (a Cluster's first seed node): what the release
/// subscriber connects to. A plain `PUBLISH` reaches the subscribers of every node.
pub(crate) fn seed_client(config: &RedisConfig, ca: Option<&[u8]>) -> RedisResult<redis::Client> {
    let Some(url) = config.urls().first().copied() else {
        return Err(RedisError::from((redis::ErrorKind::InvalidClientConfig, "no Redis URL")));
    };
    match ca {
        Some(ca) => redis::Client::build_with_tls(url, certificates(ca)),
        None => redis::Client::open(url),
    }
}

fn certificates(ca: &[u8]) -> TlsCertificates {
    TlsCertificates { client_tls: None, root_cert: Some(ca.to_vec()) }
}

fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    // No reconnect retries inside a call: a call that finds the server gone fails
    // at once with a temporary error (the caller fails open or closed by its own
    // rule), and the next call tries a fresh connection.
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(0)
}

/// The settings of a connection opened for one exclusive call (same timeouts as the hot path).
pub(crate) fn exclusive_config(config: &RedisConfig) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
}

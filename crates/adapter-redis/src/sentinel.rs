//! A primary found through Redis Sentinel:
//! `redis+sentinel://[user[:password]@]host:port[,host:port…]/<primary name>[/db]`.
//! The sentinels are asked for the primary's address at connect, and again after a
//! round trip that suggests it moved (the connection broke or was refused, two
//! timeouts in a row, a `READONLY` answer from a demoted primary), so a fleet
//! follows a failover by itself. The user and password are the primary's; the sentinels are
//! asked without them.

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{ErrorKind, IntoConnectionInfo, RedisError, RedisResult};

/// The URL scheme that selects a primary through Sentinel.
pub(crate) const SCHEME: &str = "redis+sentinel://";

/// The sentinels of one primary.
pub(crate) struct Sentinels {
    client: tokio::sync::Mutex<SentinelClient>,
}

impl Sentinels {
    /// The sentinels `url` names, or `None` when it is not a `redis+sentinel://` URL.
    pub(crate) fn from_url(url: &str) -> RedisResult<Option<Sentinels>> {
        let Some(rest) = url.strip_prefix(SCHEME) else { return Ok(None) };
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((info, rest)) => (Some(info), rest),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let mut path = path.split('/').filter(|p| !p.is_empty());
        let service = path.next().ok_or_else(|| invalid("the primary's name after the sentinels (…/mymaster)"))?;
        let db = match path.next() {
            Some(db) => db.parse::<i64>().map_err(|_| invalid("a database number after the primary's name"))?,
            None => 0,
        };
        let sentinels: Vec<String> =
            hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(|h| format!("redis://{h}")).collect();
        if sentinels.is_empty() {
            return Err(invalid("at least one sentinel host:port"));
        }
        // The primary's credentials and database, read as a redis:// URL would be.
        let node = match userinfo {
            Some(info) => format!("redis://{info}@sentinel-primary/{db}"),
            None => format!("redis://sentinel-primary/{db}"),
        };
        let redis = node.into_connection_info()?.redis_settings().clone();
        let info = SentinelNodeConnectionInfo::default().set_redis_connection_info(redis);
        let client = SentinelClient::build(sentinels, service, Some(info), SentinelServerType::Master)?;
        Ok(Some(Sentinels { client: tokio::sync::Mutex::new(client) }))
    }

    /// A client of the primary the sentinels name now.
    pub(crate) async fn primary(&self) -> RedisResult<redis::Client> {
        self.client.lock().await.async_get_client().await
    }
}

/// Whether a failed round trip suggests that the primary moved: ask the sentinels
/// again before the next one. A timeout alone does not: it counts in the connection's
/// streak (`Conn::note`: two in a row), as it does without sentinels.
pub(crate) fn suggests_a_move(e: &RedisError) -> bool {
    let broken = e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error();
    (broken && !e.is_timeout()) || e.code() == Some("READONLY")
}

fn invalid(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, "a redis+sentinel:// URL needs", what.to_owned()))
}

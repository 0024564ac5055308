//! The fault harness on a private redis-server and a `RedisStore`.

use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use test_servers::RedisServer;

use super::{FaultServer, PATIENT, Shared};

/// The store's connect and response timeouts.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_millis(300);

pub(crate) type Server = Shared<RedisServer>;

/// A scenario on Redis.
pub(crate) type World = super::World<RedisStore, RedisServer>;

impl FaultServer for RedisServer {
    const NAME: &'static str = "Redis";
    fn kill(&mut self) {
        RedisServer::kill(self);
    }
    fn pause(&mut self) {
        RedisServer::pause(self);
    }
    fn resume(&mut self) {
        RedisServer::resume(self);
    }
    /// Restarted empty (no persistence unless the server was started with it).
    fn restart(&mut self) {
        RedisServer::restart(self);
    }
}

impl World {
    /// A world on a private redis-server started with `extra`.
    pub(crate) async fn new(extra: &[&str], messages: usize, delay: Duration) -> World {
        World::on(RedisServer::start_with(extra), messages, delay).await
    }

    /// A world on `server`, with `messages` queued and submits that take `delay`.
    pub(crate) async fn on(server: RedisServer, messages: usize, delay: Duration) -> World {
        World::timing_out(server, messages, delay, REDIS_TIMEOUT).await
    }

    /// The same with patient timeouts, for a scenario whose faults are refusals.
    pub(crate) async fn patient(messages: usize, delay: Duration) -> World {
        World::timing_out(RedisServer::start(), messages, delay, PATIENT).await
    }

    async fn timing_out(server: RedisServer, messages: usize, delay: Duration, timeout: Duration) -> World {
        let store = RedisStore::connect(RedisConfig::new(server.url()).timeouts(timeout, timeout))
            .await
            .expect("connect to the private redis-server");
        World::with(server, store, messages, delay)
    }
}

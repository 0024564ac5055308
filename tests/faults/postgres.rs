//! The fault harness on a private PostgreSQL and a `PostgresStore`.

use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use test_servers::PostgresServer;

use super::{FaultServer, Shared};

/// The store's connect and response timeouts.
pub(crate) const PG_TIMEOUT: Duration = Duration::from_millis(300);

pub(crate) type Server = Shared<PostgresServer>;

/// A scenario on PostgreSQL.
pub(crate) type World = super::World<PostgresStore, PostgresServer>;

impl FaultServer for PostgresServer {
    const NAME: &'static str = "the server";
    fn kill(&mut self) {
        PostgresServer::kill(self);
    }
    fn pause(&mut self) {
        PostgresServer::pause(self);
    }
    fn resume(&mut self) {
        PostgresServer::resume(self);
    }
    /// Killed and started again on the same data directory: what was committed
    /// survives (leases, fences, claims).
    fn restart(&mut self) {
        PostgresServer::restart(self);
    }
}

/// The store's configuration on `server`: short timeouts, the default four
/// connections.
pub(crate) fn config(server: &PostgresServer) -> PostgresConfig {
    PostgresConfig::new(server.url()).timeouts(PG_TIMEOUT, PG_TIMEOUT)
}

impl World {
    /// `None` when PostgreSQL is not installed (outside CI).
    pub(crate) async fn new(messages: usize, delay: Duration) -> Option<World> {
        let server = PostgresServer::start()?;
        Some(World::on(server, messages, delay).await)
    }

    /// A world on `server`, with `messages` queued and submits that take `delay`.
    pub(crate) async fn on(server: PostgresServer, messages: usize, delay: Duration) -> World {
        // The first connect also creates the schema, which can outlast the short
        // timeout on a busy machine: the schema is made with a patient connect.
        let patient = config(&server).timeouts(Duration::from_secs(10), Duration::from_secs(10));
        drop(PostgresStore::connect(patient).await.expect("create the schema on the private PostgreSQL"));
        let store = PostgresStore::connect(config(&server)).await.expect("connect to the private PostgreSQL");
        World::with(server, store, messages, delay)
    }
}

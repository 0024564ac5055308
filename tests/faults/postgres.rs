//! The fault harness on a private PostgreSQL and a `PostgresStore`.

use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use test_servers::PostgresServer;

use super::{FaultServer, PATIENT, Shared};

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
    /// A world on a private PostgreSQL.
    pub(crate) async fn new(messages: usize, delay: Duration) -> World {
        World::on(PostgresServer::start(), messages, delay).await
    }

    /// A world on `server`, with `messages` queued and submits that take `delay`.
    pub(crate) async fn on(server: PostgresServer, messages: usize, delay: Duration) -> World {
        World::timing_out(server, messages, delay, PG_TIMEOUT).await
    }

    /// The same with patient timeouts, for a scenario whose faults are refusals, not
    /// silence: on a busy machine the first calls after a restart can outlast the
    /// short timeouts.
    pub(crate) async fn patient(messages: usize, delay: Duration) -> World {
        World::timing_out(PostgresServer::start(), messages, delay, PATIENT).await
    }

    async fn timing_out(server: PostgresServer, messages: usize, delay: Duration, timeout: Duration) -> World {
        // The first connect also creates the schema, which can outlast the short
        // timeout on a busy machine: the schema is made with a patient connect.
        let patient = config(&server).timeouts(PATIENT, PATIENT);
        drop(PostgresStore::connect(patient).await.expect("create the schema on the private PostgreSQL"));
        // Connecting is setup, not the fault under test: a connect that a busy
        // machine made outlast the short timeout is tried again, a few times.
        let short = config(&server).timeouts(timeout, timeout);
        let mut tries = 0;
        let store = loop {
            tries += 1;
            match PostgresStore::connect(short.clone()).await {
                Ok(store) => break store,
                Err(e) if tries < 5 && e.kind == drain_core::ErrorKind::Timeout => eprintln!("connect {tries}: {e}"),
                Err(e) => panic!("connect to the private PostgreSQL: {e:?}"),
            }
        };
        World::with(server, store, messages, delay)
    }
}

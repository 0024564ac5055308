//! The history on a private PostgreSQL: `PostgresStore::fenced` (an `INSERT` into a
//! table of the test's own, committed only while the fence is the lease's current
//! one), the mark path (`FenceMarks::admit` on a resource's mark, what an embedder
//! checks before writing somewhere else), and a plain `INSERT` into a second table.
//! Both tables number their rows from one sequence each, in the order the inserts
//! ran. A restart kills the server and starts it on the same data directory: leases,
//! fences, marks and rows survive.

use std::time::Duration;

use adapter_postgres::{Fenced, PostgresConfig, PostgresStore};
use drain_core::PortError;
use drain_core::ports::{Fence, FenceMarks, FenceVerdict};
use test_servers::PostgresServer;
use tokio::sync::Mutex;
use tokio_postgres::Client;

use super::{Backend, Outcome, Resource};

const TABLES: &str = "CREATE TABLE history_fenced (seq bigserial PRIMARY KEY, write bigint NOT NULL, fence bigint NOT NULL); \
     CREATE TABLE history_plain (seq bigserial PRIMARY KEY, write bigint NOT NULL, fence bigint NOT NULL)";
/// The resource whose mark the mark path keeps.
const MARK: &str = "history";

pub(crate) struct Postgres;

/// A holder's own clients for the two tables (made again after a restart broke them).
pub(crate) struct Clients {
    fenced: Mutex<Option<Client>>,
    plain: Mutex<Option<Client>>,
}

/// The live client in `slot`, connecting a new one when there is none.
async fn live<'a>(store: &PostgresStore, slot: &'a mut Option<Client>) -> Option<&'a mut Client> {
    if slot.as_ref().is_none_or(Client::is_closed) {
        *slot = store.connect_client().await.ok();
    }
    slot.as_mut()
}

impl Backend for Postgres {
    const NAME: &'static str = "PostgreSQL";
    const RESOURCES: &'static [Resource] = &[
        Resource { name: "fenced INSERT", checked: true },
        Resource { name: "FenceMarks admit", checked: true },
        Resource { name: "plain INSERT", checked: false },
    ];
    type Server = PostgresServer;
    type Store = PostgresStore;
    type Conn = Clients;

    fn start() -> PostgresServer {
        let pg = PostgresServer::start();
        pg.sql(TABLES).expect("the history's tables");
        pg
    }

    fn url(server: &PostgresServer) -> String {
        server.url()
    }

    fn pause(server: &mut PostgresServer) {
        server.pause();
    }

    fn resume(server: &mut PostgresServer) {
        server.resume();
    }

    fn restart(server: &mut PostgresServer) {
        server.restart();
    }

    async fn connect(url: &str) -> Result<(PostgresStore, Clients), PortError> {
        // A response timeout longer than the delayed replies: they come late, not never.
        let config = PostgresConfig::new(url).timeouts(Duration::from_secs(1), Duration::from_secs(1)).connections(2);
        let store = PostgresStore::connect(config).await?;
        Ok((store, Clients { fenced: Mutex::new(None), plain: Mutex::new(None) }))
    }

    async fn write(store: &PostgresStore, clients: &Clients, resource: usize, fence: &Fence, id: u64) -> Outcome {
        let id = i64::try_from(id).expect("a write id fits a bigint");
        let number = i64::try_from(fence.number()).expect("a fence fits a bigint");
        match resource {
            0 => {
                let mut slot = clients.fenced.lock().await;
                let Some(client) = live(store, &mut slot).await else { return Outcome::Failed };
                let insert = "INSERT INTO history_fenced (write, fence) VALUES ($1, $2)";
                match store.fenced(client, fence, async |tx| tx.execute(insert, &[&id, &number]).await).await {
                    Ok(Fenced::Committed(_)) => Outcome::Accepted,
                    Ok(Fenced::Stale { .. }) => Outcome::Stale,
                    Err(_) => Outcome::Failed,
                }
            }
            1 => match store.admit(MARK, fence.number()).await {
                Ok(FenceVerdict::Accepted) => Outcome::Accepted,
                Ok(FenceVerdict::Stale { .. }) => Outcome::Stale,
                Err(_) => Outcome::Failed,
            },
            _ => {
                let mut slot = clients.plain.lock().await;
                let Some(client) = live(store, &mut slot).await else { return Outcome::Failed };
                let insert = "INSERT INTO history_plain (write, fence) VALUES ($1, $2)";
                match client.execute(insert, &[&id, &number]).await {
                    Ok(_) => Outcome::Accepted,
                    Err(_) => Outcome::Failed,
                }
            }
        }
    }

    fn landed(server: &PostgresServer, resource: usize) -> Option<Vec<(u64, Option<u64>)>> {
        let table = match resource {
            0 => "history_fenced",
            1 => return None, // a mark keeps only the largest fence
            _ => "history_plain",
        };
        let rows = server.sql(&format!("SELECT write, seq FROM {table} ORDER BY seq")).expect("the history's rows");
        let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<u64>().ok()).expect("a number");
        Some(rows.iter().map(|r| (num(&r[0]), Some(num(&r[1])))).collect())
    }
}

//! Tenant drains over the embedder's own PostgreSQL table (`examples/sql/jobs.sql`):
//! several processes work through every tenant's jobs, one turn per tenant at a time
//! across the fleet. Each turn takes the tenant's claim (`OwnerTurns`), does a batch
//! of the tenant's jobs in a transaction that commits only while that claim's fence is
//! current (`PostgresStore::fenced`), and releases the claim, waking one process that
//! waits for it. Admission peeks before launching (`Scheduler` + `admission::drive`).
//!
//! `tenant-drains POSTGRES_URL INSTANCE_ID`: passes over the table request every
//! tenant with jobs to do; when none is left the process prints a JSON report and
//! exits 0 (1 when the store failed for good, 2 on bad arguments).

use std::{process::ExitCode, time::Duration};

use adapter_postgres::{PostgresConfig, PostgresStore, map_error};
use drain_core::PortError;
use drain_core::admission::{DriverPorts, OwnerId, OwnerTurns, Scheduler, SchedulerConfig, Worked, drive};
use drain_core::ports::{Fence, NoopObserver};
use drain_core::rand::{self, rngs::SmallRng, rngs::StdRng};
use drain_runtime::{TokioClock, owner_passes};
use tokio_postgres::Transaction;

/// Jobs per turn: a turn that did a whole batch says more may be left.
const BATCH: i64 = 20;
const DO_JOBS: &str = include_str!("../../sql/do_jobs.sql");
const TENANTS_TO_DO: &str = include_str!("../../sql/tenants_to_do.sql");

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, me] = &args[..] else {
        eprintln!("usage: tenant-drains POSTGRES_URL INSTANCE_ID");
        return ExitCode::from(2);
    };
    let result = drain_tenants(url, me).await;
    result.as_ref().map_or_else(|e| eprintln!("tenant-drains: {e}"), |report| println!("{report}"));
    ExitCode::from(u8::from(result.is_err()))
}

async fn drain_tenants(url: &str, me: &str) -> Result<serde_json::Value, PortError> {
    let store = PostgresStore::connect(PostgresConfig::new(url)).await?;
    // The turns' transactions take turns on one connection (a pool would let them
    // overlap); the passes have their own.
    let (client, passes) = (tokio::sync::Mutex::new(store.connect_client().await?), store.connect_client().await?);
    let clock = TokioClock::new();
    // A batch of the tenant's jobs, committed only while the turn's claim is current.
    let work = async |tenant: OwnerId, fence: Fence| {
        let params = (tenant.as_str(), me, fence.number().cast_signed());
        let batch = async |tx: &Transaction<'_>| tx.execute(DO_JOBS, &[&params.0, &params.1, &params.2, &BATCH]).await;
        // A stale fence (a newer turn holds the tenant) writes nothing.
        let items = store.fenced(&mut *client.lock().await, &fence, batch).await?.committed().unwrap_or(0);
        Ok(Worked { items, more: items == BATCH.unsigned_abs() })
    };
    let turns = OwnerTurns::new(&store, &clock, me, Duration::from_secs(10), rand::make_rng::<StdRng>(), work);
    let mut scheduler = Scheduler::new(SchedulerConfig::default(), rand::make_rng::<SmallRng>());
    let ports = DriverPorts { claims: Some(&store), work: &turns, clock: &clock, observer: &NoopObserver };
    // Each pass requests every tenant with jobs to do; a pass that finds none ends it,
    // and so does one that fails for good (a failing one is passed again later).
    let (requests, all_done) = owner_passes(Duration::from_millis(200), || async {
        let rows = passes
            .query(TENANTS_TO_DO, &[])
            .await
            .map_err(|e| map_error(&e, "finding tenants", &store.config().endpoint()))?;
        Ok(rows.iter().map(|row| OwnerId::from(row.get::<_, String>(0))).chain(turns.take_handed_off()).collect())
    });
    let mut ended = Ok(());
    drive(&mut scheduler, ports, requests, async { ended = all_done.await }).await;
    ended?;
    turns.fatal().map_or(Ok(()), Err)?;
    let (outcomes, wakes, heard) = (turns.outcomes(), turns.wakes_sent(), store.release_counters().received());
    Ok(serde_json::json!({"instance": me, "turns": outcomes, "wakes_sent": wakes, "releases_heard": heard}))
}

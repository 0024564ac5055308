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

use std::{collections::BTreeMap, process::ExitCode, sync::Mutex, sync::PoisonError, time::Duration};

use adapter_postgres::{Fenced, FencedError, PostgresConfig, PostgresStore, map_error};
use drain_core::admission::{DriverPorts, OwnerId, OwnerTurns, Scheduler, SchedulerConfig, Worked, drive};
use drain_core::{Event, PortError, guard::Held, ports::Observer};
use drain_runtime::TokioClock;
use rand::rngs::{SmallRng, StdRng};
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
    let (clock, tally) = (TokioClock::new(), Tally::default());
    // A batch of the tenant's jobs, committed only while the turn's claim is current.
    let work = async |tenant: OwnerId, held: Held| {
        let Some(fence) = held.fence() else { return Ok(Worked::default()) };
        let params = (tenant.as_str(), me, fence.number().cast_signed());
        let batch = async |tx: &Transaction<'_>| tx.execute(DO_JOBS, &[&params.0, &params.1, &params.2, &BATCH]).await;
        let items = match store.fenced(&mut *client.lock().await, fence, batch).await {
            Ok(Fenced::Committed(n)) => n,
            // A newer turn holds the tenant: nothing was written here.
            Ok(Fenced::Stale { .. }) => 0,
            Err(FencedError::Store(e)) => return Err(e),
            Err(FencedError::Work(e)) => return Err(map_error(&e, "do_jobs", "jobs")),
        };
        Ok(Worked { items, more: items == BATCH.unsigned_abs() })
    };
    let turns = OwnerTurns::new(&store, &clock, me, Duration::from_secs(10), rand::make_rng::<StdRng>(), work);
    let mut scheduler = Scheduler::new(SchedulerConfig::default(), rand::make_rng::<SmallRng>());
    let ports = DriverPorts { claims: Some(&store), work: &turns, clock: &clock, observer: &tally };
    // Each pass requests every tenant with jobs to do (what the scheduler handed back
    // too); a pass that finds none ends the drive.
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let all_done = async {
        while let Some(rows) = passes.query(TENANTS_TO_DO, &[]).await.ok().filter(|rows| !rows.is_empty()) {
            rows.iter().for_each(|row| drop(tx.unbounded_send(OwnerId::from(row.get::<_, String>(0)))));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    drive(&mut scheduler, ports, rx, all_done).await;
    turns.fatal().map_or(Ok(()), Err)?;
    let (turns, wakes, heard) = (tally.0.into_inner(), turns.wakes_sent(), store.release_counters().received());
    Ok(serde_json::json!({"instance": me, "turns": turns.ok(), "wakes_sent": wakes, "releases_heard": heard}))
}

/// Turns counted by outcome, for the report.
#[derive(Default)]
struct Tally(Mutex<BTreeMap<&'static str, u64>>);

impl Observer for Tally {
    fn observe(&self, event: &Event<'_>) {
        if let Event::OwnerTurn { outcome } = event {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner).entry(outcome.as_str()).or_default() += 1;
        }
    }
}

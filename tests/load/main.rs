//! `drain-load`: the load check. In one process on Tokio, against
//! a private `redis-server` it starts itself:
//!
//! * the tick path: 64 queues x 16 instances (each instance its own `RedisStore`),
//!   `run_tick` with the lease and the atomic claim On, fed by a producer;
//! * 10,000 owners through two admission instances (`Scheduler` + `drive`), turns
//!   taking the owner claim, requests Zipf-distributed;
//!
//! for `--seconds` (default 60). It counts every operation and error, compares the
//! server's `INFO commandstats` deltas with the commands each call must send,
//! samples the process's resident memory every second, writes the report to
//! `--out` (default `<target>/bench/load.json`) and prints a summary. It exits 1
//! when a check fails: any error, a message not submitted exactly once, a command
//! the calls do not explain, or memory growing after warm-up. Nothing is timed:
//! rates are reported, never asserted. `cargo xtask soak` builds and runs it.

mod checks;
mod meter;
mod owners;
mod parts;
mod queue;
mod report;
mod ticks;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use adapter_redis::{RedisConfig, RedisStore};
use test_servers::RedisServer;

use crate::meter::{Meter, Metered};
use crate::parts::{Counting, rss_kib};
use drain_e2e::TokioClock;

/// Client timeouts: generous, the machine may be busy; a timeout is an error here.
const REDIS_TIMEOUT: Duration = Duration::from_secs(5);
/// The most the wind-down (drain the queues, stop the loops) may take.
const WIND_DOWN: Duration = Duration::from_secs(30);

/// The command line.
#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) seconds: u64,
    pub(crate) warmup: u64,
    pub(crate) queues: usize,
    pub(crate) instances: usize,
    pub(crate) owners: usize,
    pub(crate) out: PathBuf,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args { seconds: 60, warmup: 0, queues: 64, instances: 16, owners: 10_000, out: default_out() };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = || value.parse::<u64>().map_err(|_| format!("{flag} takes a whole number, not `{value}`"));
        match flag.as_str() {
            "--seconds" => a.seconds = num()?.max(2),
            "--warmup" => a.warmup = num()?,
            "--queues" => a.queues = usize::try_from(num()?.max(1)).unwrap_or(64),
            "--instances" => a.instances = usize::try_from(num()?.max(1)).unwrap_or(16),
            "--owners" => a.owners = usize::try_from(num()?.max(1)).unwrap_or(10_000),
            "--out" => a.out = PathBuf::from(value),
            _ => {
                return Err(format!(
                    "unknown argument `{flag}` (--seconds --warmup --queues --instances --owners --out)"
                ));
            }
        }
    }
    if a.warmup == 0 || a.warmup >= a.seconds {
        // A quarter of the run, at least 3 s: connections, buffers and the owner
        // claims' working set are in place by then.
        a.warmup = (a.seconds / 4).max(3).min(a.seconds - 1);
    }
    Ok(a)
}

/// `<target>/bench/load.json`: this binary is `<target>/<profile>/drain-load`.
fn default_out() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let target = exe.parent().and_then(|p| p.parent()).map(PathBuf::from).unwrap_or_default();
    target.join("bench").join("load.json")
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("drain-load: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("drain-load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("drain-load: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(url: &str, meter: &Arc<Meter>, observer: &Arc<Counting>) -> Result<Metered, String> {
    let store = RedisStore::connect(RedisConfig::new(url).timeouts(REDIS_TIMEOUT, REDIS_TIMEOUT).key_prefix("load"))
        .await
        .map_err(|e| format!("connecting to the private redis-server: {e}"))?
        .with_observer(observer.clone());
    Ok(drain_core::layer::Forward::new(Arc::new(store), meter.clone()))
}

/// Run the load; whether every check passed.
async fn run(args: &Args) -> Result<bool, String> {
    let server = RedisServer::start();
    let url = server.url();
    let (tick_meter, owner_meter) = (Arc::new(Meter::default()), Arc::new(Meter::default()));
    let (tick_obs, owner_obs) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
    let mut tick_stores = Vec::new();
    for _ in 0..args.instances {
        tick_stores.push(connect(&url, &tick_meter, &tick_obs).await?);
    }
    let tick_shape = ticks::Shape::new(args.queues);
    let owner_shape = owners::Shape::new(args.owners);
    let mut owner_stores = Vec::new();
    for _ in 0..2 {
        owner_stores.push(connect(&url, &owner_meter, &owner_obs).await?);
    }
    let clock = Arc::new(TokioClock::new());
    let calls_before = server.command_calls().map_err(|e| format!("INFO commandstats: {e}"))?;
    let mut rss = vec![(0u64, rss_kib())];
    println!(
        "drain-load: {} s ({} s warm-up): {} queues x {} instances, {} owners x 2 schedulers, redis-server on port {}",
        args.seconds,
        args.warmup,
        args.queues,
        args.instances,
        args.owners,
        server.port()
    );

    let started = Instant::now();
    let ticks = ticks::TickPath::start(&tick_shape, &tick_stores, tick_obs.clone(), &clock, 0x10AD);
    let owners = owners::OwnerPath::start(&owner_shape, &owner_stores, &owner_obs, &clock, 0x0E4E);
    for s in 1..=args.seconds {
        tokio::time::sleep_until((started + Duration::from_secs(s)).into()).await;
        rss.push((s, rss_kib()));
        if s % 10 == 0 || s == args.seconds {
            let t = tick_meter.calls();
            println!(
                "  {s:>3} s: rss {} KiB, tick calls {}, owner turns {}, errors {}",
                rss_kib(),
                t.values().sum::<u64>(),
                owners.turns.turns.load(std::sync::atomic::Ordering::Relaxed),
                tick_meter.errors() + owner_meter.errors()
            );
        }
    }
    let at_deadline = report::Snapshot::take(&tick_meter, &owner_meter, &tick_obs, &owner_obs, started.elapsed());

    // Wind down: stop requests and producers, let the ticks empty the queues, stop.
    let turns = owners.stop(WIND_DOWN).await?;
    ticks.stop_producing();
    let drained_by = Instant::now() + WIND_DOWN;
    while ticks.backlog() > 0 && Instant::now() < drained_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = ticks.stop(WIND_DOWN).await?;
    let (produced, backlog) = (stopped.produced(), stopped.backlog());
    let calls_after = server.command_calls().map_err(|e| format!("INFO commandstats: {e}"))?;
    let redis_version = server
        .info("server")
        .ok()
        .and_then(|i| i.into_iter().find(|(k, _)| k == "redis_version").map(|(_, v)| v))
        .unwrap_or_default();

    let input = checks::Input {
        args,
        tick_shape: &tick_shape,
        owner_shape: &owner_shape,
        at_deadline,
        tick_meter: &tick_meter,
        owner_meter: &owner_meter,
        tick_obs: &tick_obs,
        owner_obs: &owner_obs,
        stopped: &stopped,
        turns: &turns,
        produced,
        backlog,
        calls_before,
        calls_after,
        rss,
        redis_version,
    };
    let (report, ok) = checks::evaluate(&input);
    report::write(&args.out, &report)?;
    report::print_summary(&report);
    println!("drain-load: report in {}", args.out.display());
    if !ok {
        let failed: Vec<&str> = report["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["ok"].as_bool() != Some(true))
            .filter_map(|c| c["check"].as_str())
            .collect();
        eprintln!("drain-load: FAILED: {} (details above and in the report)", failed.join("; "));
    }
    Ok(ok)
}

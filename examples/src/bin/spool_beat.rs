//! The beat over a queue and a target of the team's own: a spool directory of message
//! files (`drain_examples::spool`), drained into an output spool. Any number of
//! processes share the spool; the single-flight lease on Redis runs one tick at a time
//! across them (the others skip), and the per-message claim on Redis submits every
//! message once, even when the spool holds a message twice (a producer that retried).
//!
//! `spool-beat REDIS_URL SPOOL_DIR OUT_DIR INSTANCE_ID`: a tick every 200 ms (jittered)
//! on 2 worker slots, each tick's report as a JSON line on stdout, until SIGTERM or
//! SIGINT; then running ticks get 5 s to finish and the process exits 0 (1 when it
//! cannot start, 2 on bad arguments).

use std::{io::Write, process::ExitCode, sync::Arc, time::Duration};

use adapter_redis::{RedisConfig, RedisStore};
use drain_core::{Switch, ports::NoopObserver, tick::TickConfig};
use drain_examples::spool::{SpoolSource, SpoolWriter};
use drain_runtime::{Beat, BeatConfig, ClaimGate, OnReport, Ticks, TokioClock};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, spool, out, me] = &args[..] else {
        eprintln!("usage: spool-beat REDIS_URL SPOOL_DIR OUT_DIR INSTANCE_ID");
        return ExitCode::from(2);
    };
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let result = beat(url, spool, out, me).await;
    result.as_ref().map_or_else(|why| eprintln!("spool-beat: {why}"), |()| eprintln!("spool-beat: stopped"));
    ExitCode::from(u8::from(result.is_err()))
}

async fn beat(url: &str, spool: &str, out: &str, me: &str) -> Result<(), String> {
    let store = Arc::new(RedisStore::connect(RedisConfig::new(url)).await.map_err(|e| format!("no Redis: {e}"))?);
    let source = SpoolSource::new(spool, Duration::from_secs(60)).map_err(|e| format!("{spool}: {e}"))?;
    let target = SpoolWriter::new(out).map_err(|e| format!("{out}: {e}"))?;
    // Single-flight on; the per-message claim is on by default. An empty receive
    // waits 100 ms, which ends the tick.
    let tick = TickConfig::new("spool").singleflight(Switch::On).receive(32, Duration::from_millis(100));
    let tick = tick.lease_ttl(Duration::from_secs(10));
    let clock = Arc::new(TokioClock::new());
    let (source, target, observer) = (Arc::new(source), Arc::new(target), Arc::new(NoopObserver));
    let (leases, claims) = (Some(store.clone() as _), Some(store as _));
    let ticks = Arc::new(Ticks { tick, instance: me.to_owned(), leases, claims, source, target, clock, observer });
    let config = BeatConfig::every(Duration::from_millis(200), 2).grace(Duration::from_secs(5));
    let print: OnReport =
        Arc::new(|report| drop(writeln!(std::io::stdout(), "{}", serde_json::to_string(report).unwrap_or_default())));
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("cannot wait for SIGTERM: {e}"))?;
    let stop = async {
        tokio::select! { _ = term.recv() => {}, _ = tokio::signal::ctrl_c() => {} }
    };
    Beat::new(ticks.clone(), Arc::new(ClaimGate::new(ticks)), config).on_report(print).run(stop).await;
    Ok(())
}

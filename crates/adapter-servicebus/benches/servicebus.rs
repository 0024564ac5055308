//! Messages drained per second from test-servicebus (Service Bus, in this process):
//!
//! * `servicebus_bare_fe2o3` — a plain fe2o3-amqp consume-and-accept loop (SASL
//!   PLAIN with the policy key, credit windows of 64): the floor of what the broker
//!   allows through this client;
//! * `servicebus_source_c1`, `servicebus_source_c8` — [`AmqpSource`] as shipped,
//!   with `prefetch: 64`: `receive(64)` then `complete` each delivery, 1 or 8
//!   completes in flight; the adapter's overhead is measured against the bare loop;
//! * `servicebus_tick_c1`, `servicebus_tick` — drain-core's `run_tick` over the
//!   adapter (claims in memory, each message resubmitted to a second queue): one
//!   submit at a time (a fixed window of 1), and at `TickConfig::new`'s defaults
//!   (the adaptive window), whose goal is half the bare loop's rate or more.
//!
//! Source and target are queues of a test-servicebus broker reached through its
//! emulator connection string (CBS token, peek-lock with lock tokens, Service Bus
//! outcomes); the broker shares the two cores with the drain side. The RabbitMQ
//! figures, with the bare forward loop, are `tests/benches/amqp.rs` (`amqp.json`).
//!
//! Each mode is measured in interleaved rounds and the median round is reported;
//! the overhead is the median of the per-round ratios (the machine is shared; single
//! rounds are noisy). `ci` length (the default): 3 rounds of 1,000 messages;
//! `--full`: 7 rounds of 10,000. Writes `<target>/bench/servicebus.json` and prints
//! a table.

#[path = "support/source.rs"]
mod source;

use std::sync::Arc;
use std::time::{Duration, Instant};

use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use bench_support::stats::{median, ratios, rounded, spread};
use drain_core::LeaseToken;
use drain_core::memory::MemoryStore;
use drain_core::ports::{Clock, NoopObserver};
use drain_core::testkit::TestRng;
use drain_core::tick::{TickConfig, TickPorts, run_tick};
use drain_runtime::TokioClock;
use fe2o3_amqp::link::CreditMode;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Session};
use serde_json::{Map, json};
use test_servicebus::{Broker, BrokerConfig, QueueConfig};

const BATCH: usize = 64;
/// A round (fill plus drain) takes a few seconds; one that takes this long is stuck.
const ROUND_LIMIT: Duration = Duration::from_secs(60);
const MODES: [&str; 5] = ["bare_fe2o3", "source_c1", "source_c8", "tick_c1", "tick"];
/// The policy key of the bench's test-servicebus.
const SB_KEY: &str = test_servicebus::DEFAULT_KEY;

/// `(length name, messages per round, rounds)`: `ci` unless `--full`.
fn length() -> (&'static str, usize, usize) {
    if bench_support::full() { ("full", 10_000, 7) } else { ("ci", 1_000, 3) }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    let json = rt.block_on(run());
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    bench_support::write(env!("CARGO_TARGET_TMPDIR"), "servicebus", &json);
    // A stalled round leaves its connection task behind; do not wait for it.
    std::process::exit(0);
}

async fn run() -> serde_json::Value {
    let (length, n, rounds) = length();
    let broker =
        Broker::start(BrokerConfig { key: SB_KEY.to_owned(), ..BrokerConfig::default() }).expect("test-servicebus");
    let mut sb_rates: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let started = Instant::now();
    // `cargo bench --bench servicebus -- tick bare_fe2o3` runs only those modes.
    let only = bench_support::only();
    for round in 0..rounds {
        for (i, mode) in MODES.iter().enumerate().filter(|(_, m)| only.is_empty() || only.iter().any(|o| o == *m)) {
            // Fresh queues each round, filled directly.
            let (src, dst) = (format!("src-{round}-{mode}"), format!("dst-{round}-{mode}"));
            for q in [&src, &dst] {
                broker.create_queue(q, QueueConfig::default()).expect("queue");
            }
            for i in 0..n {
                let id = format!("b-{i}");
                broker.send(&src, format!("body of {id}").as_bytes(), Some(&id));
            }
            let sb = |q: &str| sb_endpoint(&broker, q);
            let took = tokio::time::timeout(ROUND_LIMIT, async {
                match *mode {
                    "bare_fe2o3" => sb_bare(&broker, &src, n).await,
                    "source_c1" => source::drain(sb(&src), n, BATCH, 1).await,
                    "source_c8" => source::drain(sb(&src), n, BATCH, 8).await,
                    "tick_c1" => tick((sb(&src), sb(&dst)), n, Some(1)).await,
                    _ => tick((sb(&src), sb(&dst)), n, None).await,
                }
            })
            .await
            .unwrap_or_else(|_| panic!("servicebus {mode}, round {}: no progress in {ROUND_LIMIT:?}", round + 1));
            sb_rates[i].push(n as f64 / took.as_secs_f64());
        }
    }
    drop(broker);

    // The overhead is the median of each round's own ratio: the adapter's rate
    // against the bare loop's in the same round, so that the host's drift between
    // rounds cancels out.
    let overhead = |rates: &[Vec<f64>], i: usize| {
        let each: Vec<f64> = ratios(&rates[i], &rates[0]).iter().map(|r| 1.0 - r).collect();
        median(&each).map(|r| rounded(r * 100.0, 1))
    };
    println!("{:<24} {:>10}", "mode", "msg/s");
    let mut msg_per_sec = Map::new();
    for (mode, rounds) in MODES.iter().zip(sb_rates.iter()) {
        let Some(rate) = median(rounds) else { continue };
        let shown: Vec<String> = rounds.iter().map(|r| format!("{r:.0}")).collect();
        println!("{:<24} {rate:>10.0}   rounds: {}", format!("servicebus_{mode}"), shown.join(" "));
        msg_per_sec.insert(format!("servicebus_{mode}"), json!(rate.round() as u64));
    }
    let (sb1, sb8) = (overhead(&sb_rates, 1), overhead(&sb_rates, 2));
    let pct = |o: Option<f64>| o.map_or_else(|| "null".to_owned(), |v| format!("{v:.1}"));
    println!("adapter overhead vs bare loop: Service Bus c1 {} %, c8 {} %", pct(sb1), pct(sb8));
    let mut vs_bare = Map::new();
    for (i, mode) in MODES.iter().enumerate().skip(3) {
        let Some(s) = spread(&ratios(&sb_rates[i], &sb_rates[0])) else { continue };
        let (m, lo, hi) = (s.median, s.min, s.max);
        println!(
            "servicebus_{mode} / bare_fe2o3: {m:.3}x (spread {:.1} %, range {lo:.3}-{hi:.3})",
            s.iqr_over_median * 100.0
        );
        let entry = json!({"median": rounded(m, 3), "iqr_over_median": rounded(s.iqr_over_median, 3), "min": rounded(lo, 3), "max": rounded(hi, 3)});
        vs_bare.insert(format!("servicebus_{mode}_vs_servicebus_bare_fe2o3"), entry);
    }
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    json!({
        "ratios": vs_bare,
        "bench": "servicebus",
        "length": length,
        "build": build,
        "messages_per_round": n,
        "batch": BATCH,
        "rounds": rounds,
        "msg_per_sec": msg_per_sec,
        "overhead_pct": {"servicebus_source_c1": sb1, "servicebus_source_c8": sb8},
        "seconds": rounded(started.elapsed().as_secs_f64(), 1),
    })
}

/// The emulator connection string of `queue` on `broker`, parsed.
fn sb_endpoint(broker: &Broker, queue: &str) -> Endpoint {
    Endpoint::parse(&broker.entity_connection_string(queue)).expect("connection string").endpoint
}

/// The plain loop on test-servicebus: SASL PLAIN with the policy key (no CBS), a
/// receiver in settle mode first, credit in windows of 64, `recv` + `accept`.
async fn sb_bare(broker: &Broker, queue: &str, n: usize) -> Duration {
    let tcp = tokio::net::TcpStream::connect(broker.addr()).await.expect("tcp");
    tcp.set_nodelay(true).expect("nodelay");
    let mut conn = Connection::builder()
        .container_id(format!("{queue}-bare"))
        .hostname("127.0.0.1")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
            username: test_servicebus::DEFAULT_KEY_NAME.to_owned(),
            password: SB_KEY.to_owned(),
        })
        .open_with_stream(tcp)
        .await
        .expect("connect");
    let mut session = Session::begin(&mut conn).await.expect("session");
    let mut receiver = Receiver::builder()
        .name(format!("{queue}-bare-receiver"))
        .source(queue.to_owned())
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .expect("attach");
    let start = Instant::now();
    for _ in 0..n {
        if receiver.credit() == 0 {
            receiver.set_credit(BATCH as u32).await.expect("credit");
        }
        let d = receiver.recv::<Body<Value>>().await.expect("recv");
        receiver.accept(&d).await.expect("accept");
    }
    let took = start.elapsed();
    teardown(receiver.detach(), session, conn).await;
    took
}

/// Detach, end the session and close the connection, each bounded: RabbitMQ 3.10
/// sometimes never answers a session `end`, and fe2o3 then waits for it forever in
/// a busy loop (the adapter bounds the same steps; see `connect::SESSION_END_LIMIT`).
async fn teardown<F: Future>(
    detach: F,
    mut session: fe2o3_amqp::session::SessionHandle<()>,
    mut conn: fe2o3_amqp::connection::ConnectionHandle<()>,
) {
    const STEP: Duration = Duration::from_secs(2);
    let _ = tokio::time::timeout(STEP, detach).await;
    let _ = tokio::time::timeout(STEP, session.end()).await;
    let _ = tokio::time::timeout(STEP, conn.close()).await;
}

/// drain-core's tick: claims in memory, resubmit to the second endpoint, complete;
/// `concurrency` submits at once, or (`None`) the defaults, whose source keeps the
/// window's maximum of credit open as `drain run`'s does.
async fn tick((from, to): (Endpoint, Endpoint), n: usize, concurrency: Option<usize>) -> Duration {
    let queue = from.entity.clone().unwrap_or_default();
    let queue = queue.as_str();
    let mut cfg = TickConfig::new(queue);
    let mut prefetch = TickConfig::MAX_IN_FLIGHT;
    if let Some(c) = concurrency {
        cfg = cfg.concurrency(c);
        (cfg.batch, prefetch) = (BATCH, BATCH);
    }
    let options = SourceOptions { prefetch: prefetch as u32, ..SourceOptions::default() };
    let source = AmqpSource::connect(from, options).await.expect("source");
    let submitter = AmqpSubmitter::connect(to, SubmitterOptions::default()).await.expect("target");
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    cfg.max_wait = Duration::from_millis(300);
    let ports = TickPorts::new(&source, &submitter, &*clock, &NoopObserver).leases(&store).claims(&store);
    let token = LeaseToken::generate("bench", &mut TestRng::new(concurrency.unwrap_or_default() as u64));
    let start = Instant::now();
    let report = run_tick(&cfg, &ports, &token, &Default::default()).await;
    // The last, empty receive waits max_wait: not part of the drain.
    let took = start.elapsed().saturating_sub(cfg.max_wait);
    assert_eq!(report.stats.map(|s| s.submitted), Some(n as u64), "{:?}", report.error);
    source.close().await.expect("close");
    submitter.close().await.expect("close");
    took
}

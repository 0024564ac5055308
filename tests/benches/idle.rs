//! What `drain run` costs while it has nothing to do: CPU seconds and resident memory
//! of the process at the start and the end of an idle stretch, for
//!
//! * `embedded` — the embedded default (no URL set): the in-memory store and the demo
//!   queue, whose producer adds 20 messages every 5 s (so "idle" is the default
//!   beat with a trickle, as a first run on a fresh machine shows it);
//! * `redis_rabbitmq` — a private redis-server for leases and claims (single-flight
//!   and the atomic claim on) and the test broker's RabbitMQ (`DRAIN_TEST_AMQP_URL`,
//!   default 127.0.0.1:5672) as source and target, on two empty queues of its own.
//!
//! Both run at once, at the default settings otherwise (a beat every 10 s, receives
//! waiting up to 1 s, `/metrics` served on a free loopback port, `DRAIN_LOG=info`),
//! after a warm-up of 3 s from "beat started". CPU is user + system time of the
//! process from `/proc/<pid>/stat`, resident memory `VmRSS` from
//! `/proc/<pid>/status`, sampled every second. The binary is the debug build the
//! tests use (see `drain_e2e::drain_bin`): an upper bound on a release build's cost.
//! `ci` length (the default): 10 s idle; `--full`: 60 s. The goal is under 0.5 s of
//! CPU per idle minute with resident memory flat. Writes `<target>/bench/idle.json`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use drain_e2e::rabbit::{Broker, Queue};
use drain_e2e::{RedisServer, Running, drain, free_port};

const WARMUP: Duration = Duration::from_secs(3);

/// One process's samples.
struct Sampled {
    name: &'static str,
    cpu_start_s: f64,
    cpu_end_s: f64,
    rss_start_kib: u64,
    rss_end_kib: u64,
    rss_max_kib: u64,
}

/// User + system CPU seconds and `VmRSS` (KiB) of `pid`.
fn sample(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (ticks as f64 / clock_ticks(), rss)
}

/// `getconf CLK_TCK` (100 on Linux almost everywhere).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn start(name: &str, configure: impl FnOnce(&mut Command)) -> Running {
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_LOG", "info")
        .env("DRAIN_LOG_FORMAT", "text")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{}", free_port()));
    configure(&mut cmd);
    let mut p = Running::spawn(cmd);
    assert!(p.wait_for("beat started", Duration::from_secs(60)), "{name} did not start: {}", p.log());
    p
}

fn main() {
    let (idle, length) = if std::env::args().any(|a| a == "--full") {
        (Duration::from_secs(60), "full")
    } else {
        (Duration::from_secs(10), "ci")
    };
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../bench/idle.json");
    let json = match (test_servers::redis_installed(), Broker::try_shared("idle bench")) {
        (true, Ok(broker)) => measure(&RedisServer::start(), &broker, idle, length),
        _ => "{\"bench\":\"idle\",\"skipped\":\"needs redis-server and RabbitMQ; run `bash .ci/setup-services.sh`\"}\n"
            .to_owned(),
    };
    std::fs::create_dir_all(out.parent().expect("dir")).expect("create target/bench");
    std::fs::write(&out, json).expect("write idle.json");
    println!("wrote {}", out.display());
}

fn measure(redis: &RedisServer, broker: &Broker, idle: Duration, length: &str) -> String {
    let (source, target) = (Queue::declare(broker, "idle-src"), Queue::declare(broker, "idle-dst"));
    let mut procs = [
        ("embedded", start("embedded", |_| {})),
        (
            "redis_rabbitmq",
            start("redis_rabbitmq", |c| {
                c.env("DRAIN_REDIS_URL", redis.url())
                    .env("DRAIN_SOURCE_URL", broker.url(&source.name))
                    .env("DRAIN_TARGET_URL", broker.url(&target.name))
                    .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
                    .env("SERVICEBUS_ATOMIC_CLAIM", "on");
            }),
        ),
    ];
    std::thread::sleep(WARMUP);
    let first: Vec<(f64, u64)> = procs.iter().map(|(_, p)| sample(p.pid())).collect();
    let mut rss_max: Vec<u64> = first.iter().map(|(_, r)| *r).collect();
    let began = Instant::now();
    while began.elapsed() < idle {
        std::thread::sleep(Duration::from_secs(1).min(idle.saturating_sub(began.elapsed())));
        for (i, (_, p)) in procs.iter().enumerate() {
            rss_max[i] = rss_max[i].max(sample(p.pid()).1);
        }
    }
    let idle_s = began.elapsed().as_secs_f64();
    let mut results = Vec::new();
    for (i, (name, p)) in procs.iter_mut().enumerate() {
        let (cpu_end_s, rss_end_kib) = sample(p.pid());
        results.push(Sampled {
            name,
            cpu_start_s: first[i].0,
            cpu_end_s,
            rss_start_kib: first[i].1,
            rss_end_kib,
            rss_max_kib: rss_max[i],
        });
        p.terminate();
        let _ = p.wait_exit(Duration::from_secs(20));
    }

    println!("{:<16} {:>10} {:>14} {:>12} {:>12}", "config", "cpu s", "cpu s/min", "rss KiB", "rss end KiB");
    let mut json = format!(
        "{{\"bench\":\"idle\",\"length\":\"{length}\",\"build\":\"debug\",\"idle_s\":{idle_s:.1},\"warmup_s\":{},\"goal\":\"under 0.5 s CPU per idle minute, RSS flat\",\"configs\":{{",
        WARMUP.as_secs()
    );
    for (i, r) in results.iter().enumerate() {
        let cpu = r.cpu_end_s - r.cpu_start_s;
        let per_min = cpu / idle_s * 60.0;
        println!("{:<16} {cpu:>10.2} {per_min:>14.3} {:>12} {:>12}", r.name, r.rss_start_kib, r.rss_end_kib);
        let sep = if i > 0 { "," } else { "" };
        let _ = write!(
            json,
            "{sep}\"{}\":{{\"cpu_s_at_start\":{:.2},\"cpu_s_at_end\":{:.2},\"cpu_s_idle\":{cpu:.2},\"cpu_s_per_idle_minute\":{per_min:.3},\"rss_kib_at_start\":{},\"rss_kib_at_end\":{},\"rss_kib_max\":{}}}",
            r.name, r.cpu_start_s, r.cpu_end_s, r.rss_start_kib, r.rss_end_kib, r.rss_max_kib
        );
    }
    json.push_str("}}\n");
    json
}

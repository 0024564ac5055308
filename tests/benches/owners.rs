//! Owner drains on real stores beside the simulator: four `drain owners` processes
//! drain 200 owner backlogs holding 20,000 items on a private redis-server and on a
//! private PostgreSQL, under each admission policy of [`POLICIES`], in interleaved
//! rounds; the simulator runs the same workload (`drain simulate --scenario owners`,
//! one seed per round) under the same policies and the oracle. Every real run checks
//! that each item was processed exactly once. Per store and policy: wasted turns per
//! useful turn (claim-busy and empty turns per turn that worked items), item latency
//! p50 and p99 (from the fleet's first pass to the record of the item's batch), drain
//! time, each as the median round with its spread (interquartile range over the
//! median, min, max).
//!
//! Writes `<target>/bench/owners.json` and prints a table. The `drain` binary is the
//! debug build the tests use (see `drain_e2e::drain_bin`), so real times are debug-build
//! times; the simulator's are virtual (a 1 ms round trip, no process start).

use bench_support::order::round_order;
use bench_support::stats::{Spread, spread};
use drain_e2e::owners::{FLEET, OwnerRun, Store, run_owners};
use drain_e2e::postgres::{PostgresServer, postgres};
use drain_e2e::{RedisServer, drain, output};
use serde_json::{Map, Value, json};

/// One admission policy: its name in owners.json, the settings of the `drain owners`
/// processes, the simulator's policy key for it, and whether the `ci` length runs it
/// (`--full` runs every one).
struct Policy {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
    simulated: &'static str,
    ci: bool,
}

const CLAIM_AWARE_OFF: (&str, &str) = ("PROJECTION_DRAIN_CLAIM_AWARE", "off");
const CLAIM_AWARE_ON: (&str, &str) = ("PROJECTION_DRAIN_CLAIM_AWARE", "on");
const WAKE_OFF: (&str, &str) = ("PROJECTION_DRAIN_RELEASE_WAKE", "off");
const WAKE_ON: (&str, &str) = ("PROJECTION_DRAIN_RELEASE_WAKE", "on");
/// Drain stamps off (the switch defaults to on): the policies before them, as they ran
/// before the marks.
const SKIP_SERVED_OFF: (&str, &str) = ("PROJECTION_DRAIN_SKIP_SERVED", "off");
const SKIP_SERVED_ON: (&str, &str) = ("PROJECTION_DRAIN_SKIP_SERVED", "on");

/// The policies compared. A new admission policy is one more line: its switch on,
/// the simulator's key for it, `ci: true` to show it beside the wake-up in CI.
const POLICIES: &[Policy] = &[
    Policy { name: "off", env: &[CLAIM_AWARE_OFF, WAKE_OFF, SKIP_SERVED_OFF], simulated: "legacy", ci: false },
    Policy {
        name: "claim_aware",
        env: &[CLAIM_AWARE_ON, WAKE_OFF, SKIP_SERVED_OFF],
        simulated: "claim_aware",
        ci: false,
    },
    Policy {
        name: "claim_aware_wake",
        env: &[CLAIM_AWARE_ON, WAKE_ON, SKIP_SERVED_OFF],
        simulated: "claim_aware_wake",
        ci: true,
    },
    Policy { name: "skip_served", env: &[CLAIM_AWARE_ON, WAKE_ON, SKIP_SERVED_ON], simulated: "skip_served", ci: true },
];

/// Rounds: 7 at `--full`, 3 at the `ci` length (each real run takes a few seconds).
fn rounds() -> (usize, &'static str) {
    if bench_support::full() { (7, "full") } else { (3, "ci") }
}

/// The figures of one policy, one entry per round.
#[derive(Default)]
struct Rounds {
    wasted_per_useful: Vec<f64>,
    p50_ms: Vec<f64>,
    p99_ms: Vec<f64>,
    drain_ms: Vec<f64>,
    claim_busy: Vec<f64>,
    empty: Vec<f64>,
    useful: Vec<f64>,
    release_wakes: Vec<f64>,
    skipped_served: Vec<f64>,
}

impl Rounds {
    fn real(&mut self, r: &OwnerRun) {
        self.wasted_per_useful.push(r.wasted_per_useful());
        self.p50_ms.push(r.latency_ms(0.5) as f64);
        self.p99_ms.push(r.latency_ms(0.99) as f64);
        self.drain_ms.push(r.fleet_ms as f64);
        self.claim_busy.push(r.claim_busy as f64);
        self.empty.push(r.done as f64);
        self.useful.push(r.productive as f64);
        self.release_wakes.push(r.release_wakes as f64);
        self.skipped_served.push(r.skipped_served as f64);
    }

    fn simulated(&mut self, f: &Value) {
        let n = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in the simulator's figures: {f}"));
        self.wasted_per_useful.push(n("wasted_turns_per_useful"));
        self.p50_ms.push(n("owner_latency_p50_ms"));
        self.p99_ms.push(n("owner_latency_p99_ms"));
        self.drain_ms.push(n("owner_latency_max_ms"));
        self.claim_busy.push(n("claim_busy_turns"));
        self.empty.push(n("empty_turns"));
        self.useful.push(n("useful_turns"));
        self.release_wakes.push(n("release_wakes_effective"));
        self.skipped_served.push(n("requests_skipped_as_served"));
    }

    fn json(&self) -> Value {
        let s = |v: &[f64]| {
            let Spread { median, iqr_over_median, min, max } = spread(v).unwrap_or_default();
            let r = bench_support::stats::rounded;
            json!({ "median": r(median, 3), "iqr_over_median": r(iqr_over_median, 3), "min": r(min, 3), "max": r(max, 3) })
        };
        json!({
            "wasted_per_useful": s(&self.wasted_per_useful),
            "latency_p50_ms": s(&self.p50_ms),
            "latency_p99_ms": s(&self.p99_ms),
            "drain_ms": s(&self.drain_ms),
            "claim_busy_turns": s(&self.claim_busy),
            "empty_turns": s(&self.empty),
            "useful_turns": s(&self.useful),
            "release_wakes": s(&self.release_wakes),
            "skipped_served": s(&self.skipped_served),
        })
    }
}

/// The simulator's figures for the bench's workload, seed `seed`, under `policies`
/// and the oracle: the `policies` object of `drain simulate --json`.
fn simulate(seed: usize, policies: &[&Policy]) -> Value {
    let mut cmd = drain();
    cmd.args(["simulate", "--scenario", "owners", "--json", "--seed", &seed.to_string()]).args([
        "--instances",
        &FLEET.processes.to_string(),
        "--owners",
        &FLEET.owners.to_string(),
    ]);
    for p in policies {
        cmd.args(["--policy", p.simulated]);
    }
    cmd.args(["--policy", "oracle"]);
    let out = output(cmd, drain_e2e::owners::LIMIT);
    assert!(out.status.success(), "drain simulate: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["items"], FLEET.items, "the simulator's owners scenario is the bench's workload");
    report["policies"].clone()
}

/// Empty drain's tables for the next run, creating its schema the first time (one
/// server serves every run: starting one takes longer than a run).
fn reset(pg: &PostgresServer) {
    let schema = adapter_postgres::schema_sql("drain").expect("schema sql");
    pg.sql(&schema).unwrap_or_else(|e| panic!("drain's schema: {e}"));
    let tables = "drain.backlog_items, drain.backlog_processed, drain.waiters, drain.leases, drain.drain_marks";
    pg.sql(&format!("TRUNCATE {tables}")).unwrap_or_else(|e| panic!("reset: {e}"));
}

fn main() {
    // Names on the command line pick policies (`-- off claim_aware_wake`); otherwise
    // the length decides.
    let named = bench_support::only();
    let policies: Vec<&Policy> = POLICIES
        .iter()
        .filter(|p| if named.is_empty() { p.ci || bench_support::full() } else { named.iter().any(|n| n == p.name) })
        .collect();
    let known: Vec<&str> = POLICIES.iter().map(|p| p.name).collect();
    assert!(!policies.is_empty(), "no policy named {named:?}; the policies: {known:?}");
    let (rounds, length) = rounds();
    let redis_installed = test_servers::redis_installed();
    let pg = test_servers::postgres_installed().then(postgres);
    let url = pg.as_ref().map(PostgresServer::url).unwrap_or_default();
    let mut stores: Vec<(&str, Vec<Rounds>)> = Vec::new();
    let mut skipped = Map::new();
    for (name, present, missing) in [
        ("redis", redis_installed, "redis-server is not installed"),
        ("postgres", pg.is_some(), "PostgreSQL (initdb, postgres) is not installed"),
    ] {
        if present {
            stores.push((name, policies.iter().map(|_| Rounds::default()).collect()));
        } else {
            skipped.insert(name.to_owned(), json!(missing));
        }
    }
    let mut simulated: Vec<Rounds> = (0..=policies.len()).map(|_| Rounds::default()).collect();
    let mut wall = [std::time::Duration::ZERO; 3];
    for round in 0..rounds {
        for i in round_order(round, policies.len()) {
            let env = policies[i].env;
            for (k, (store, by_policy)) in stores.iter_mut().enumerate() {
                let started = std::time::Instant::now();
                let run = if *store == "redis" {
                    let server = RedisServer::start();
                    run_owners(&Store::Redis(&server), FLEET, env)
                } else {
                    let pg = pg.as_ref().expect("a private PostgreSQL");
                    reset(pg);
                    run_owners(&Store::Postgres(pg, &url), FLEET, env)
                };
                by_policy[i].real(&run);
                wall[k] += started.elapsed();
            }
        }
        let started = std::time::Instant::now();
        let figures = simulate(round + 1, &policies);
        wall[2] += started.elapsed();
        let keys = policies.iter().map(|p| p.simulated).chain(["oracle"]);
        for (k, rounds) in keys.zip(&mut simulated) {
            rounds.simulated(&figures[k]);
        }
    }

    let names = || policies.iter().map(|p| p.name).chain(["oracle"]);
    let mut out = Map::new();
    let mut wall_s = Map::new();
    let names_of_walls = stores.iter().map(|(s, _)| *s).chain(["simulated"]);
    for (k, store) in names_of_walls.enumerate() {
        let k = if store == "simulated" { 2 } else { k };
        wall_s.insert(store.to_owned(), json!(bench_support::stats::rounded(wall[k].as_secs_f64(), 1)));
    }
    println!("wall time per store (s): {}", Value::Object(wall_s.clone()));
    println!(
        "{:<10} {:<18} {:>14} {:>8} {:>8} {:>9}",
        "store", "policy", "wasted/useful", "p50 ms", "p99 ms", "drain ms"
    );
    let all = stores.iter().map(|(s, r)| (*s, r.as_slice())).chain([("simulated", simulated.as_slice())]);
    for (store, by_policy) in all {
        let mut m = Map::new();
        for (name, r) in names().zip(by_policy) {
            let j = r.json();
            let med = |k: &str| j[k]["median"].as_f64().unwrap_or(0.0);
            println!(
                "{store:<10} {name:<18} {:>14.3} {:>8.0} {:>8.0} {:>9.0}",
                med("wasted_per_useful"),
                med("latency_p50_ms"),
                med("latency_p99_ms"),
                med("drain_ms")
            );
            m.insert(name.to_owned(), j);
        }
        out.insert(store.to_owned(), Value::Object(m));
    }
    let w = FLEET;
    let mut report = json!({
        "bench": "owners",
        "length": length,
        "build": "debug",
        "processes": w.processes,
        "owners": w.owners,
        "items": w.items,
        "rounds": rounds,
        "workload": "drain owners --batch 20 --item-delay-us 2000 --pass-ms 100, 64 turn slots a process; \
                     simulator: drain simulate --scenario owners, seeds 1..rounds",
        "statistic": "median round, with its spread: interquartile range over the median, min, max",
        "latency": "per item, from the fleet's first pass to the record of its batch",
        "drain_ms": "real: spawn of the processes to the last item recorded; simulated: the last item",
        "stores": out,
        "wall_s": wall_s,
    });
    if !skipped.is_empty() {
        report["skipped_stores"] = Value::Object(skipped);
    }
    write(&report);
}

fn write(json: &Value) {
    // `<target>/tmp/../bench`, known at compile time (see xtask/src/bench.rs).
    bench_support::write(env!("CARGO_TARGET_TMPDIR"), "owners", json);
}

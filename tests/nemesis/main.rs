//! `drain-nemesis [--minutes N] [--out FILE]`: the fault run of `tests/nemesis.rs` for
//! N minutes on Redis, then N on PostgreSQL (cycles of every fault), then its negative
//! control once, then N minutes of the fleet run of `drain` processes (`fleet.rs`) on
//! Redis and N on PostgreSQL, then the owner drains once on each store (`owners.rs`);
//! prints the results tables and writes the verdicts as JSON. Exit 1 when drain's run
//! breaks a rule or the checker misses the control's. `cargo xtask nemesis --minutes N`
//! builds and runs it.

mod broken;
mod check;
mod fleet;
mod fleet_check;
mod harness;
#[path = "../history/check.rs"]
mod order;
mod owners;

use std::process::ExitCode;
use std::time::Duration;

use check::{Fault, Violation, check};
use harness::{Store, run};

/// One cycle of every fault takes about this long (each fault, then a settle).
const CYCLE: Duration = Duration::from_secs(20);
/// One cycle of the fleet run: its freeze and partition last past its 10 s TTL.
const FLEET_CYCLE: Duration = Duration::from_secs(70);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut minutes = 5u64;
    let mut out = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match (arg.as_str(), it.next()) {
            ("--minutes", Some(n)) if n.parse::<u64>().is_ok_and(|n| n >= 1) => minutes = n.parse().unwrap_or(5),
            ("--out", Some(path)) => out = Some(path.clone()),
            _ => {
                eprintln!("usage: drain-nemesis [--minutes N (at least 1)] [--out FILE]");
                return ExitCode::from(2);
            }
        }
    }
    let cycles = (minutes * 60 / CYCLE.as_secs()).max(1);
    let faults: Vec<Fault> = (0..cycles).flat_map(|_| Fault::ALL).collect();
    eprintln!("drain-nemesis: {cycles} cycle(s) of {} faults on each store, then the control", Fault::ALL.len());
    let mut ok = true;
    let mut verdicts = Vec::new();
    for (store, name) in [(Store::Drain, "redis"), (Store::Postgres, "postgres")] {
        let history = run(store, &faults);
        let verdict = check(&history);
        println!(
            "drain on {name}, {:.0} s, {} turns, {} writes, {} refused as stale:\n{}",
            history.took.as_secs_f64(),
            verdict.turns,
            verdict.writes,
            verdict.refused,
            verdict.table()
        );
        ok &= clean(&verdict.violations);
        println!("unchecked resource: {} stale writes accepted (the checker sees them)\n", verdict.unchecked);
        ok &= verdict.unchecked > 0;
        verdicts.push(verdict.json(name));
    }
    let control = check(&run(Store::CounterFences, &[Fault::Failover, Fault::EmptyRestart]));
    println!("control (SET NX + INCR fences on Redis):\n{}rules broken: {:?}", control.table(), control.rules());
    ok &= control.rules() == ["fence.unique", "writes.resume"];
    let fleet_cycles = (minutes * 60 / FLEET_CYCLE.as_secs()).max(1);
    let fleet_faults: Vec<Fault> = (0..fleet_cycles).flat_map(|_| Fault::ALL).collect();
    let mut fleets = serde_json::Map::new();
    for (name, store) in [("redis", Store::Drain), ("postgres", Store::Postgres)] {
        let history = fleet::run(store, &fleet_faults);
        let fleet = fleet_check::check(&history);
        println!(
            "a fleet of {} drain processes on RabbitMQ and {name}, {:.0} s, {} ticks ({} lost their lease), {} messages fed, {} arrived twice ({} counted as possible duplicates), {} refused as stale, {} unfenced (ticks that failed open):\n{}",
            fleet::PROCESSES,
            history.took.as_secs_f64(),
            fleet.ticks,
            fleet.lost_leases,
            fleet.fed,
            fleet.twice,
            fleet.counted,
            fleet.refused,
            fleet.unfenced,
            fleet.table()
        );
        if !clean(&fleet.violations) {
            println!("fleet rules broken: {:?}", fleet.rules());
            ok = false;
        }
        fleets.insert(name.to_owned(), fleet.json());
    }
    // Owner drains: their backlogs last about half a minute, so one schedule a run.
    let mut owner_runs = serde_json::Map::new();
    for (name, store) in [("redis", Store::Drain), ("postgres", Store::Postgres)] {
        let owners = owners::run(store, &owners::FAULTS);
        println!(
            "{} drain owners processes on {name}, {:.0} s, through {:?}: {} items recorded, {} twice",
            owners::PROCESSES,
            owners.took.as_secs_f64(),
            owners.faults,
            owners.recorded,
            owners.twice
        );
        ok &= clean(&owners.violations);
        owner_runs.insert(
            name.to_owned(),
            serde_json::json!({
                "faults": owners.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
                "recorded": owners.recorded,
                "twice": owners.twice,
                "took_s": owners.took.as_secs_f64(),
                "violations": owners.violations.iter().map(|v| serde_json::json!({"rule": v.rule, "what": v.what})).collect::<Vec<_>>(),
            }),
        );
    }
    if let Some(path) = out {
        let json = serde_json::json!({
            "drain": verdicts,
            "control": control.json("counter-fences"),
            "fleet": fleets,
            "owners": owner_runs,
        });
        if let Err(e) = std::fs::write(&path, format!("{json:#}\n")) {
            eprintln!("drain-nemesis: cannot write {path}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Print each violation; whether there were none.
fn clean(violations: &[Violation]) -> bool {
    for v in violations {
        println!("VIOLATION {}: {}", v.rule, v.what);
    }
    violations.is_empty()
}

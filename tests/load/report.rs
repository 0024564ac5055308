//! The load run's report: its shape, rates, the JSON file and the human summary.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::checks::Input;
use crate::meter::Meter;
use crate::parts::Counting;

/// Counts at the end of the measured period (before the wind-down), for rates.
pub(crate) struct Snapshot {
    pub(crate) seconds: f64,
    pub(crate) tick_calls: BTreeMap<&'static str, u64>,
    pub(crate) owner_calls: BTreeMap<&'static str, u64>,
    pub(crate) ticks: BTreeMap<&'static str, u64>,
    pub(crate) messages: u64,
    pub(crate) turns: BTreeMap<&'static str, u64>,
    pub(crate) owner_keys: BTreeMap<&'static str, u64>,
}

impl Snapshot {
    pub(crate) fn take(tm: &Meter, om: &Meter, to: &Counting, oo: &Counting, elapsed: Duration) -> Self {
        Snapshot {
            seconds: elapsed.as_secs_f64(),
            tick_calls: tm.calls(),
            owner_calls: om.calls(),
            ticks: to.of("tick"),
            messages: to.get("message", "submitted"),
            turns: oo.of("turn"),
            owner_keys: om.keys(),
        }
    }
}

fn rates(counts: &BTreeMap<&'static str, u64>, seconds: f64) -> Value {
    let per_s = |n: u64| ((n as f64 / seconds) * 10.0).round() / 10.0;
    counts.iter().map(|(k, n)| ((*k).to_owned(), json!({ "total": n, "per_s": per_s(*n) }))).collect()
}

/// The shape of the run.
pub(crate) fn workload(input: &Input<'_>) -> Value {
    let (t, o) = (input.tick_shape, input.owner_shape);
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    json!({
        "queues": input.args.queues, "instances": input.args.instances, "beat_ms": ms(t.beat),
        "messages_per_s": input.args.queues as u64 * t.per_push * 1000 / ms(t.produce_every).max(1),
        "lease_ttl_ms": ms(t.tick.lease_ttl), "batch": t.tick.batch, "max_batches": t.tick.max_batches,
        "owners": input.args.owners, "schedulers": 2, "workers": o.scheduler.workers,
        "requests_per_s": 2 * o.rate, "zipf_s": o.zipf, "turn_hold_ms": ms(o.hold),
    })
}

/// Rates over the measured period.
pub(crate) fn rates_at(s: &Snapshot) -> Value {
    let peeked: BTreeMap<&'static str, u64> =
        s.owner_keys.iter().filter(|(k, _)| k.starts_with("peek")).map(|(k, v)| (*k, *v)).collect();
    json!({
        "seconds": (s.seconds * 10.0).round() / 10.0,
        "tick_store_calls": rates(&s.tick_calls, s.seconds),
        "owner_store_calls": rates(&s.owner_calls, s.seconds),
        "ticks": rates(&s.ticks, s.seconds),
        "messages_submitted": rates(&BTreeMap::from([("submitted", s.messages)]), s.seconds),
        "owner_turns": rates(&s.turns, s.seconds),
        "owners_peeked": rates(&peeked, s.seconds),
    })
}

/// Write the report, creating its directory.
pub(crate) fn write(path: &Path, report: &Value) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The human summary.
pub(crate) fn print_summary(report: &Value) {
    println!("\ndrain-load summary ({} s, rates over the measured period)", report["seconds"]);
    let r = &report["rates_at_deadline"];
    for group in
        ["tick_store_calls", "ticks", "messages_submitted", "owner_store_calls", "owner_turns", "owners_peeked"]
    {
        if let Some(m) = r[group].as_object() {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {}/s", v["per_s"])).collect();
            println!("  {group:<19} {}", parts.join(", "));
        }
    }
    for side in ["ticks", "owners"] {
        if let Some(m) = report["per_op"][side].as_object() {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    format!("{k} {} rt/call ({} cmds)", v["round_trips_per_call"], v["commands_sent_per_call"])
                })
                .collect();
            println!("  per op ({side:<6})    {}", parts.join(", "));
        }
    }
    let m = &report["rss_kib"];
    println!("  rss KiB             start {}, warm {}, end {} (bound {})", m["start"], m["warm"], m["end"], m["bound"]);
    for c in report["checks"].as_array().into_iter().flatten() {
        let mark = if c["ok"].as_bool() == Some(true) { "ok  " } else { "FAIL" };
        println!("  {mark} {}: {}", c["check"].as_str().unwrap_or(""), c["detail"].as_str().unwrap_or(""));
    }
}

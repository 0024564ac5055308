//! The load run's verdict: errors, exactly-once submits, single flight, commands
//! per operation against the server's `INFO commandstats`, resident memory after
//! warm-up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::Args;
use crate::meter::Meter;
use crate::owners::{self, Turns};
use crate::parts::Counting;
use crate::report::{self, Snapshot};
use crate::ticks::{self, StoppedTicks};

/// Memory may grow after warm-up by at most this fraction of the warm value …
const RSS_GROWTH_FRACTION: f64 = 0.25;
/// … or this many KiB, whichever is larger (allocator arenas, buffers).
const RSS_GROWTH_KIB: u64 = 16 * 1024;

/// Everything the verdict reads.
pub(crate) struct Input<'a> {
    pub(crate) args: &'a Args,
    pub(crate) tick_shape: &'a ticks::Shape,
    pub(crate) owner_shape: &'a owners::Shape,
    pub(crate) at_deadline: Snapshot,
    pub(crate) tick_meter: &'a Meter,
    pub(crate) owner_meter: &'a Meter,
    pub(crate) tick_obs: &'a Counting,
    pub(crate) owner_obs: &'a Counting,
    pub(crate) stopped: &'a StoppedTicks,
    pub(crate) turns: &'a Turns,
    pub(crate) produced: u64,
    pub(crate) backlog: usize,
    pub(crate) calls_before: BTreeMap<String, u64>,
    pub(crate) calls_after: BTreeMap<String, u64>,
    pub(crate) rss: Vec<(u64, u64)>,
    pub(crate) redis_version: String,
}

/// Round trips and commands per call of every operation, from the store's own
/// round-trip events and the calls' key counts.
fn per_op(calls: &BTreeMap<&'static str, u64>, keys: &BTreeMap<&'static str, u64>, obs: &[&Counting]) -> Value {
    let mut out = serde_json::Map::new();
    for (op, n) in calls {
        let trips: u64 = obs.iter().map(|o| o.get("round_trip", op)).sum();
        let k = keys.get(op).copied().unwrap_or(0);
        let per = |x: u64| if *n == 0 { 0.0 } else { ((x as f64 / *n as f64) * 1000.0).round() / 1000.0 };
        // Sent per call: one EVALSHA per script call; GET + PTTL per key peeked.
        let sent = if op.starts_with("peek") { 2 * k } else { trips };
        out.insert(
            (*op).to_owned(),
            json!({ "calls": n, "keys": k, "round_trips": trips, "round_trips_per_call": per(trips),
                    "commands_sent_per_call": per(sent), "keys_per_call": per(k) }),
        );
    }
    Value::Object(out)
}

/// The server's command deltas against the model; problems found.
fn commands(input: &Input<'_>, trips: u64, calls: u64) -> (Value, Vec<String>) {
    let merge = |a: BTreeMap<&'static str, u64>, b: BTreeMap<&'static str, u64>| {
        let mut out = a;
        for (k, v) in b {
            *out.entry(k).or_insert(0) += v;
        }
        out
    };
    let expected = merge(input.tick_meter.expected(), input.owner_meter.expected());
    let slack = merge(input.tick_meter.slack(), input.owner_meter.slack());
    let cancelled = merge(input.tick_meter.cancelled(), input.owner_meter.cancelled());
    let observed: BTreeMap<String, u64> = input
        .calls_after
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .map(|(k, v)| (k.clone(), v - input.calls_before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    let get = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    let mut problems = Vec::new();
    // NOSCRIPT (restart, SCRIPT FLUSH): the refused EVALSHA is followed by EVAL in
    // the same call, the only extra the protocol allows. Redis 7.0 does not count
    // the refused EVALSHA in `calls` (others may), so a script call shows as one
    // EVALSHA or EVAL, plus at most one refused EVALSHA per EVAL. Nothing flushes
    // here, so 0 EVAL is expected.
    let eval = get(&observed, "eval");
    let names: BTreeSet<String> = observed.keys().cloned().chain(expected.keys().map(|k| (*k).to_owned())).collect();
    for name in names.iter().filter(|n| n.as_str() != "eval") {
        let want = expected.get(name.as_str()).copied().unwrap_or(0);
        let slack = slack.get(name.as_str()).copied().unwrap_or(0);
        let (got, most) = if name == "evalsha" {
            (get(&observed, name) + eval, want + eval + slack)
        } else {
            (get(&observed, name), want + slack)
        };
        if got < want || got > most {
            let what = if name == "evalsha" { "evalsha + eval" } else { name.as_str() };
            problems.push(format!("{what}: the server counted {got}, the calls explain {want}..={most}"));
        }
    }
    if trips > calls + eval {
        problems.push(format!("{trips} round trips for {calls} calls ({eval} NOSCRIPT retries)"));
    }
    let expected: BTreeMap<&str, u64> = expected.into_iter().filter(|(_, v)| *v > 0).collect();
    let total: u64 = observed.values().sum();
    let sent = get(&observed, "evalsha") + eval + 2 * input.owner_meter.keys().get("peek_owners").copied().unwrap_or(0);
    let v = json!({ "observed": observed, "expected": expected, "noscript_retries": eval,
        "cancelled_calls": cancelled, "slack_from_cancelled": slack,
        "client_commands": sent, "server_commands": total, "calls": calls, "round_trips": trips,
        "client_commands_per_call": (sent as f64 / calls.max(1) as f64 * 1000.0).round() / 1000.0 });
    (v, problems)
}

/// The report and whether every check passed.
pub(crate) fn evaluate(input: &Input<'_>) -> (Value, bool) {
    let (to, oo, st) = (input.tick_obs, input.owner_obs, input.stopped);
    let s = &input.at_deadline;
    let relaxed = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let mut checks: Vec<(&str, bool, String)> = Vec::new();

    let error_events = [
        to.get("acquire", "error"),
        to.get("release", "error"),
        to.get("renew", "error"),
        to.get("tick", "fail_open"),
        to.get("message", "claim_error"),
        to.get("message", "submit_failed"),
        to.get("message", "settle_failed"),
        to.get("message", "dead_lettered"),
        oo.get("peek_error", ""),
        oo.get("turn", "failed"),
    ];
    let errors = input.tick_meter.errors()
        + input.owner_meter.errors()
        + relaxed(&st.reports.errors)
        + error_events.iter().sum::<u64>()
        + relaxed(&input.turns.failed);
    let mut messages = input.tick_meter.error_messages();
    messages.extend(input.owner_meter.error_messages());
    messages.extend(st.reports.first_error.lock().ok().and_then(|e| e.clone()));
    checks.push(("no errors", errors == 0, format!("{errors} errors {messages:?}")));

    let submitted = relaxed(&st.target.submitted);
    let (twice, stale) = (relaxed(&st.target.twice), relaxed(&st.target.stale_fence));
    let dup = to.get("message", "duplicate") + to.get("message", "claimed_elsewhere");
    let once = submitted == input.produced && twice == 0 && stale == 0 && dup == 0 && input.backlog == 0;
    checks.push((
        "every message submitted exactly once",
        once,
        format!(
            "produced {}, submitted {submitted}, twice {twice}, under a stale fence {stale}, \
             duplicate or claimed elsewhere {dup}, left {}",
            input.produced, input.backlog
        ),
    ));
    let (ran, locked, renewed) = (to.get("tick", "ran"), to.get("tick", "skipped_locked"), to.get("renew", "renewed"));
    checks.push((
        "overlapping ticks skip with locked, long ticks renew",
        ran > 0 && locked > 0 && renewed > 0,
        format!("ran {ran}, skipped_locked {locked}, renewed {renewed}"),
    ));

    let calls = input.tick_meter.calls();
    let owner_calls = input.owner_meter.calls();
    let all_calls: u64 = calls.values().sum::<u64>() + owner_calls.values().sum::<u64>();
    let trips: u64 = [to, oo].iter().map(|o| o.of("round_trip").values().sum::<u64>()).sum();
    let (cmd_json, problems) = commands(input, trips, all_calls);
    checks.push(("Redis commands per operation as specified", problems.is_empty(), problems.join("; ")));

    let rss = &input.rss;
    let at = |t: u64| rss.iter().find(|(s, _)| *s >= t).or(rss.last()).map_or(0, |(_, k)| *k);
    let (start, warm, end) = (at(0), at(input.args.warmup), rss.last().map_or(0, |(_, k)| *k));
    let after_warm_max = rss.iter().filter(|(s, _)| *s >= input.args.warmup).map(|(_, k)| *k).max().unwrap_or(0);
    let bound = warm + RSS_GROWTH_KIB.max((warm as f64 * RSS_GROWTH_FRACTION) as u64);
    checks.push((
        "resident memory flat after warm-up",
        end <= bound && warm > 0,
        format!("start {start} KiB, warm {warm} KiB, end {end} KiB, bound {bound} KiB"),
    ));

    let ok = checks.iter().all(|(_, ok, _)| *ok);
    let turns = input.turns;
    let source = |f: fn(&crate::queue::Queue) -> u64| st.queues.iter().map(|q| f(q)).sum::<u64>();
    let report = json!({
        "ok": ok,
        "seconds": input.args.seconds,
        "warmup_seconds": input.args.warmup,
        "machine": {
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
            "redis": input.redis_version,
        },
        "workload": report::workload(input),
        "rates_at_deadline": report::rates_at(s),
        "per_op": {
            "ticks": per_op(&calls, &input.tick_meter.keys(), &[to]),
            "owners": per_op(&owner_calls, &input.owner_meter.keys(), &[oo]),
        },
        "commands": cmd_json,
        "events": { "ticks": to.to_json(), "owners": oo.to_json() },
        "owner_turns": {
            "requests": relaxed(&turns.requests), "turns": relaxed(&turns.turns),
            "claim_busy": relaxed(&turns.claim_busy), "not_owner": relaxed(&turns.not_owner),
            "handed_off": relaxed(&turns.handed_off),
        },
        "lease_lost": relaxed(&st.reports.lease_lost),
        "source": {
            "completed": source(|q| q.completed.load(Ordering::Relaxed)),
            "abandoned": source(|q| q.abandoned.load(Ordering::Relaxed)),
            "dead_lettered": source(|q| q.dead.load(Ordering::Relaxed)),
        },
        "errors_by_op": { "ticks": input.tick_meter.errors_by_op(), "owners": input.owner_meter.errors_by_op() },
        "rss_kib": {
            "start": start, "warm": warm, "end": end, "max_after_warm": after_warm_max, "bound": bound,
            "samples": rss.iter().map(|(s, k)| json!([s, k])).collect::<Vec<_>>(),
        },
        "checks": checks.iter().map(|(name, ok, detail)| json!({ "check": name, "ok": ok, "detail": detail }))
            .collect::<Vec<_>>(),
    });
    (report, ok)
}

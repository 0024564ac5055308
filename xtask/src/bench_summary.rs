//! The table `cargo xtask bench` prints at the end: the headline figures of every
//! `target/bench/*.json` written during the run, read back from the files (so the
//! table shows what the JSON says, never a second measurement).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

/// Render the summary of the files named in `fresh` under `dir`.
pub(crate) fn render(dir: &Path, fresh: &[String]) -> String {
    let mut out = String::from("\nxtask bench summary\n");
    for name in fresh {
        let Some(v) = std::fs::read_to_string(dir.join(name)).ok().and_then(|t| serde_json::from_str(&t).ok()) else {
            let _ = writeln!(out, "  {name}: not valid JSON");
            continue;
        };
        let v: Value = v;
        if let Some(why) = v.get("skipped").and_then(Value::as_str) {
            let _ = writeln!(out, "  {name}: skipped: {why}");
            continue;
        }
        match name.as_str() {
            "scheduler.json" => scheduler(&mut out, &v),
            "redis.json" => redis(&mut out, &v),
            "postgres.json" => postgres(&mut out, &v),
            "amqp.json" => amqp(&mut out, &v),
            "owners.json" => owners(&mut out, &v),
            "idle.json" => idle(&mut out, &v),
            "servicebus.json" => servicebus(&mut out, &v),
            "load.json" => load(&mut out, &v),
            _ => {
                let _ = writeln!(out, "  {name}: written");
            }
        }
    }
    out
}

fn num(v: &Value, path: &str) -> String {
    match v.pointer(path) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => "-".to_owned(),
    }
}

fn scheduler(out: &mut String, v: &Value) {
    let _ = writeln!(out, "  core decisions (scheduler.json)         ns/op   allocs/op");
    for row in v["scheduler"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "    {:<34}{:>9} {:>11}",
            num(row, "/name"),
            num(row, "/ns_per_cycle"),
            num(row, "/allocs_per_cycle")
        );
    }
    let _ = writeln!(
        out,
        "    {:<34}{:>9} {:>11}",
        "tick_skip_locked",
        num(v, "/tick_skip_locked/ns_per_tick"),
        num(v, "/tick_skip_locked/allocs_per_tick")
    );
    for (scenario, policies) in v["simulate_scenarios"].as_object().into_iter().flatten() {
        let _ =
            writeln!(out, "  simulate --scenario {scenario}       claim busy  wasted/useful  p50 ms  p99 ms  items/s");
        for (policy, f) in policies.as_object().into_iter().flatten() {
            let _ = writeln!(
                out,
                "    {policy:<30}{:>12}{:>15}{:>8}{:>8}{:>9}",
                num(f, "/claim_busy_turns"),
                num(f, "/wasted_turns_per_useful"),
                num(f, "/owner_latency_p50_ms"),
                num(f, "/owner_latency_p99_ms"),
                num(f, "/throughput_per_s")
            );
        }
    }
    let _ = writeln!(out, "  simulate --scenario large: {} s wall", num(v, "/simulate_large/wall_s"));
}

fn redis(out: &mut String, v: &Value) {
    let _ = writeln!(
        out,
        "  redis lease cycles/s (redis.json, {}, {} length, {} build)",
        num(v, "/server"),
        num(v, "/length"),
        num(v, "/build")
    );
    lease_cycles(out, v);
    let _ = writeln!(out, "  redis commands per operation       commands  round trips  specified");
    for row in v["commands"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "    {:<30}{:>10}{:>13}{:>11}",
            num(row, "/op"),
            num(row, "/commands_per_op"),
            num(row, "/round_trips_per_op"),
            num(row, "/specified_round_trips")
        );
    }
}

fn postgres(out: &mut String, v: &Value) {
    let _ = writeln!(
        out,
        "  postgres lease cycles/s (postgres.json, {}, {} connections, {} length, {} build; goal: {})",
        num(v, "/server"),
        num(v, "/connections"),
        num(v, "/length"),
        num(v, "/build"),
        num(v, "/goal")
    );
    lease_cycles(out, v);
    let _ = writeln!(
        out,
        "    server-side calls: acquire {}, release {}, other {} for {} cycles",
        num(v, "/statement_calls/acquire"),
        num(v, "/statement_calls/release"),
        num(v, "/statement_calls/other"),
        num(v, "/statement_calls/cycles")
    );
}

/// The clients' cycles/s at 1 and 16 tasks and the ratios with their spread.
fn lease_cycles(out: &mut String, v: &Value) {
    let _ = writeln!(out, "    {:<28}{:>10}{:>10}", "client", "1 task", "16 tasks");
    let rows = v["results"].as_array().cloned().unwrap_or_default();
    let mut clients: Vec<String> = Vec::new();
    for client in rows.iter().filter_map(|r| r["client"].as_str()) {
        if !clients.iter().any(|c| c == client) {
            clients.push(client.to_owned());
        }
    }
    for client in clients {
        let rate = |tasks: u64| {
            rows.iter()
                .find(|r| r["client"] == client.as_str() && r["tasks"] == tasks)
                .map_or_else(|| "-".to_owned(), |r| num(r, "/cycles_per_sec"))
        };
        let _ = writeln!(out, "    {client:<28}{:>10}{:>10}", rate(1), rate(16));
    }
    for (ratio, x) in v["ratios"].as_object().into_iter().flatten() {
        let spread = v.pointer(&format!("/ratio_spread/{ratio}/iqr_over_median")).and_then(Value::as_f64);
        let spread = spread.map_or_else(|| "-".to_owned(), |s| format!("{:.1} %", s * 100.0));
        let _ = writeln!(out, "    {ratio}: {x} (spread {spread})");
    }
}

fn amqp(out: &mut String, v: &Value) {
    let _ = writeln!(out, "  amqp messages/s (amqp.json, {} length, {} build)", num(v, "/length"), num(v, "/build"));
    for (mode, rate) in v["msg_per_sec"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "    {mode:<30}{rate:>10}");
    }
    ratios(out, v);
}

/// Each ratio of `v["ratios"]`: its median and spread.
fn ratios(out: &mut String, v: &Value) {
    for (ratio, f) in v["ratios"].as_object().into_iter().flatten() {
        let spread = f["iqr_over_median"].as_f64().map_or_else(|| "-".to_owned(), |s| format!("{:.1} %", s * 100.0));
        let _ = writeln!(out, "    {ratio}: {}x (spread {spread})", num(f, "/median"));
    }
}

fn servicebus(out: &mut String, v: &Value) {
    let _ = writeln!(
        out,
        "  test-servicebus messages/s (servicebus.json, {} length, {} build)",
        num(v, "/length"),
        num(v, "/build")
    );
    for (mode, rate) in v["msg_per_sec"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "    {mode:<30}{rate:>10}");
    }
    ratios(out, v);
}

fn idle(out: &mut String, v: &Value) {
    let _ = writeln!(
        out,
        "  idle drain run, {} s (idle.json, {} length, {} build; goal: {})",
        num(v, "/idle_s"),
        num(v, "/length"),
        num(v, "/build"),
        num(v, "/goal")
    );
    let _ = writeln!(out, "    {:<22}{:>12}{:>16}{:>16}", "config", "cpu s/min", "rss KiB start", "rss KiB end");
    for (config, f) in v["configs"].as_object().into_iter().flatten() {
        let _ = writeln!(
            out,
            "    {config:<22}{:>12}{:>16}{:>16}",
            num(f, "/cpu_s_per_idle_minute"),
            num(f, "/rss_kib_at_start"),
            num(f, "/rss_kib_at_end")
        );
    }
}

fn owners(out: &mut String, v: &Value) {
    let _ = writeln!(
        out,
        "  owner drains, {} processes x {} owners x {} items, {} rounds (owners.json, {} build; median [min-max])",
        num(v, "/processes"),
        num(v, "/owners"),
        num(v, "/items"),
        num(v, "/rounds"),
        num(v, "/build")
    );
    let _ = writeln!(out, "    {:<10}{:<20}{:>22}{:>18}{:>18}", "store", "policy", "wasted/useful", "p50 ms", "p99 ms");
    let range = |f: &Value, k: &str| {
        format!(
            "{} [{}-{}]",
            num(f, &format!("/{k}/median")),
            num(f, &format!("/{k}/min")),
            num(f, &format!("/{k}/max"))
        )
    };
    for (store, policies) in v["stores"].as_object().into_iter().flatten() {
        for (policy, f) in policies.as_object().into_iter().flatten() {
            let _ = writeln!(
                out,
                "    {store:<10}{policy:<20}{:>22}{:>18}{:>18}",
                range(f, "wasted_per_useful"),
                range(f, "latency_p50_ms"),
                range(f, "latency_p99_ms")
            );
        }
    }
    for (store, why) in v["skipped_stores"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "    {store}: skipped: {}", why.as_str().unwrap_or_default());
    }
}

fn load(out: &mut String, v: &Value) {
    let _ = writeln!(
        out,
        "  load (load.json, `cargo xtask soak`): {} s, ok {}, RSS KiB start {} / warm {} / end {} (bound {})",
        num(v, "/seconds"),
        num(v, "/ok"),
        num(v, "/rss_kib/start"),
        num(v, "/rss_kib/warm"),
        num(v, "/rss_kib/end"),
        num(v, "/rss_kib/bound")
    );
    let _ = writeln!(out, "    {:<30}{:>10}{:>14}{:>14}", "operation", "calls", "round trips", "commands");
    for (part, ops) in v["per_op"].as_object().into_iter().flatten() {
        for (op, f) in ops.as_object().into_iter().flatten() {
            let _ = writeln!(
                out,
                "    {:<30}{:>10}{:>14}{:>14}",
                format!("{part} {op}"),
                num(f, "/calls"),
                num(f, "/round_trips_per_call"),
                num(f, "/commands_sent_per_call")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn the_summary_shows_each_file_headline_figures() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let files = [
            (
                "scheduler.json",
                r#"{"scheduler":[{"name":"legacy_turn","ns_per_cycle":204.0,"allocs_per_cycle":0.0}],"tick_skip_locked":{"ns_per_tick":556.0,"allocs_per_tick":6.0},"simulate_scenarios":{"default":{"legacy":{"claim_busy_turns":63276,"owner_latency_p99_ms":512}}},"simulate_large":{"wall_s":3.15}}"#,
            ),
            (
                "redis.json",
                r#"{"server":"redis 7.0.15","results":[{"client":"adapter","tasks":1,"cycles_per_sec":27516},{"client":"rslock","tasks":1,"cycles_per_sec":22234},{"client":"adapter","tasks":16,"cycles_per_sec":75136},{"client":"rslock","tasks":16,"cycles_per_sec":74688}],"commands":[{"op":"peek_owners_64","commands_per_op":128.0,"round_trips_per_op":1.0,"specified_round_trips":1}]}"#,
            ),
            (
                "owners.json",
                r#"{"processes":4,"owners":200,"items":20000,"rounds":3,"build":"debug","stores":{"redis":{"claim_aware_wake":{"wasted_per_useful":{"median":0.824,"min":0.7,"max":1.067},"latency_p50_ms":{"median":373.0,"min":256.0,"max":585.0},"latency_p99_ms":{"median":4543.0,"min":429.0,"max":752.0}}},"simulated":{"oracle":{"wasted_per_useful":{"median":0.0,"min":0.0,"max":0.0}}}},"skipped_stores":{"postgres":"not installed"}}"#,
            ),
            (
                "load.json",
                r#"{"seconds":60,"ok":true,"rss_kib":{"start":10436,"warm":16028,"end":16496,"bound":32412},"per_op":{"ticks":{"acquire":{"calls":59561,"round_trips_per_call":1.0,"commands_sent_per_call":1.0}}}}"#,
            ),
            (
                "postgres.json",
                r#"{"server":"postgresql 15.20","connections":4,"goal":"adapter >= 0.9x hand_written","results":[{"client":"hand_written","tasks":1,"cycles_per_sec":4321},{"client":"hand_written","tasks":16,"cycles_per_sec":9876}],"ratios":{"adapter_vs_hand_written_16_tasks":0.97},"ratio_spread":{"adapter_vs_hand_written_16_tasks":{"iqr_over_median":0.052}},"statement_calls":{"acquire":77,"release":77,"other":0,"cycles":77}}"#,
            ),
            ("amqp.json", r#"{"skipped":"RabbitMQ does not answer"}"#),
            (
                "idle.json",
                r#"{"idle_s":15.0,"length":"ci","build":"debug","goal":"g","configs":{"embedded":{"cpu_s_per_idle_minute":0.125,"rss_kib_at_start":9000,"rss_kib_at_end":9100}}}"#,
            ),
            ("broken.json", "{"),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write");
        }
        let names: Vec<String> = files.iter().map(|(n, _)| (*n).to_owned()).collect();
        let out = render(&dir, &names);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(out.matches("rslock").count(), 1, "one row per client:\n{out}");
        for want in [
            "legacy_turn",
            "204.0",
            "63276",
            "27516",
            "75136",
            "peek_owners_64",
            "128.0",
            "4543",
            "0.824 [0.7-1.067]",
            "simulated oracle",
            "postgres: skipped: not installed",
            "RSS KiB start 10436 / warm 16028 / end 16496 (bound 32412)",
            "ticks acquire",
            "amqp.json: skipped: RabbitMQ does not answer",
            "0.125",
            "9100",
            "broken.json: not valid JSON",
            "postgresql 15.20, 4 connections",
            "4321",
            "9876",
            "adapter_vs_hand_written_16_tasks: 0.97 (spread 5.2 %)",
            "acquire 77, release 77, other 0 for 77 cycles",
        ] {
            assert!(out.contains(want), "{want:?} missing from:\n{out}");
        }
    }
}

//! The `drain` binary against a private redis-server.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use drain_e2e::{RedisServer, Running, await_metrics, drain, free_port, metric, output, redis};

/// The longest any one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);
/// Bound on waiting for a counter to reach the value a test expects.
const COUNTERS: Duration = Duration::from_secs(30);
use test_servers::Reply;

fn get(server: &RedisServer, key: &str) -> Option<String> {
    match server.command(&["GET", key]).expect("GET") {
        Reply::Bulk(Some(v)) => Some(String::from_utf8(v).expect("utf-8")),
        Reply::Bulk(None) => None,
        other => panic!("GET answered {other:?}"),
    }
}

/// `total_connections_received`, counting the connection that asks.
fn connections(server: &RedisServer) -> u64 {
    let stats = server.info("stats").expect("INFO stats");
    stats.iter().find(|(k, _)| k == "total_connections_received").and_then(|(_, v)| v.parse().ok()).expect("field")
}

/// Commands whose call count changed between two `INFO commandstats` snapshots,
/// besides the INFO probes themselves.
fn changed(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> BTreeSet<String> {
    after.iter().filter(|(c, n)| *c != "info" && before.get(*c) != Some(*n)).map(|(c, _)| c.clone()).collect()
}

/// Wait (bounded) for a `message` report that satisfies `wanted`.
fn wait_report(
    run: &mut Running,
    message: &str,
    within: Duration,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> Option<serde_json::Value> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(r) = run.reports(message).into_iter().find(|r| wanted(r)) {
            return Some(r);
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        // Collect lines for a moment (the needle never appears).
        run.wait_for("\u{0}", left.min(Duration::from_millis(200)));
    }
}

/// A report's count `key` (0 when absent).
fn n(report: &serde_json::Value, key: &str) -> u64 {
    report[key].as_u64().unwrap_or(0)
}

/// `drain run` on `server` with the lease on, a beat every second, a 1 s shutdown
/// grace and `/metrics` on `port`; each test adds its own settings.
fn run_with_lease(server: &RedisServer, port: u16) -> std::process::Command {
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{port}"));
    cmd
}

#[test]
fn off_never_sends_redis_a_single_command() {
    let server = redis();
    let before = server.command_calls().expect("commandstats");
    let conns_before = connections(&server);
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_ATOMIC_CLAIM", "off")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "16");
    let out = output(cmd, LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(report["lease"], "off");
    assert!(report["submitted"].as_u64().unwrap() > 0);
    let conns_after = connections(&server);
    let after = server.command_calls().expect("commandstats");
    assert_eq!(changed(&before, &after), BTreeSet::new(), "not even a script load or a HELLO");
    assert_eq!(conns_after - conns_before, 1, "drain never even connected (the 1 is this probe's own connection)");
}

#[test]
fn a_foreign_lease_skips_the_tick_and_stays_untouched() {
    let server = redis();
    let key = "drain:lease:{requests}";
    let foreign = "other-host:00112233445566778899aabbccddeeff";
    // The command first (it may have to build the binary), then the foreign lease.
    let mut cmd = drain();
    cmd.args(["run", "--once"]).env("DRAIN_REDIS_URL", server.url()).env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on");
    assert_eq!(server.command(&["SET", key, foreign, "PX", "600000"]).unwrap(), Reply::Simple("OK".into()));
    let out = output(cmd, LIMIT);
    assert!(out.status.success(), "a skipped tick is not an error: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "{\"queue\":\"requests\",\"skipped\":\"locked\"}\n");
    assert_eq!(get(&server, key).as_deref(), Some(foreign), "the foreign lease is untouched");
    let calls = server.command_calls().unwrap();
    assert_eq!(calls.get("del"), None);
    assert_eq!(calls.get("pexpire"), None);
}

#[test]
fn with_the_lease_at_most_one_tick_drains_at_a_time_and_skips_are_counted() {
    let server = redis();
    let port = free_port();
    let mut cmd = run_with_lease(&server, port);
    cmd.env("DRAIN_WORKER_CONCURRENCY", "4");
    let mut run = Running::spawn(cmd);
    // The demo burst takes ~15 s at 100 ms a submit: every beat meanwhile overlaps.
    assert!(run.wait_for("tick skipped", Duration::from_secs(20)), "{}", run.log());
    let series = r#"drain_ticks_total{queue="requests",outcome="skipped_locked",mode="on",kind="beat"}"#;
    let (body, counted) = await_metrics(port, COUNTERS, |b| metric(b, series).unwrap_or(0.0) >= 3.0);
    assert!(counted, "skips counted: {:?}\n{body}", metric(&body, series));
    // Record overlap: between an acquire and its release no other acquire happens.
    run.count("");
    let mut holding = 0i32;
    let mut max = 0i32;
    for line in &run.seen {
        if line.contains("lease acquired") {
            holding += 1;
        } else if line.contains("lease released") {
            holding -= 1;
        }
        max = max.max(holding);
    }
    assert_eq!(max, 1, "at most one tick holds the lease at any moment:\n{}", run.log());
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
}

#[test]
fn redis_stopped_mid_run_fails_open_and_counts_it() {
    let mut server = redis();
    let port = free_port();
    let mut cmd = run_with_lease(&server, port);
    cmd.env("SERVICEBUS_ATOMIC_CLAIM", "off").env("SERVICEBUS_DRAIN_CONCURRENCY", "32");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("tick done", Duration::from_secs(20)), "{}", run.log());
    server.kill();
    assert!(run.wait_for("fail_open", Duration::from_secs(15)), "ticks keep draining without Redis:\n{}", run.log());
    let series = r#"drain_ticks_total{queue="requests",outcome="fail_open",mode="on",kind="beat"}"#;
    let (body, counted) = await_metrics(port, COUNTERS, |b| metric(b, series).unwrap_or(0.0) >= 2.0);
    assert!(counted, "the fail-open counter rises: {:?}\n{body}", metric(&body, series));
    // Fail-open ticks really drain: the demo's trickle (every 5 s) is submitted by a
    // tick that ran without the lease.
    let drained = wait_report(&mut run, "tick done", Duration::from_secs(20), |r| {
        r["lease"] == "fail_open" && n(r, "submitted") > 0
    });
    assert!(drained.is_some(), "a fail-open tick submitted messages:\n{}", run.log());
    for r in run.reports("tick done").iter().filter(|r| r["lease"] == "fail_open") {
        assert_eq!(n(r, "received"), n(r, "submitted") + n(r, "abandoned") + n(r, "dead_lettered"), "{r}");
    }
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
}

#[test]
fn sigterm_mid_tick_releases_the_lease_gives_messages_back_and_exits_zero() {
    let server = redis();
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        // A fixed window, a few submits at a time, so the stop finds messages not yet
        // submitted (the adaptive window has a whole batch in flight at once, which a
        // stop lets finish: the planner's stop cases).
        .env("SERVICEBUS_DRAIN_MAX_IN_FLIGHT", "0");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("lease acquired", Duration::from_secs(20)), "{}", run.log());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(get(&server, "drain:lease:{requests}").is_some(), "held mid-tick");
    run.terminate();
    let status = run.wait_exit(Duration::from_secs(15));
    assert!(status.is_some_and(|s| s.success()), "exit 0: {status:?}\n{}", run.log());
    assert_eq!(get(&server, "drain:lease:{requests}"), None, "lease key gone");
    let report = run
        .seen
        .iter()
        .find(|l| l.contains(r#"\"stopped\":true"#))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .and_then(|v| v["report"].as_str().and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok()))
        .unwrap_or_else(|| panic!("no stopped report:\n{}", run.log()));
    assert_eq!(report["stopped"], true);
    let n = |k: &str| report[k].as_u64().unwrap();
    assert!(n("abandoned") > 0, "unfinished messages went back to the source: {report}");
    assert_eq!(n("received"), n("submitted") + n("duplicates") + n("abandoned") + n("dead_lettered"), "{report}");
    // No claim is left pending: abandoned messages' claims were released. A duplicate
    // (the demo's second copy of an id, in the batch of the first) met the first
    // copy's claim and has none of its own.
    let count = |pattern: &str| {
        let script = "local n = 0 for _, k in ipairs(redis.call('KEYS', 'drain:msg:*')) do \
                      if string.find(redis.call('GET', k), ARGV[1], 1, true) == 1 then n = n + 1 end end return n";
        match server.command(&["EVAL", script, "0", pattern]).unwrap() {
            Reply::Int(n) => u64::try_from(n).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        (count("done:"), count("pending:")),
        (n("submitted"), 0),
        "one done claim per submitted message, none pending"
    );
}

/// The settings rule (docs/flags.md): "A bad value never panics and never silently disables a safety
/// feature." For switches, numbers and text that means the default (or the clamped
/// value) with one warning per variable, and `drain` starts. For a `*_URL` there is
/// no safe default: falling back to the embedded store or demo queue would quietly
/// turn a fleet-wide lease or claim into a per-process one. So an unusable URL
/// (unknown scheme, or set but blank) stops `drain` before it starts: exit 2, one
/// line naming the variable, the secret masked (docs/operations.md, docs/flags.md).
/// So does a `DRAIN_KEY_PREFIX` that cannot be used (it used to fall back to the
/// shared `drain`, silently merging tenants).
#[test]
fn garbage_in_every_variable_starts_with_warnings_and_never_panics() {
    // Every setting with its type, from the registry as the binary renders it.
    let mut cmd = drain();
    cmd.args(["config", "--flags-markdown"]);
    let markdown = String::from_utf8(output(cmd, LIMIT).stdout).unwrap();
    let settings: Vec<(String, String)> = markdown
        .lines()
        .filter_map(|row| {
            let mut cells = row.split('|').map(str::trim).skip(1);
            let name = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            Some((name.to_owned(), cells.next()?.to_owned()))
        })
        .collect();
    assert!(settings.len() >= 20, "{settings:?}");
    let is_url = |ty: &str| ty.starts_with("url");
    let urls: Vec<&str> = settings.iter().filter(|(_, ty)| is_url(ty)).map(|(n, _)| n.as_str()).collect();
    assert_eq!(urls, ["DRAIN_STORE_URL", "DRAIN_REDIS_URL", "DRAIN_SOURCE_URL", "DRAIN_TARGET_URL"]);

    const SECRET: &str = "Garbage-Pw-3";
    let garbage =
        ["\u{1}{}garbage", "-1", "", "99999999999999999999999", "on off", "\u{7f}", "x://drain:Garbage-Pw-3@h"];
    // `DRAIN_KEY_PREFIX` has no safe default either: a bad prefix replaced by the
    // shared `drain` would merge tenants. It is fatal like a URL.
    let fatal = |name: &str, ty: &str| is_url(ty) || name == "DRAIN_KEY_PREFIX";
    let bad_prefix = |g: &str| {
        let p = g.trim();
        p.is_empty() || p.len() > 64 || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    };
    let fatal_names: Vec<&str> = settings.iter().filter(|(n, ty)| fatal(n, ty)).map(|(n, _)| n.as_str()).collect();
    // Per garbage value: one `drain run --once` with it in every other variable, and
    // one per fatal variable with it there alone. All at once.
    let mut runs = Vec::new();
    for g in garbage {
        let mut cmd = drain();
        cmd.args(["run", "--once"]);
        let mut set = Vec::new();
        for (name, ty) in settings.iter().filter(|(n, ty)| !fatal(n, ty)) {
            // A huge max wait clamps to 60 s, which --once then honestly waits on an
            // empty queue; that case is checked through `drain config` below.
            if name != "SERVICEBUS_DRAIN_MAX_WAIT_MS" || g.parse::<f64>().is_err() {
                cmd.env(name, g);
                set.push((name.clone(), ty.clone()));
            }
        }
        runs.push((g, None, set, std::thread::spawn(move || output(cmd, LIMIT))));
        for name in &fatal_names {
            if *name == "DRAIN_KEY_PREFIX" && !bad_prefix(g) {
                continue; // `-1` and a long number are valid prefixes
            }
            let mut cmd = drain();
            cmd.args(["run", "--once"]).env(name, g);
            runs.push((g, Some(*name), Vec::new(), std::thread::spawn(move || output(cmd, LIMIT))));
        }
    }
    for (g, url, set, run) in runs {
        let out = run.join().expect("runner thread");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{g:?} in {url:?}: {err}");
        if let Some(url) = url {
            assert_eq!(out.status.code(), Some(2), "{g:?} in {url}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
            assert!(err.starts_with(&format!("drain: {url}=")), "the message names the variable: {err}");
            assert!(!err.contains(SECRET), "the secret is masked: {err}");
            assert!(out.stdout.is_empty(), "nothing ran: {}", String::from_utf8_lossy(&out.stdout));
            continue;
        }
        assert!(out.status.success(), "{g:?} must still start: {err}");
        // Logged as `config: NAME="value": what was done`.
        let mut warned: Vec<&str> = err
            .lines()
            .filter_map(|l| l.split_once("config: ").and_then(|(_, w)| w.split_once('=')).map(|(n, _)| n))
            .collect();
        warned.sort_unstable();
        let distinct = warned.len();
        warned.dedup();
        assert_eq!(distinct, warned.len(), "{g:?}: one warning per variable, not more: {err}");
        for (name, ty) in &set {
            if ty == "switch" || ty.starts_with("integer") {
                assert!(warned.contains(&name.as_str()), "{g:?} in {name} ({ty}) is warned about: {err}");
            }
        }
    }

    let mut cmd = drain();
    cmd.args(["config", "--json"]);
    for (name, _) in settings.iter().filter(|(n, ty)| !fatal(n, ty)) {
        cmd.env(name, "99999999999999999999999");
    }
    let out = output(cmd, LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let wait = v["settings"].as_array().unwrap().iter().find(|s| s["name"] == "SERVICEBUS_DRAIN_MAX_WAIT_MS").unwrap();
    assert_eq!(wait["value"], "60000", "clamped to the ceiling");
    assert!(v["warnings"].as_array().unwrap().len() >= 15, "one warning per bad value: {v}");
}

#[test]
fn leases_lists_the_holder_its_ttl_and_the_minted_fence() {
    let server = redis();
    // A first tick mints a fence and gives the lease back.
    let mut once = drain();
    once.args(["run", "--once"]).env("DRAIN_REDIS_URL", server.url()).env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on");
    let out = output(once, LIMIT);
    let first: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(first["lease"], "held", "{first}");
    let first_fence = first["fence"].as_u64().expect("a fence");

    // The next tick holds the lease for the demo's ~15 s burst.
    let holder = "leases-e2e-holder";
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "30")
        .env("DRAIN_INSTANCE_ID", holder)
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "3600")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("lease acquired", Duration::from_secs(20)), "{}", run.log());

    let leases = |json: bool| {
        let mut cmd = drain();
        cmd.arg("leases").env("DRAIN_REDIS_URL", server.url());
        if json {
            cmd.arg("--json");
        }
        let out = output(cmd, LIMIT);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let listing: serde_json::Value = serde_json::from_str(&leases(true)).expect("one JSON object");
    let rows = listing["leases"].as_array().expect("leases");
    assert_eq!(rows.len(), 1, "{listing}");
    let lease = &rows[0];
    assert_eq!(lease["queue"], "requests", "{listing}");
    assert_eq!(lease["holder"], holder, "{listing}");
    let ttl_ms = lease["ttl_ms"].as_u64().expect("a TTL");
    assert!(ttl_ms > 0 && ttl_ms <= 30_000, "remaining TTL within the lease TTL: {listing}");
    // The holder's fence: larger than the first tick's, and what the counter holds.
    let minted: u64 = lease["fence"].as_str().and_then(|f| f.parse().ok()).expect("a fence");
    assert!(minted > first_fence, "{listing}");
    assert_eq!(get(&server, "drain:fence:{requests}"), Some(minted.to_string()));
    assert!(n(&listing["message_claims"]["requests"], "done") > 0, "the first tick's claims: {listing}");

    // The human table: one lease row with the same holder, a TTL and the fence.
    let table = leases(false);
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("lease "))
        .unwrap_or_else(|| panic!("no lease row:\n{table}"))
        .split_whitespace()
        .collect();
    assert_eq!((row[1], row[2], row[4]), ("requests", holder, minted.to_string().as_str()), "{table}");
    let seconds: f64 = row[3].strip_suffix('s').and_then(|t| t.parse().ok()).expect("TTL like 29.8s");
    assert!(seconds > 0.0 && seconds <= 30.0, "{table}");

    // The tick that held it reports the same fence when it is stopped.
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
    let mut held = run.reports("tick done");
    held.extend(run.reports("tick ended early"));
    assert_eq!(held.len(), 1, "one tick ran:\n{}", run.log());
    assert_eq!((&held[0]["lease"], &held[0]["fence"]), (&"held".into(), &minted.into()), "{}", held[0]);
    assert!(leases(false).lines().any(|l| l.starts_with("lease ") && l.contains("(free)")), "released");
}

/// `drain run --resident` on the embedded default: the resident consumer starts
/// beside the beat and drains batches of its own, without a lease.
#[test]
fn resident_consumer_drains_on_the_embedded_default() {
    let mut cmd = drain();
    cmd.args(["run", "--resident"])
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "8")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "3600")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("resident consumer started", Duration::from_secs(20)), "{}", run.log());
    let batch = wait_report(&mut run, "resident batch", Duration::from_secs(20), |r| n(r, "submitted") > 0);
    let batch = batch.unwrap_or_else(|| panic!("no resident batch submitted anything:\n{}", run.log()));
    assert_eq!(batch["lease"], "off", "the resident consumer takes no lease: {batch}");
    assert_eq!(run.count("resident consumer started"), 1, "one per process");
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
}

/// With a foreign holder's lease on the queue, beat ticks skip, but the resident
/// consumer (no lease; the per-message claim covers it) still drains, and the
/// foreign lease is never touched.
#[test]
fn resident_consumer_drains_while_a_foreign_lease_skips_the_beat() {
    let server = redis();
    let key = "drain:lease:{requests}";
    let foreign = "other-host:00112233445566778899aabbccddeeff";
    assert_eq!(server.command(&["SET", key, foreign, "PX", "600000"]).unwrap(), Reply::Simple("OK".into()));
    let mut cmd = drain();
    cmd.args(["run", "--resident"])
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "8")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1");
    let mut run = Running::spawn(cmd);
    let batch = wait_report(&mut run, "resident batch", Duration::from_secs(20), |r| n(r, "submitted") > 0);
    assert!(batch.is_some(), "the resident consumer drains past the foreign lease:\n{}", run.log());
    let skipped = |run: &Running| run.reports("tick skipped: another tick holds the lease").len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while skipped(&run) < 2 && Instant::now() < deadline {
        run.wait_for("\u{0}", Duration::from_millis(200));
    }
    assert!(skipped(&run) >= 2, "beat ticks skip on the foreign lease:\n{}", run.log());
    assert_eq!(run.count("lease acquired"), 0, "{}", run.log());
    assert!(run.reports("tick done").is_empty(), "no beat tick drained:\n{}", run.log());
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
    assert_eq!(get(&server, key).as_deref(), Some(foreign), "the foreign lease is untouched");
    let submitted: u64 = run.reports("resident batch").iter().map(|r| n(r, "submitted")).sum();
    let claims = match server.command(&["KEYS", "drain:msg:*"]).unwrap() {
        Reply::Array(Some(keys)) => keys.len() as u64,
        other => panic!("{other:?}"),
    };
    assert!(
        submitted > 0 && claims >= submitted,
        "each submit went through a claim: {submitted} submitted, {claims} claims"
    );
}

/// A reader that closes standard output before `drain` writes (`drain config --json
/// | head -c1`): every subcommand ends quietly with its usual status, never with a
/// panic (before, `println!` panicked on the closed pipe about half the time).
#[test]
fn a_closed_stdout_ends_every_subcommand_quietly() {
    let server = redis();
    let cases: Vec<(Vec<&str>, bool)> = vec![
        (vec!["config"], false),
        (vec!["config", "--json"], false),
        (vec!["config", "--flags-markdown"], false),
        (vec!["run", "--once"], true),
        (vec!["leases"], true),
        (vec!["leases", "--json"], true),
        (vec!["doctor"], true),
        (vec!["simulate", "--json"], false),
        (vec!["--help"], false),
    ];
    for (args, with_redis) in cases {
        let mut cmd = drain();
        cmd.args(&args);
        if with_redis {
            cmd.env("DRAIN_REDIS_URL", server.url());
        }
        let mut child =
            cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn drain");
        drop(child.stdout.take()); // the reader is gone before anything is written
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("stderr");
        let status = child.wait().expect("wait");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(status.success(), "{args:?} exits with its usual status: {status:?}: {err}");
    }
}

/// `drain leases` shows a foreign writer's token (NUL, an escape sequence, a
/// newline, 200 characters) escaped and cut to its column, so the terminal gets no
/// control character and the rows stay aligned; `--json` keeps it in full.
#[test]
fn leases_escapes_foreign_tokens_and_keeps_its_columns() {
    let server = redis();
    let hostile = format!("evil\u{0}\u{1b}[2J\nhost{}:00", "x".repeat(200));
    let ok = Reply::Simple("OK".into());
    assert_eq!(server.command(&["SET", "drain:lease:{requests}", &hostile, "PX", "600000"]).expect("SET"), ok);
    assert_eq!(server.command(&["SET", "drain:claim:{tenant}", "w-2:ff", "PX", "600000"]).expect("SET"), ok);
    let mut cmd = drain();
    cmd.arg("leases").env("DRAIN_REDIS_URL", server.url());
    let out = output(cmd, LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(!table.chars().any(|c| c.is_control() && c != '\n'), "no raw control character: {table:?}");
    let rows: Vec<&str> = table.lines().take(3).collect();
    assert_eq!(rows.len(), 3, "header, lease, owner claim: {table}");
    let widths: Vec<usize> = rows.iter().map(|r| r.chars().count()).collect();
    assert!(widths.iter().all(|w| *w == widths[0]), "aligned rows {widths:?}:\n{table}");
    assert!(rows[1].contains("evil\\u{0}"), "escaped, not dropped: {table}");

    let mut cmd = drain();
    cmd.args(["leases", "--json"]).env("DRAIN_REDIS_URL", server.url());
    let v: serde_json::Value = serde_json::from_slice(&output(cmd, LIMIT).stdout).expect("JSON");
    assert_eq!(v["leases"][0]["holder"], hostile.rsplit_once(':').expect(":").0, "the full holder: {v}");
}

/// `drain leases` that cannot list: a Redis that is down is a temporary failure,
/// exit 1 (retrying may help), a wrong password a permanent one, exit 2 as every
/// fatal setting. Before, both exited 2, so a script could not tell an outage from
/// a setting to fix.
#[test]
fn leases_exits_1_when_redis_is_down_and_2_when_a_setting_is_wrong() {
    let mut cmd = drain();
    cmd.arg("leases").env("DRAIN_REDIS_URL", format!("redis://127.0.0.1:{}", free_port()));
    let out = output(cmd, LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("refused the connection"), "{err}");

    let server = RedisServer::start_with(&["--requirepass", "Right-Pw-3k"]);
    let mut cmd = drain();
    cmd.arg("leases").env("DRAIN_REDIS_URL", format!("redis://:Wrong-Pw@127.0.0.1:{}", server.port()));
    let out = output(cmd, LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("Wrong-Pw"), "no password in the message: {err}");
}

/// `drain simulate --svg` into a folder that does not exist fails at once, before
/// simulating (before: after the whole simulation, its table already printed).
#[test]
fn simulate_svg_into_a_missing_folder_fails_before_simulating() {
    let path = std::env::temp_dir().join(format!("drain-no-such-dir-{}", std::process::id())).join("chart.svg");
    let mut cmd = drain();
    cmd.args(["simulate", "--svg"]).arg(&path);
    let out = output(cmd, LIMIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(out.stdout.is_empty(), "nothing simulated: {}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("cannot write the chart") && err.contains("chart.svg"), "{err}");
}

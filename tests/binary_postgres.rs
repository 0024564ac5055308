//! The `drain` binary against a private PostgreSQL: the store chosen by
//! `DRAIN_STORE_URL`, `drain run`, `drain leases`, `drain doctor` and `drain config`
//! on it, tenants kept apart by prefix, the least-privilege role of
//! docs/operations.md, and no password in any output.

use std::process::Output;
use std::time::Duration;

use drain_e2e::postgres::{APP, OWNER, least_privilege, on, postgres, sql, url_with_password, value};
use drain_e2e::{Running, drain, free_port, metric, output, scrape};

/// The longest any one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);

/// The password in every URL (never checked by the private server, never shown).
const PASSWORD: &str = "Pg-Secret-7qW2x";

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `drain run --once` with the lease on and the demo burst drained quickly.
fn once(url: &str) -> std::process::Command {
    let mut c = on(url, &["run", "--once"]);
    c.env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on").env("SERVICEBUS_DRAIN_CONCURRENCY", "32");
    c
}

fn report(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("one JSON line ({e}): {}", text(out)))
}

fn no_password(out: &Output) {
    let shown = text(out);
    assert!(!shown.contains(PASSWORD), "the password shows:\n{shown}");
    assert!(!shown.contains("panicked"), "{shown}");
}

/// Take the queue lease `requests` under `prefix` for `holder` for ten minutes, as
/// another process would (through drain's own function).
fn foreign_lease(pg: &drain_e2e::postgres::PostgresServer, prefix: &str, holder: &str) {
    sql(
        pg,
        &format!(
            "SELECT acquired FROM drain.acquire('{prefix}', 'queue', 'requests', '{holder}:00ff', '{holder}', 600000000)"
        ),
    );
}

fn create_schema(pg: &drain_e2e::postgres::PostgresServer) {
    sql(pg, &adapter_postgres::schema_sql("drain").expect("schema sql"));
}

#[test]
fn the_store_url_puts_the_lease_and_the_claims_in_postgres_and_fences_grow() {
    let pg = postgres();
    let url = url_with_password(&pg, "postgres", PASSWORD);
    let mut first = once(&url);
    first.env("DRAIN_LOG", "trace");
    let out = output(first, LIMIT);
    let r = report(&out);
    no_password(&out);
    assert_eq!(r["lease"].as_str(), Some("held"), "{r}");
    let fence = r["fence"].as_u64().expect("a fence");
    let submitted = r["submitted"].as_u64().expect("submitted");
    assert!(submitted > 0, "{r}");
    assert!(text(&out).contains(&format!("postgres:***@127.0.0.1:{}", pg.port())), "the store is named, masked");
    // The schema was created on first use; the lease row stays, free, with its fence.
    let lease = sql(
        &pg,
        "SELECT fence::text, token FROM drain.leases WHERE prefix = 'drain' AND kind = 'queue' AND name = 'requests'",
    );
    assert_eq!(lease, [[Some(fence.to_string()), None]]);
    let done =
        value(&pg, "SELECT count(*)::text FROM drain.claims WHERE prefix = 'drain' AND queue = 'requests' AND done");
    assert_eq!(done, Some(submitted.to_string()), "one done claim per submitted message");
    let r = report(&output(once(&url), LIMIT));
    assert!(r["fence"].as_u64().is_some_and(|f| f > fence), "the fence only grows: {r}");
}

#[test]
fn a_foreign_lease_skips_the_tick_and_drain_leases_shows_its_holder_ttl_and_fence() {
    let pg = postgres();
    create_schema(&pg);
    foreign_lease(&pg, "drain", "other-host");
    let url = url_with_password(&pg, "postgres", PASSWORD);
    let out = output(once(&url), LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{\"queue\":\"requests\",\"skipped\":\"locked\"}\n");
    assert_eq!(value(&pg, "SELECT holder FROM drain.leases WHERE name = 'requests'").as_deref(), Some("other-host"));

    let table = output(on(&url, &["leases"]), LIMIT);
    assert!(table.status.success(), "{}", text(&table));
    no_password(&table);
    let stdout = String::from_utf8_lossy(&table.stdout);
    let row = stdout.lines().find(|l| l.starts_with("lease")).unwrap_or_else(|| panic!("a lease row:\n{stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    let minted = value(&pg, "SELECT fence::text FROM drain.leases WHERE name = 'requests'").expect("a fence");
    assert_eq!((cells[1], cells[2], cells[4]), ("requests", "other-host", minted.as_str()), "{row}");
    let ttl: f64 = cells[3].trim_end_matches('s').parse().expect("a TTL in seconds");
    assert!(ttl > 500.0 && ttl <= 600.0, "{row}");

    let json = output(on(&url, &["leases", "--json"]), LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&json)));
    let lease = &v["leases"][0];
    assert_eq!((lease["queue"].as_str(), lease["holder"].as_str()), (Some("requests"), Some("other-host")), "{v}");
    assert_eq!(lease["fence"], minted.as_str(), "{v}");
    assert!(lease["ttl_ms"].as_u64().is_some_and(|ms| ms > 500_000 && ms <= 600_000), "{v}");
}

#[test]
fn two_prefixes_on_one_database_never_see_each_other() {
    let pg = postgres();
    create_schema(&pg);
    foreign_lease(&pg, "tenant-a", "host-a");
    let url = pg.url();
    let mut b = once(&url);
    b.env("DRAIN_KEY_PREFIX", "tenant-b");
    let r = report(&output(b, LIMIT));
    assert_eq!(r["lease"].as_str(), Some("held"), "tenant-a's lease is not b's: {r}");
    let b_fence = r["fence"].as_u64().expect("a fence").to_string();
    let list = |prefix: &str| {
        let mut c = on(&url, &["leases", "--json"]);
        c.env("DRAIN_KEY_PREFIX", prefix);
        let out = output(c, LIMIT);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
    };
    let (a, b) = (list("tenant-a"), list("tenant-b"));
    assert_eq!(a["leases"].as_array().map(Vec::len), Some(1), "{a}");
    assert_eq!(a["leases"][0]["holder"], "host-a", "{a}");
    assert_eq!(a["message_claims"], serde_json::json!({}), "a's listing holds none of b's claims: {a}");
    assert_eq!(b["leases"].as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(
        (b["leases"][0]["holder"].is_null(), &b["leases"][0]["fence"]),
        (true, &serde_json::json!(b_fence)),
        "{b}"
    );
    assert!(b["message_claims"]["requests"]["done"].as_u64().is_some_and(|n| n > 0), "{b}");
    let rows = value(&pg, "SELECT count(*)::text FROM drain.claims WHERE prefix = 'tenant-a'");
    assert_eq!(rows.as_deref(), Some("0"), "b's claims carry b's prefix");
}

#[test]
fn the_least_privilege_role_runs_lists_and_passes_doctor() {
    let pg = postgres();
    least_privilege(&pg);
    let url = url_with_password(&pg, APP, PASSWORD);
    let r = report(&output(once(&url), LIMIT));
    assert_eq!(r["lease"], "held", "{r}");
    let json = output(on(&url, &["leases", "--json"]), LIMIT);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&json)));
    assert_eq!(v["leases"][0]["fence"], r["fence"].as_u64().expect("a fence").to_string(), "{v}");
    for mode in ["run", "leases", "owners"] {
        let out = output(on(&url, &["doctor", "--for", mode]), LIMIT);
        no_password(&out);
        assert!(out.status.success(), "doctor --for {mode}:\n{}", text(&out));
        assert!(
            text(&out).contains(&format!("role {APP} may run every function `drain {mode}` calls")),
            "{}",
            text(&out)
        );
    }
    // The role runs drain's functions and nothing else: not even a read of the tables.
    let direct = pg.sql_as(APP, "postgres", "SELECT count(*) FROM drain.leases");
    assert!(direct.as_ref().is_err_and(|e| e.to_string().contains("42501")), "{direct:?}");
    let owner_tables =
        value(&pg, "SELECT count(*)::text FROM pg_tables WHERE schemaname = 'drain' AND tableowner = 'drain_owner'");
    // leases, claims, waiters, schema_version, fence_marks, backlog_items, backlog_processed, drain_marks.
    assert_eq!(owner_tables.as_deref(), Some("8"), "the owner created them");
}

#[test]
fn doctor_prints_the_sql_when_the_schema_is_missing_names_missing_grants_and_leaves_nothing_behind() {
    let pg = postgres();
    sql(&pg, &format!("CREATE ROLE {APP} LOGIN"));
    let app = pg.url_for(APP, "postgres");
    let out = output(on(&app, &["doctor"]), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("FAIL  schema") && shown.contains(&format!("role {APP} may not create it")), "{shown}");
    let create = adapter_postgres::schema_sql("drain").expect("schema sql");
    let grants = adapter_postgres::grant_sql("drain", APP).expect("grant sql");
    assert!(shown.contains(create.trim_end()) && shown.contains(grants.trim_end()), "the SQL to run, whole:\n{shown}");

    // The superuser may create it: doctor says so, and creates nothing.
    let out = output(on(&pg.url(), &["doctor"]), LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("may create it"), "{}", text(&out));
    assert_eq!(value(&pg, "SELECT count(*)::text FROM pg_namespace WHERE nspname = 'drain'").as_deref(), Some("0"));

    // The SQL doctor printed, run by the owner, makes the role pass; before the grants it fails by name.
    sql(&pg, &format!("CREATE ROLE {OWNER} LOGIN; GRANT CREATE ON DATABASE postgres TO {OWNER}"));
    pg.sql_as(OWNER, "postgres", &create).expect("the owner runs the printed SQL");
    let out = output(on(&app, &["doctor"]), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("USAGE on schema drain, EXECUTE on drain.schema_version(), EXECUTE on drain.claim_batch()")
            && text(&out).contains(grants.trim_end()),
        "{}",
        text(&out)
    );
    pg.sql_as(OWNER, "postgres", &grants).expect("the owner runs the printed grants");
    let rows = "SELECT (SELECT count(*) FROM drain.leases) + (SELECT count(*) FROM drain.claims) + (SELECT count(*) FROM drain.waiters)";
    for mode in ["run", "leases", "owners"] {
        let out = output(on(&app, &["doctor", "--for", mode]), LIMIT);
        // `--for owners` too: the grants cover the backlogs and the release wake-up.
        assert!(out.status.success(), "doctor --for {mode}:\n{}", text(&out));
        assert_eq!(value(&pg, rows).as_deref(), Some("0"), "doctor --for {mode} left rows behind");
    }
}

#[test]
fn both_urls_an_unknown_scheme_or_a_bad_url_is_one_line_and_exit_2() {
    let bad = format!("postgres://drain:{PASSWORD}@127.0.0.1:notaport/app");
    /// The environment, and what the one line of stderr must name.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case<'_>; 3] = [
        (
            &[("DRAIN_STORE_URL", "postgres://127.0.0.1/app"), ("DRAIN_REDIS_URL", "redis://127.0.0.1:1")],
            &["DRAIN_STORE_URL", "DRAIN_REDIS_URL", "both"],
        ),
        (&[("DRAIN_STORE_URL", "mysql://127.0.0.1/app")], &["DRAIN_STORE_URL", "postgres://"]),
        (&[("DRAIN_STORE_URL", &bad)], &["DRAIN_STORE_URL", "not a PostgreSQL URL"]),
    ];
    for (env, needles) in cases {
        for sub in [&["run", "--once"][..], &["config"], &["leases"], &["doctor"]] {
            let mut c = drain();
            c.args(sub).envs(env.iter().copied());
            let out = output(c, LIMIT);
            assert_eq!(out.status.code(), Some(2), "{sub:?} {env:?}: {}", text(&out));
            no_password(&out);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.lines().count(), 1, "one line: {err}");
            assert!(needles.iter().all(|n| err.contains(n)), "{needles:?} in {err}");
        }
    }
}

#[test]
fn config_shows_the_store_masked_from_the_environment_or_the_file_and_hints_a_typo() {
    let url = format!("postgres://drain:{PASSWORD}@db.internal:5432/app");
    for json in [false, true] {
        let mut c = on(&url, &["config"]);
        if json {
            c.arg("--json");
        }
        c.env("DRAIN_STORE_ULR", "x");
        let out = output(c, LIMIT);
        assert!(out.status.success(), "{}", text(&out));
        no_password(&out);
        let shown = text(&out);
        assert!(
            shown.contains("DRAIN_STORE_URL") && shown.contains("postgres://drain:***@db.internal:5432/app"),
            "{shown}"
        );
        assert!(shown.contains("did you mean DRAIN_STORE_URL?"), "{shown}");
    }
    let dir = std::env::temp_dir().join(format!("drain-pg-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("drain.toml");
    std::fs::write(&file, format!("DRAIN_STORE_URL = \"{url}\"\n")).expect("write");
    let mut c = drain();
    c.arg("--config").arg(&file).args(["config", "--json"]);
    let out = output(c, LIMIT);
    let _ = std::fs::remove_dir_all(&dir);
    no_password(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    let entry = v.to_string();
    assert!(entry.contains("postgres://drain:***@db.internal:5432/app") && entry.contains("\"file\""), "{entry}");
}

#[test]
fn drain_run_names_the_store_masked_counts_its_round_trips_and_runs_owner_drains() {
    let pg = postgres();
    create_schema(&pg);
    // PostgreSQL keeps expired claims as rows: `drain run` purges them, and only them.
    sql(
        &pg,
        "INSERT INTO drain.claims (prefix, queue, id_type, id, done, expires_at) VALUES \
         ('drain', 'old', 'string', convert_to('expired', 'UTF8'), true, now() - interval '1 hour'), \
         ('drain', 'old', 'string', convert_to('live', 'UTF8'), true, now() + interval '1 hour')",
    );
    let port = free_port();
    let url = url_with_password(&pg, "postgres", PASSWORD);
    let mut cmd = on(&url, &["run", "--owners", "5"]);
    cmd.env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("PROJECTION_DRAIN_CLAIM_AWARE", "on")
        .env("PROJECTION_DRAIN_RELEASE_WAKE", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "1")
        .env("DRAIN_LOG", "trace")
        .env("DRAIN_METRICS_ADDR", format!("127.0.0.1:{port}"));
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("drain run: queue", Duration::from_secs(30)), "{}", run.log());
    let start = run.seen.iter().find(|l| l.contains("drain run: queue")).cloned().unwrap_or_default();
    assert!(
        start.contains(&format!("store postgres at postgres://postgres:***@127.0.0.1:{}/postgres", pg.port())),
        "{start}"
    );
    assert!(run.wait_for("tick done", Duration::from_secs(30)), "{}", run.log());
    // Owner turns take owner claims in the store (their rows stay for the fence).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let owners = || {
        value(&pg, "SELECT count(*)::text FROM drain.leases WHERE kind = 'owner'").and_then(|n| n.parse::<u64>().ok())
    };
    while owners().unwrap_or(0) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(owners().unwrap_or(0) > 0, "owner claims in PostgreSQL:\n{}", run.log());
    let old = || value(&pg, "SELECT string_agg(convert_from(id, 'UTF8'), ',') FROM drain.claims WHERE queue = 'old'");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while old().as_deref() != Some("live") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(old().as_deref(), Some("live"), "the expired claim was purged, the live one stays");
    // The owner drains use the release wake-up (a LISTEN connection of their own,
    // peeks that register waiters, releases that may notify one) and the drain stamps
    // (on by default): claims taken noting their start, released publishing a drained
    // turn's mark, peeks reading the marks.
    let listening = || {
        value(&pg, "SELECT count(*)::text FROM pg_stat_activity WHERE application_name ~ '^drain_[0-9a-f]{32}$'")
            .and_then(|n| n.parse::<u64>().ok())
    };
    assert!(listening().unwrap_or(0) >= 1, "a drain-wake connection LISTENs:\n{}", run.log());
    let body = scrape(port);
    let ops = ["acquire", "release", "claim_batch", "settle_batch", "purge_expired"];
    for op in ops.into_iter().chain(["acquire_marked", "release_drained", "peek_marked"]) {
        let n = metric(&body, &format!("drain_redis_op_duration_seconds_count{{op=\"{op}\"}}"));
        assert!(n.unwrap_or(0.0) >= 1.0, "{op} round trips counted: {n:?}\n{body}");
    }
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(15)).is_some_and(|s| s.success()), "{}", run.log());
    let log = run.log();
    assert!(!log.contains(PASSWORD), "the password shows in the log");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_server_that_is_down_fails_open_and_no_output_shows_the_password() {
    let url = format!("postgres://drain:{PASSWORD}@127.0.0.1:{}/app", free_port());
    let mut run = once(&url);
    run.env("SERVICEBUS_ATOMIC_CLAIM", "off").env("DRAIN_LOG", "trace");
    let out = output(run, LIMIT);
    no_password(&out);
    let r = report(&out);
    assert_eq!(r["lease"], "fail_open", "the lease fails open: {r}");
    assert!(text(&out).contains("postgres://drain:***@127.0.0.1"), "named, masked: {}", text(&out));
    for sub in [&["leases"][..], &["leases", "--json"], &["doctor"]] {
        let out = output(on(&url, sub), LIMIT);
        no_password(&out);
        assert!(!out.status.success(), "{sub:?}: {}", text(&out));
    }
}

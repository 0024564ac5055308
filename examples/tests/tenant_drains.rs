//! `tenant-drains` on a private PostgreSQL: three processes started together over
//! many tenants' jobs do every job exactly once, contend for tenants (held peeks,
//! lost claim races) and wake each other on release.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::Program;
use test_servers::PostgresServer;

const BIN: &str = env!("CARGO_BIN_EXE_tenant-drains");
const TENANTS: u64 = 24;
const JOBS: u64 = 2_400;

/// The one value of a one-row, one-column query, as a number.
fn number(pg: &PostgresServer, query: &str) -> u64 {
    let rows = pg.sql(query).unwrap_or_else(|e| panic!("{query}: {e}"));
    rows[0][0].as_deref().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{query}: {rows:?}"))
}

/// The sum of a report field over the processes (a field left out counts 0).
fn sum(reports: &[Value], field: &[&str]) -> u64 {
    reports.iter().map(|r| field.iter().fold(r, |v, f| &v[f]).as_u64().unwrap_or(0)).sum()
}

#[test]
fn three_processes_do_every_job_exactly_once_and_wake_each_other() {
    let pg = PostgresServer::start();
    pg.sql(include_str!("../sql/jobs.sql")).expect("the jobs table");
    let seed = format!(
        "INSERT INTO jobs (tenant) SELECT 'tenant-' || lpad((i % {TENANTS})::text, 2, '0') FROM generate_series(1, {JOBS}) i"
    );
    pg.sql(&seed).expect("seed the jobs");

    let mut all: Vec<Program> = ["p1", "p2", "p3"].iter().map(|me| Program::start(BIN, &[&pg.url(), me])).collect();
    let mut reports = Vec::new();
    for p in &mut all {
        let status = p.wait_exit(Duration::from_secs(60)).unwrap_or_else(|| panic!("still running:\n{}", p.output()));
        assert!(status.success(), "{status}\n{}", p.output());
        let line = p.stdout().last().cloned().unwrap_or_default();
        reports.push(serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {}", p.output())));
    }
    let shown: Vec<String> = reports.iter().map(Value::to_string).collect();
    let shown = shown.join("\n");

    assert_eq!(number(&pg, "SELECT count(*) FROM jobs WHERE done_by IS NULL"), 0, "jobs left undone");
    assert_eq!(number(&pg, "SELECT count(*) FROM jobs WHERE done_count <> 1"), 0, "jobs done twice:\n{shown}");
    // The processes met on tenants: some lost the race for a tenant's claim...
    assert!(sum(&reports, &["turns", "claim_busy"]) > 0, "no contention, so nothing was tested:\n{shown}");
    // ...and releases woke waiting processes (each release wakes one, and the woken
    // process heard it).
    assert!(sum(&reports, &["wakes_sent"]) > 0, "{shown}");
    assert!(sum(&reports, &["releases_heard"]) > 0, "{shown}");
    // Every job was done by one of the three, under a fence of its tenant's claim.
    let by = pg.sql("SELECT DISTINCT done_by FROM jobs ORDER BY 1").expect("who did the jobs");
    assert!(by.iter().all(|r| matches!(r[0].as_deref(), Some("p1" | "p2" | "p3"))), "{by:?}");
    assert_eq!(number(&pg, "SELECT count(*) FROM jobs WHERE done_fence IS NULL OR done_fence < 1"), 0);
}

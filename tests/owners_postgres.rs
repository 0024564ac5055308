//! `drain owners` on a private PostgreSQL: four processes, connected as the role of
//! docs/operations.md that may only run drain's functions (`grant_sql`), drain 200
//! owner backlogs holding 20,000 items in drain's tables with claim-aware admission
//! and the release wake-up (`LISTEN`/`NOTIFY`) on. Every item is processed exactly
//! once (checked by `drain_e2e::owners::run_owners` against the store's own count),
//! and the processes' reports show the wake-up at work: releases notified waiters,
//! each notification reached one process, and notifications ended claim waits. The
//! figures are printed; `cargo xtask bench` measures them (`tests/benches/owners.rs`).

use drain_e2e::owners::{FLEET, Store, run_owners};
use drain_e2e::postgres::{APP, least_privilege, postgres};

#[test]
fn four_processes_drain_every_item_once_on_postgres_and_releases_wake_waiters() {
    let Some(pg) = postgres() else { return };
    least_privilege(&pg);
    let url = pg.url_for(APP, "postgres");
    let env = [("PROJECTION_DRAIN_CLAIM_AWARE", "on"), ("PROJECTION_DRAIN_RELEASE_WAKE", "on")];
    let run = run_owners(&Store::Postgres(&pg, &url), FLEET, &env);
    eprintln!("drain owners on PostgreSQL, 4 processes, 200 owners, 20000 items: {}", run.figures("claim-aware+wake"));
    assert!(run.peeks > 0, "claim-aware admission peeked");
    assert!(run.productive > 0 && run.productive <= run.turns, "{run:?}");
    assert!(run.wakes_sent > 0, "releases notified waiters");
    assert!(run.releases_heard <= run.wakes_sent, "each notification reaches at most one process (no herd)");
    assert!(run.release_wakes > 0, "notifications ended claim waits");
    assert!(run.release_wakes <= run.releases_heard);
}

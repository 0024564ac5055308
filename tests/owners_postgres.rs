//! `drain owners` on a private PostgreSQL: four processes, connected as the role of
//! docs/operations.md that may only run drain's functions (`grant_sql`), drain 200
//! owner backlogs holding 20,000 items in drain's tables with claim-aware admission
//! and the release wake-up (`LISTEN`/`NOTIFY`) on. Every item is processed exactly
//! once (checked by `drain_e2e::owners::run_owners` against the store's own count),
//! and the processes' reports show the wake-up at work: releases notified waiters,
//! each notification reached one process, and notifications ended claim waits. The
//! figures are printed; `cargo xtask bench` measures them (`tests/benches/owners.rs`).
//! And a process SIGKILLed mid-batch loses nothing: the next one takes the stranded
//! batches first (docs/reliability.md, "Owner drains").

use std::time::{Duration, Instant};

use drain_e2e::owners::{FLEET, LIMIT, Store, run_owners};
use drain_e2e::postgres::{APP, least_privilege, postgres};
use drain_e2e::{Running, drain_bin, output};

#[test]
fn four_processes_drain_every_item_once_on_postgres_and_releases_wake_waiters() {
    let pg = postgres();
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

/// `drain owners` SIGKILLed while its turns hold batches in flight, then started again
/// (after the dead one's 2 s owner claims lapse): the new process takes the stranded
/// batches first (`recovered`) and every item is recorded exactly once.
#[test]
fn a_process_killed_mid_batch_on_postgres_loses_nothing() {
    let pg = postgres();
    drain_bin();
    let url = pg.url();
    let store = Store::Postgres(&pg, &url);
    store.seed(10, 300);
    let owners = |item_ms: u64| {
        let delay = (item_ms * 1000).to_string();
        let mut cmd = store.drain(&["owners", "--owners", "10", "--batch", "10", "--pass-ms", "100"]);
        cmd.args(["--item-delay-us", &delay, "--claim-ttl-seconds", "2"]).env("DRAIN_LOG", "info");
        cmd
    };
    let mut first = Running::spawn(owners(20));
    let deadline = Instant::now() + LIMIT;
    while store.recorded().0 < 60 {
        assert!(Instant::now() < deadline, "fewer than 60 items recorded: {}", first.log());
        first.wait_for("\u{0}", Duration::from_millis(20));
    }
    // Frozen at a moment batches are in flight (a frozen process changes nothing), then killed.
    let stranded = loop {
        first.freeze();
        std::thread::sleep(Duration::from_millis(20));
        let n = store.in_flight();
        if n > 0 || Instant::now() >= deadline {
            break n;
        }
        first.thaw();
        std::thread::sleep(Duration::from_millis(10));
    };
    drop(first); // SIGKILL
    assert!(stranded > 0, "killed mid-batch: batches were in flight");
    let out = output(owners(0), LIMIT);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("one JSON line ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success() && r["complete"] == true, "{r}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(r["recovered"].as_u64(), u64::try_from(stranded).ok(), "the stranded batches: {r}");
    assert_eq!((store.backlog(), store.in_flight()), (0, 0), "nothing left");
    assert_eq!(store.recorded(), (300, 0), "every item recorded, none twice");
}

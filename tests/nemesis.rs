//! Fences under a schedule of faults (`nemesis/`): holders of one lease on a managed
//! Redis (primary and replica behind a proxy) or PostgreSQL (behind a proxy, a copy
//! of its data standing for a standby) write to a resource elsewhere while a nemesis
//! fails the store over with its last writes lost, freezes a holder past the TTL,
//! slows the replies, partitions the address and restarts the store (Redis empty). The checker finds no fence handed out twice, no stale write accepted by
//! the checked resource and writes resuming within a TTL of each fault; in the same
//! run it finds stale writes on the unchecked resource, and on a hand-written
//! `SET NX` + `INCR` lease store it finds the repeated fence and the stall an empty
//! restart causes. `cargo xtask nemesis --minutes N` runs the schedule for longer.

#[path = "nemesis/mod.rs"]
mod nemesis;

use nemesis::check::{Fault, check};
use nemesis::harness::{Store, run};

#[test]
fn drain_s_fences_hold_through_a_schedule_of_faults() {
    let Some(history) = run(Store::Drain, &Fault::ALL) else { return };
    let verdict = check(&history);
    eprintln!("{}", verdict.table());
    eprintln!("{}", verdict.json("drain"));
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert!(verdict.unchecked > 0, "the same rule finds the stale writes the unchecked resource accepted");
}

#[test]
fn drain_s_fences_hold_on_postgres_through_a_schedule_of_faults() {
    let Some(history) = run(Store::Postgres, &Fault::ALL) else { return };
    let verdict = check(&history);
    eprintln!("{}", verdict.table());
    eprintln!("{}", verdict.json("postgres"));
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert!(verdict.unchecked > 0, "the same rule finds the stale writes the unchecked resource accepted");
}

#[test]
fn the_checker_catches_a_store_whose_fences_are_a_bare_counter() {
    let Some(history) = run(Store::CounterFences, &[Fault::Failover, Fault::EmptyRestart]) else { return };
    let verdict = check(&history);
    eprintln!("{}", verdict.table());
    assert_eq!(verdict.rules(), ["fence.unique", "writes.resume"], "{:#?}", verdict.violations);
}

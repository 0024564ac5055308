//! Fences under a schedule of faults (`nemesis/`): holders of one lease on a managed
//! Redis (primary and replica behind a proxy) or PostgreSQL (behind a proxy, a copy of
//! its data standing for a standby) write to a resource elsewhere while a nemesis fails
//! the store over with its last writes lost, freezes a holder past the TTL, slows the
//! replies, partitions the address and restarts the store (Redis empty). The checker
//! finds no fence handed out twice, no stale write accepted by the checked resource and
//! writes resuming within a TTL of each fault; in the same run it finds stale writes on
//! the unchecked resource, and on a hand-written `SET NX` + `INCR` lease store it finds
//! the repeated fence and the stall an empty restart causes. A fleet of `drain run`
//! processes on RabbitMQ, its lease and claims on Redis or PostgreSQL, goes through a
//! failover, a frozen lease holder and (Redis) an empty restart while a consumer checks
//! every fence (`nemesis/fleet.rs`), and `drain owners` processes on either store
//! record every item once through a frozen process, slow replies and a partition
//! (`nemesis/owners.rs`). `cargo xtask nemesis --minutes N` runs the schedules for
//! longer.

#[path = "nemesis/mod.rs"]
mod nemesis;

use nemesis::check::{Fault, check};
use nemesis::harness::{Store, run};
use nemesis::{fleet, fleet_check, owners};

#[test]
fn drain_s_fences_hold_through_a_schedule_of_faults() {
    let history = run(Store::Drain, &Fault::ALL);
    let verdict = check(&history);
    eprintln!("{}", verdict.table());
    eprintln!("{}", verdict.json("drain"));
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert!(verdict.unchecked > 0, "the same rule finds the stale writes the unchecked resource accepted");
}

#[test]
fn drain_s_fences_hold_on_postgres_through_a_schedule_of_faults() {
    let history = run(Store::Postgres, &Fault::ALL);
    let verdict = check(&history);
    eprintln!("{}", verdict.table());
    eprintln!("{}", verdict.json("postgres"));
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert!(verdict.unchecked > 0, "the same rule finds the stale writes the unchecked resource accepted");
}

#[test]
fn the_checker_catches_a_store_whose_fences_are_a_bare_counter() {
    let history = run(Store::CounterFences, &[Fault::Failover, Fault::EmptyRestart]);
    let verdict = check(&history);
    eprintln!("{}", verdict.table());
    assert_eq!(verdict.rules(), ["fence.unique", "writes.resume"], "{:#?}", verdict.violations);
}

/// A fleet of `drain run` processes on RabbitMQ, the lease and claims on a managed
/// Redis: a failover that loses the last writes, the lease holder frozen past the
/// TTL, an empty restart. The consumer checks every fence.
#[test]
fn a_fleet_of_drain_processes_keeps_fences_and_messages_through_failover_freeze_and_restart() {
    fleet_holds(Store::Drain, &[Fault::Failover, Fault::FrozenHolder, Fault::EmptyRestart]);
}

/// The same fleet with the lease and claims on PostgreSQL behind the proxy: a failover
/// to a standby that lost the last commits, and the lease holder frozen past the TTL.
#[test]
fn a_fleet_on_postgres_keeps_fences_and_messages_through_failover_and_freeze() {
    fleet_holds(Store::Postgres, &[Fault::Failover, Fault::FrozenHolder]);
}

fn fleet_holds(store: Store, faults: &[Fault]) {
    let history = fleet::run(store, faults);
    let verdict = fleet_check::check(&history);
    eprintln!("{}", verdict.table());
    eprintln!("{}", verdict.json());
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert!(verdict.ticks > 0 && verdict.fed > 0, "the fleet ran: {}", verdict.json());
}

/// The fleet checker on histories with one rule broken each: it names that rule, and
/// the sound history it starts from breaks none.
#[test]
fn the_fleet_checker_finds_each_broken_rule() {
    use std::time::Duration;

    use nemesis::check::FaultRun;
    use nemesis::fleet_check::{Arrival, FleetHistory, Tick};

    let s = Duration::from_secs;
    let sound = || {
        let fed: Vec<String> = (0..4).map(|n| format!("m{n}")).collect();
        let arrive = |id: &str, fence, at| Arrival { id: id.to_owned(), fence: Some(fence), at: s(at), refused: false };
        FleetHistory {
            arrivals: vec![arrive("m0", 5, 1), arrive("m1", 5, 2), arrive("m2", 9, 14), arrive("m3", 9, 15)],
            fed,
            ticks: [(0, 5), (1, 9)]
                .map(|(instance, fence)| Tick { instance, fence, possible_duplicates: 0, lease_lost: false })
                .to_vec(),
            faults: vec![FaultRun { fault: Fault::Failover, from: s(3), to: s(5) }],
            left_in_source: 0,
            ttl: s(10),
            took: s(20),
        }
    };
    assert!(fleet_check::check(&sound()).violations.is_empty());

    let mut repeated = sound();
    repeated.ticks[1].fence = 5;
    let mut lost = sound();
    lost.arrivals.pop();
    let mut twice = sound();
    twice.arrivals.push(Arrival { at: s(16), ..twice.arrivals[3].clone() });
    let mut stalled = sound();
    stalled.arrivals.iter_mut().skip(2).for_each(|a| a.at = s(18));
    let mut unstamped = sound();
    unstamped.arrivals[0].fence = None;
    for (history, rule) in [
        (repeated, "fence.unique"),
        (unstamped, "fence.stamped"),
        (lost, "delivery.lost"),
        (twice, "delivery.once"),
        (stalled, "writes.resume"),
    ] {
        assert_eq!(fleet_check::check(&history).rules(), [rule]);
    }
    let mut explained = sound();
    explained.arrivals.push(Arrival { at: s(16), ..explained.arrivals[3].clone() });
    explained.ticks[1].possible_duplicates = 1;
    assert!(fleet_check::check(&explained).violations.is_empty(), "a counted duplicate is no violation");
}

/// `drain owners` processes on the managed Redis: one frozen past its owner claims'
/// TTL, slow replies, a partition. Every item recorded once, every process complete.
#[test]
fn owner_drains_record_every_item_once_through_a_freeze_slow_replies_and_a_partition() {
    owners_hold(Store::Drain);
}

/// The same on PostgreSQL behind the proxy.
#[test]
fn owner_drains_on_postgres_record_every_item_once_through_a_freeze_slow_replies_and_a_partition() {
    owners_hold(Store::Postgres);
}

fn owners_hold(store: Store) {
    let verdict = owners::run(store, &owners::FAULTS);
    let (n, twice, took) = (verdict.recorded, verdict.twice, verdict.took.as_secs_f64());
    eprintln!("through {:?}: {n} items recorded ({twice} twice) in {took:.1} s", verdict.faults);
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
}

//! The async owner-drain driver on virtual time with the in-memory store.

use std::sync::Arc;
use std::time::Duration;

use drain_core::admission::{DriverPorts, OwnerId, Scheduler, SchedulerConfig, drive};
use drain_core::event::{Event, SkipReason};
use drain_core::memory::{ManualClock, MemoryStore, block_on};
use drain_core::ports::Clock;
use drain_core::ports::LeaseName;
use drain_core::testkit::{BacklogWork, RecordingObserver};
use drain_core::{ErrorKind, Switch};
use futures::stream;
use rand::SeedableRng;
use rand::rngs::SmallRng;

struct World {
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
    work: BacklogWork,
    observer: RecordingObserver,
}

fn world(per_turn: u64) -> World {
    let clock = Arc::new(ManualClock::new());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = Arc::new(MemoryStore::new(dyn_clock.clone()));
    let work = BacklogWork::new("me", store.clone(), dyn_clock, per_turn, Duration::from_millis(100));
    World { clock, store, work, observer: RecordingObserver::new() }
}

fn owners(names: &[&str]) -> Vec<OwnerId> {
    names.iter().map(|n| OwnerId::from(*n)).collect()
}

fn config(mode: Switch, workers: usize) -> SchedulerConfig {
    {
        let mut m = SchedulerConfig::default();
        m.claim_aware = mode;
        m.workers = workers;
        m
    }
}

fn run(w: &World, cfg: SchedulerConfig, requests: Vec<OwnerId>, shutdown_at: Option<Duration>) {
    let mut s = Scheduler::new(cfg, SmallRng::seed_from_u64(7));
    let ports = DriverPorts { claims: Some(&*w.store), work: &w.work, clock: &*w.clock, observer: &w.observer };
    let clock = w.clock.clone();
    let shutdown = async move {
        match shutdown_at {
            Some(d) => clock.sleep_until(drain_core::Time::ZERO + d).await,
            None => futures::future::pending::<()>().await,
        }
    };
    block_on(&w.clock, drive(&mut s, ports, stream::iter(requests), shutdown));
}

#[test]
fn every_requested_owner_is_drained_then_the_driver_returns() {
    let w = world(5);
    let os = owners(&["a", "b", "c"]);
    for (i, o) in os.iter().enumerate() {
        w.work.add(o, 3 + 4 * i as u64);
    }
    run(&w, config(Switch::On, 2), [os.clone(), os.clone()].concat(), None);
    for o in &os {
        assert_eq!(w.work.backlog(o), 0, "{o} drained");
    }
    let (turns, busy) = w.work.turns();
    assert_eq!(busy, 0, "one instance never races itself");
    assert_eq!(turns, 1 + 2 + 3, "a:3 (1 turn), b:7 (2), c:11 (3); the repeated requests coalesced");
    assert!(w.work.handed_off().is_empty());
}

#[test]
fn peeks_of_waiting_owners_go_out_in_one_round_trip() {
    let w = world(1);
    let os = owners(&["a", "b", "c", "d"]);
    for o in &os {
        w.work.add(o, 1);
    }
    run(&w, config(Switch::On, 4), os, None);
    // With drain stamps (the default) the one peek is the marked one.
    assert_eq!(w.store.calls().get("peek_stamped"), Some(&1), "{:?}", w.store.calls());
    assert_eq!(w.store.calls().get("peek_owners"), None);
    assert_eq!(w.store.calls().get("peek"), None);
}

#[test]
fn a_held_claim_defers_the_owner_until_it_is_free() {
    let w = world(10);
    let a = OwnerId::from("a");
    w.work.add(&a, 2);
    // Someone else holds a's claim for 20 s.
    w.store.put_lease(&LeaseName::owner("a"), "other:1", Duration::from_secs(20));
    run(&w, config(Switch::On, 1), vec![a.clone()], None);
    assert_eq!(w.work.backlog(&a), 0);
    let skipped =
        w.observer.count(|e| matches!(e, Event::OwnerSkipped { reason: SkipReason::ClaimBusy, mode: Switch::On }));
    assert!(skipped >= 1, "deferred while held");
    let (turns, busy) = w.work.turns();
    assert_eq!((turns, busy), (1, 0), "no wasted turn: it launched only once the claim was free");
    assert!(w.clock.now().as_millis() >= 20_000, "it waited for the holder");
}

#[test]
fn legacy_off_spins_on_a_held_claim_while_claim_aware_waits() {
    // Off: launches at once, loses the race, re-enters immediately, again and again.
    let w = world(10);
    let a = OwnerId::from("a");
    w.work.add(&a, 1);
    w.store.put_lease(&LeaseName::owner("a"), "other:1", Duration::from_secs(2));
    // A claim race takes no virtual time, so the legacy spin would never let the clock
    // reach the holder's expiry: bound it with a shutdown at t = 3 s.
    run(&w, config(Switch::Off, 1), vec![a.clone()], Some(Duration::from_secs(3)));
    let (_, busy_off) = w.work.turns();
    assert!(busy_off > 0, "legacy launches into a held claim");
    assert_eq!(w.store.calls().get("peek_owners"), None, "Off never peeks");
}

#[test]
fn peek_errors_admit_the_owner() {
    let w = world(10);
    let a = OwnerId::from("a");
    w.work.add(&a, 1);
    // Peeks fail, but the turn's acquire must work: fail only the first call.
    w.store.fail_next(1);
    run(&w, config(Switch::On, 1), vec![a.clone()], None);
    assert_eq!(w.work.backlog(&a), 0);
    assert_eq!(w.observer.count(|e| matches!(e, Event::PeekError)), 1);
}

#[test]
fn shutdown_hands_off_pending_intents_and_awaits_running_turns() {
    let w = world(10);
    let os = owners(&["a", "b", "c"]);
    for o in &os {
        w.work.add(o, 50); // 5 s per turn at 100 ms an item
    }
    run(&w, config(Switch::On, 1), os.clone(), Some(Duration::from_secs(1)));
    let handed: Vec<String> = w.work.handed_off().iter().map(|o| o.as_str().to_owned()).collect();
    let mut sorted = handed.clone();
    sorted.sort();
    assert_eq!(sorted, ["a", "b", "c"], "queued b, c at close; running a would continue: all handed off");
    assert_eq!(w.work.done(&os[0]), 10, "the running turn completed, it was not dropped");
    assert_eq!(w.work.turns().0, 1);
}

#[test]
fn a_failing_claim_store_backs_off_and_recovers() {
    let w = world(10);
    let a = OwnerId::from("a");
    w.work.add(&a, 1);
    w.store.set_failing(Some(ErrorKind::Connection));
    let clock = w.clock.clone();
    let store = w.store.clone();
    // Heal the store after 3 s of virtual time, from a side task.
    let healer = async move {
        clock.sleep_until(drain_core::Time::from_millis(3_000)).await;
        store.set_failing(None);
    };
    let mut s = Scheduler::new(config(Switch::On, 1), SmallRng::seed_from_u64(3));
    let ports = DriverPorts { claims: Some(&*w.store), work: &w.work, clock: &*w.clock, observer: &w.observer };
    block_on(&w.clock, async {
        futures::join!(healer, drive(&mut s, ports, stream::iter(vec![a.clone()]), futures::future::pending::<()>()));
    });
    assert_eq!(w.work.backlog(&a), 0, "drained after the store healed");
    assert!(
        w.observer.count(|e| matches!(e, Event::OwnerTurn { outcome: drain_core::admission::TurnOutcome::Failed }))
            >= 1
    );
}

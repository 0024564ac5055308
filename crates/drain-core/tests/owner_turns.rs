//! `OwnerTurns` in virtual time: a fleet of instances on one in-memory store, each
//! turn taking its own claim; waiters registered by the driver alone; a panicking
//! turn released and survived; a permanent error stopping the driver.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drain_core::admission::{
    DriverPorts, Entry, OwnerId, OwnerTurns, OwnerWork, Scheduler, SchedulerConfig, TurnOutcome, Worked, drive,
};
use drain_core::event::Event;
use drain_core::memory::{ManualClock, MemoryStore, block_on};
use drain_core::ports::{Clock, Fence, LeaseName};
use drain_core::testkit::{RecordingObserver, TestRng};
use drain_core::{ErrorKind, PortError, Switch};
use futures::future::join_all;
use futures::stream;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// Backlogs per owner, and every item worked, with the fence it was worked under.
#[derive(Default)]
struct Backlogs {
    left: Mutex<BTreeMap<OwnerId, u64>>,
    worked: Mutex<Vec<(OwnerId, u64, u64)>>,
}

impl Backlogs {
    /// One turn: up to 3 items, 100 ms each, under the claim.
    async fn turn(&self, clock: &ManualClock, owner: OwnerId, fence: Fence) -> Result<Worked, PortError> {
        let take = {
            let mut left = self.left.lock().unwrap();
            let n = left.entry(owner.clone()).or_default();
            let take = (*n).min(3);
            *n -= take;
            take
        };
        for _ in 0..take {
            clock.sleep_until(clock.now() + Duration::from_millis(100)).await;
            let fence = fence.number();
            let mut worked = self.worked.lock().unwrap();
            let seq = worked.iter().filter(|(o, _, _)| *o == owner).count() as u64;
            worked.push((owner.clone(), seq, fence));
        }
        let more = self.left.lock().unwrap().get(&owner).copied().unwrap_or(0) > 0;
        Ok(Worked { items: take, more })
    }
}

fn config() -> SchedulerConfig {
    config_skipping(Switch::On)
}

fn config_skipping(skip_served: Switch) -> SchedulerConfig {
    {
        let mut m = SchedulerConfig::default();
        m.skip_served = skip_served;
        m.claim_aware = Switch::On;
        m.release_wake = Switch::On;
        m.workers = 2;
        m.backoff_min = Duration::from_secs(5);
        m.backoff_max = Duration::from_secs(15);
        m
    }
}

/// Three instances, 12 owners of 7 items each, every owner requested of every
/// instance: each item is worked exactly once, under a claim, and the driver's peeks
/// and the turns' lost races registered waiters that releases woke, with nothing wired
/// but the store as `claims`; with drain stamps (switch On) through the marked calls,
/// which also drop requests a drain served, and without them (Off) through the plain
/// wake-up calls alone.
#[test]
fn a_fleet_works_every_item_once_and_wakes_waiters_by_itself() {
    for skip in [Switch::On, Switch::Off] {
        fleet_works_every_item_once(skip);
    }
}

fn fleet_works_every_item_once(skip: Switch) {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
    let backlogs = Backlogs::default();
    let owners: Vec<OwnerId> = (0..12).map(|i| OwnerId::from(format!("tenant-{i}").as_str())).collect();
    for o in &owners {
        backlogs.left.lock().unwrap().insert(o.clone(), 7);
    }
    let observer = RecordingObserver::new();
    let instances: Vec<_> = (0..3)
        .map(|i| {
            let turns =
                OwnerTurns::new(&*store, &*clock, format!("i{i}"), Duration::from_secs(10), TestRng::new(i), |o, h| {
                    backlogs.turn(&clock, o, h)
                });
            if skip == Switch::Off { turns.without_marks() } else { turns }
        })
        .collect();
    let drivers = instances.iter().enumerate().map(|(i, turns)| {
        let mut s = Scheduler::new(config_skipping(skip), SmallRng::seed_from_u64(i as u64));
        let ports = DriverPorts { claims: Some(&*store), work: turns, clock: &*clock, observer: &observer };
        let requests = stream::iter(owners.clone());
        async move { drive(&mut s, ports, requests, futures::future::pending::<()>()).await }
    });
    block_on(&clock, join_all(drivers));

    let worked = backlogs.worked.lock().unwrap().clone();
    assert_eq!(worked.len(), 12 * 7, "every item once");
    assert!(backlogs.left.lock().unwrap().values().all(|n| *n == 0));
    assert!(worked.iter().all(|(_, _, fence)| *fence > 0), "every item under a claim's fence");
    for o in &owners {
        assert_eq!(store.lease_token(&LeaseName::owner(o.as_str())), None, "{o}: released");
    }
    let calls = store.calls();
    let count = |op: &str| calls.get(op).copied().unwrap_or(0);
    let (peeks, releases) = match skip {
        Switch::Off => ("peek_and_wait", "release_and_wake"),
        _ => ("peek_stamped", "release_drained"),
    };
    assert!(count(peeks) > 0, "{skip:?}: peeks registered waiters: {calls:?}");
    assert_eq!(count("peek_owners"), 0, "{skip:?}: no peek went around the wake-up: {calls:?}");
    assert!(count(releases) > 0, "{skip:?}: {calls:?}");
    let unused = if skip == Switch::Off {
        ["peek_stamped", "acquire_stamped", "release_drained"]
    } else {
        ["peek_and_wait", "acquire_or_wait", "release_and_wake"]
    };
    assert!(unused.iter().all(|op| count(op) == 0), "{skip:?}: {calls:?}");
    let served =
        observer.count(|e| matches!(e, Event::OwnerSkipped { reason: drain_core::event::SkipReason::Served, .. }));
    assert_eq!(served > 0, skip == Switch::On, "{skip:?}: requests a drain served, dropped only with the marks");
    assert!(observer.count(|e| matches!(e, Event::ReleaseWake { .. })) > 0, "a release woke a waiter");
    assert!(instances.iter().all(|t| t.fatal().is_none() && t.panics() == 0));
}

/// A turn that panics is released and counted; the driver goes on with the others,
/// and the panicked owner is served again after its failure backoff.
#[test]
fn a_panicking_turn_is_released_and_the_driver_goes_on() {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
    let panicked = Mutex::new(false);
    let served = Mutex::new(Vec::new());
    let turns = OwnerTurns::new(&*store, &*clock, "me", Duration::from_secs(10), TestRng::new(1), |o, _| {
        let first = o.as_str() == "bad" && !std::mem::replace(&mut *panicked.lock().unwrap(), true);
        served.lock().unwrap().push(o.clone());
        async move {
            assert!(!first, "the work broke");
            Ok(Worked { items: 1, more: false })
        }
    });
    let mut s = Scheduler::new(config(), SmallRng::seed_from_u64(1));
    let observer = RecordingObserver::new();
    let ports = DriverPorts { claims: Some(&*store), work: &turns, clock: &*clock, observer: &observer };
    let requests = stream::iter(["bad", "good"].map(OwnerId::from));
    block_on(&clock, drive(&mut s, ports, requests, futures::future::pending::<()>()));
    assert_eq!(turns.panics(), 1);
    assert_eq!(store.lease_token(&LeaseName::owner("bad")), None, "the panicked turn's claim is released");
    let served = served.lock().unwrap().clone();
    assert_eq!(served.iter().filter(|o| o.as_str() == "bad").count(), 2, "served again after its backoff: {served:?}");
    assert!(served.iter().any(|o| o.as_str() == "good"));
}

/// A permanent error stops the driver (a shutdown's close: pending owners handed off),
/// where a temporary one only fails the turn.
#[test]
fn a_permanent_error_stops_the_driver() {
    for (kind, stops) in [(ErrorKind::Permission, true), (ErrorKind::Connection, false)] {
        let clock = Arc::new(ManualClock::new());
        let store = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
        let calls = Mutex::new(0u32);
        let turns = OwnerTurns::new(&*store, &*clock, "me", Duration::from_secs(10), TestRng::new(1), |_, _| {
            let n = {
                let mut c = calls.lock().unwrap();
                *c += 1;
                *c
            };
            async move {
                if n == 1 {
                    Err(PortError::new(kind, "the store refused"))
                } else {
                    Ok(Worked { items: 1, more: false })
                }
            }
        });
        let cfg = {
            let mut m = config();
            m.workers = 1;
            m
        };
        let mut s = Scheduler::new(cfg, SmallRng::seed_from_u64(1));
        let observer = RecordingObserver::new();
        let ports = DriverPorts { claims: Some(&*store), work: &turns, clock: &*clock, observer: &observer };
        let requests = stream::iter(["a", "b", "c"].map(OwnerId::from));
        block_on(&clock, drive(&mut s, ports, requests, futures::future::pending::<()>()));
        let ran = *calls.lock().unwrap();
        if stops {
            assert_eq!(ran, 1, "{kind:?}: nothing runs after a permanent error");
            assert_eq!(turns.fatal().map(|e| e.kind), Some(kind));
            assert_eq!(turns.take_handed_off().len(), 3, "a's retry, b and c are handed back, not lost");
        } else {
            assert_eq!(ran, 4, "{kind:?}: a failed, retried after its backoff; b and c ran");
            assert!(turns.fatal().is_none());
        }
    }
}

/// A held claim makes the turn claim-busy without running the work; once it is
/// free, the turn runs it.
#[test]
fn a_held_claim_is_claim_busy_and_runs_nothing() {
    let clock = Arc::new(ManualClock::new());
    let store = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
    store.put_lease(&LeaseName::owner("a"), "other:00000000000000000000000000000001", Duration::from_secs(3));
    let ran = Mutex::new(0);
    let turns = OwnerTurns::new(&*store, &*clock, "me", Duration::from_secs(10), TestRng::new(1), |_, _| {
        *ran.lock().unwrap() += 1;
        async { Ok(Worked { items: 1, more: false }) }
    });
    let a = OwnerId::from("a");
    let turn = || block_on(&clock, turns.turn(&a, Entry::Initial, None));
    assert_eq!((turn(), *ran.lock().unwrap()), (TurnOutcome::ClaimBusy, 0));
    clock.advance(Duration::from_secs(3));
    assert_eq!((turn(), *ran.lock().unwrap()), (TurnOutcome::Productive { more: false }, 1));
    assert_eq!(store.lease_token(&LeaseName::owner("a")), None);
}

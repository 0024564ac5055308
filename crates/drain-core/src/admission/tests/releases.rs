//! `drive_with_releases` (the driver fed releases by hand) on virtual time: a release notification ends a claim wait
//! early when release wake-up is On, and changes nothing when it is Off.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::{DriverPorts, OwnerId, Scheduler, SchedulerConfig, driver::drive_with_releases};
use crate::error::PortError;
use crate::event::{Event, SkipReason};
use crate::layer::{Call, Forward, Hooks, Run};
use crate::memory::{ManualClock, MemoryStore, block_on};
use crate::ports::{Clock, LeaseName, StoreOffers};
use crate::switch::Switch;
use crate::testkit::{BacklogWork, RecordingObserver};
use crate::time::Time;
use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use rand::SeedableRng;
use rand::rngs::SmallRng;

struct Outcome {
    /// Virtual time when the driver returned.
    ended_ms: u64,
    turns: u64,
    claim_busy: u64,
    backlog: u64,
    wakes: Vec<Switch>,
    held_peeks: usize,
}

/// Hooks on the in-memory store that answer each batched peek `delay` after reading
/// it (a slow round trip), so a release can arrive while the peek is outstanding. The
/// releases come by hand, so the store offers no wake-up or stamps of its own.
struct SlowPeeks {
    clock: Arc<ManualClock>,
    delay: Duration,
}

#[async_trait]
impl Hooks for SlowPeeks {
    async fn around(&self, call: Call<'_>, run: Run<'_>) -> Result<(), PortError> {
        let found = run.await;
        if matches!(call, Call::PeekOwners(_)) {
            self.clock.sleep_until(self.clock.now() + self.delay).await;
        }
        found
    }

    fn offers(&self, _: StoreOffers) -> StoreOffers {
        StoreOffers::NONE
    }
}

/// Owner `a` has 2 items; someone else holds its claim until t = `held_ms` and the
/// release is reported at t = `release_at_ms` (never when `None`); each peek answers
/// `peek_ms` after it read the claim.
struct Case {
    release_wake: Switch,
    release_at_ms: Option<u64>,
    held_ms: u64,
    peek_ms: u64,
}

fn run(release_wake: Switch, release_at_ms: Option<u64>) -> Outcome {
    run_case(Case { release_wake, release_at_ms, held_ms: 900, peek_ms: 0 })
}

fn run_case(Case { release_wake, release_at_ms, held_ms, peek_ms }: Case) -> Outcome {
    let clock = Arc::new(ManualClock::new());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = Arc::new(MemoryStore::new(dyn_clock.clone()));
    let work = BacklogWork::new("me", store.clone(), dyn_clock, 10, Duration::from_millis(100));
    let observer = RecordingObserver::new();
    let a = OwnerId::from("a");
    work.add(&a, 2);
    store.put_lease(&LeaseName::owner("a"), "other:1", Duration::from_millis(held_ms));
    let peeks = Forward::new(store.clone(), SlowPeeks { clock: clock.clone(), delay: Duration::from_millis(peek_ms) });

    let cfg = SchedulerConfig { claim_aware: Switch::On, release_wake, workers: 1, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(cfg, SmallRng::seed_from_u64(7));
    let ports = DriverPorts { claims: Some(&peeks), work: &work, clock: &*clock, observer: &observer };
    let release_clock = clock.clone();
    let owner = a.clone();
    let releases = match release_at_ms {
        Some(ms) => stream::once(async move {
            release_clock.sleep_until(Time::from_millis(ms)).await;
            owner
        })
        .boxed(),
        None => stream::empty().boxed(),
    };
    block_on(
        &clock,
        drive_with_releases(&mut s, ports, stream::iter(vec![a.clone()]), releases, futures::future::pending::<()>()),
    );
    let (turns, claim_busy) = work.turns();
    Outcome {
        ended_ms: clock.now().as_millis(),
        turns,
        claim_busy,
        backlog: work.backlog(&a),
        wakes: observer
            .events()
            .iter()
            .filter_map(|e| if let Event::ReleaseWake { mode } = e { Some(*mode) } else { None })
            .collect(),
        held_peeks: observer.count(|e| matches!(e, Event::OwnerSkipped { reason: SkipReason::ClaimBusy, .. })),
    }
}

#[test]
fn a_release_ends_the_claim_wait_early() {
    let on = run(Switch::On, Some(1_000));
    assert_eq!(on.backlog, 0, "drained");
    assert_eq!(on.held_peeks, 1, "deferred once by the held peek");
    assert_eq!(on.wakes, [Switch::On], "the release woke it");
    assert_eq!((on.turns, on.claim_busy), (1, 0), "one turn, after the release, into a free claim");
    assert!(on.ended_ms < 5_000, "woken at 1 s, before the 5-15 s backstop: ended at {} ms", on.ended_ms);
}

#[test]
fn off_and_shadow_ignore_releases_and_wait_for_the_backstop() {
    let quiet = run(Switch::On, None);
    assert!(quiet.ended_ms >= 5_000, "no release: the backstop timer ({} ms)", quiet.ended_ms);
    for (mode, wakes) in [(Switch::Off, vec![]), (Switch::Shadow, vec![Switch::Shadow])] {
        let o = run(mode, Some(1_000));
        assert_eq!(o.backlog, 0, "{mode:?}: drained");
        assert_eq!(o.wakes, wakes, "{mode:?}: Off is silent, Shadow counts what it would wake");
        assert_eq!((o.turns, o.claim_busy), (1, 0), "{mode:?}");
        assert_eq!(o.ended_ms, quiet.ended_ms, "{mode:?}: behaves as if no release came");
    }
}

#[test]
fn a_stale_release_costs_a_peek_not_a_turn() {
    let o = run(Switch::On, Some(5));
    // At 5 ms the owner was already on its claim timer (peeked at 0 ms): woken, but
    // the claim is still held until 900 ms, so it is peeked held and deferred again.
    assert_eq!(o.backlog, 0);
    assert_eq!(o.held_peeks, 2, "a release someone else still holds costs a peek, not a turn");
    assert_eq!((o.turns, o.claim_busy), (1, 0));
}

#[test]
fn a_release_that_overtakes_the_held_peek_is_applied_when_the_peek_answers() {
    // The peek reads the held claim at 0 ms and answers at 100 ms; the holder releases
    // (claim gone at 40 ms) and the notification arrives at 50 ms, before the answer
    // that makes the owner wait: kept, then applied, so it is peeked again at 100 ms.
    let case = |release_wake| Case { release_wake, release_at_ms: Some(50), held_ms: 40, peek_ms: 100 };
    let on = run_case(case(Switch::On));
    assert_eq!(on.wakes, [Switch::On], "the early release woke the owner");
    assert_eq!((on.turns, on.claim_busy, on.backlog), (1, 0, 0));
    assert!(on.ended_ms < 1_000, "not the 5-15 s backstop: ended at {} ms", on.ended_ms);
    // Applied when the slow peek answered (100 ms), not when it came (50 ms): the next
    // peek answers at 200 ms, then the turn works two items of 100 ms.
    assert_eq!(on.ended_ms, 400, "the release was applied before the held peek answered");
    let off = run_case(case(Switch::Off));
    assert!(off.wakes.is_empty() && off.ended_ms >= 5_000, "Off waits for the timer ({} ms)", off.ended_ms);
}

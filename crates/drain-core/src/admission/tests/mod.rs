//! Unit tests of the scheduler rules, one `check` helper per boundary.
//!
//! * [`admit`]: requests, peeks and the order of launches.
//! * [`retry`]: turn outcomes, both backoffs and the timer cap.
//! * [`lifecycle`]: close, events, determinism and scale.
//! * [`served`]: requests a drain stamp shows served.
//! * [`wake`]: release wake-up, examples and properties.
//! * `releases`: the driver fed release notifications, in virtual time.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::*;
use crate::event::{Event, SkipReason};
use crate::switch::Switch::{self, Off, On, Shadow};
use crate::time::Time;

use Entry::{Continuation, Initial};
use TurnOutcome::{ClaimBusy, Done, Failed, Productive};

mod admit;
mod lifecycle;
#[cfg(feature = "testkit")]
mod releases;
mod retry;
mod served;
mod wake;

const MORE: TurnOutcome = Productive { more: true };
const NO_MORE: TurnOutcome = Productive { more: false };

type S = Scheduler<SmallRng>;

/// Claim-aware admission as it is without drain stamps (`served` tests them).
fn config(mode: Switch, workers: usize) -> SchedulerConfig {
    SchedulerConfig { claim_aware: mode, workers, skip_served: Off, ..SchedulerConfig::default() }
}

fn sched(config: SchedulerConfig) -> S {
    Scheduler::new(config, SmallRng::seed_from_u64(7))
}

fn id(name: &str) -> OwnerId {
    OwnerId::from(name)
}

fn ids(names: &[&str]) -> Vec<OwnerId> {
    names.iter().map(|n| id(n)).collect()
}

fn t(ms: u64) -> Time {
    Time::from_millis(ms)
}

/// Every buffered event except the two gauges.
fn decisions(s: &mut S) -> Vec<Event<'static>> {
    std::iter::from_fn(|| s.poll_event())
        .filter(|e| !matches!(e, Event::OwnerQueueDepth(_) | Event::RetryTimers(_)))
        .collect()
}

fn launch(owner: &str, entry: Entry) -> Option<Action> {
    Some(Action::Launch { owner: id(owner), entry })
}

fn peek(owners: &[&str]) -> Option<Action> {
    Some(Action::Peek(ids(owners)))
}

/// Request `owner` and take it through a peek that comes back free, to running.
fn run(s: &mut S, now: Time, owner: &str) {
    assert_eq!(s.request(now, id(owner)), Ok(Requested::Queued));
    if s.config().claim_aware.computes() {
        assert_eq!(s.poll_action(now), peek(&[owner]));
        s.on_peek(now, vec![(id(owner), PeekResult::Free)]);
    }
    assert_eq!(s.poll_action(now), launch(owner, Initial));
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Where an owner must be after its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Finished,
    Queued(Entry),
    /// A timer due within `[now + low, now + high]` milliseconds.
    TimerWithin(u64, u64),
}

//! Property test of skipping served requests: a requested item is never left unserved.
//!
//! A world of a few owners, each with a backlog of items: a writer adds an item and
//! requests its owner (the request made at the write, delivered up to 50 ms later,
//! so requests arrive out of the order they were made); another instance drains
//! owners now and then, completely, publishing its drain stamp (the time it began);
//! the scheduler under test peeks with the marks (exact, or earlier as a driver's
//! conservative conversion makes them) and runs turns that take the owner's items
//! when they start and end later: failed (the items go back), with more (items were
//! written meanwhile), or drained (publishing their start as the mark). Whatever the
//! order, once everything has run out, every item ever written has been drained: a
//! request is only dropped for a drain that began after it.

use drain_core::admission::{Action, OwnerId, OwnerState, PeekResult, Peeked, Scheduler, SchedulerConfig, TurnOutcome};
use drain_core::{Switch, Time};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;

const OWNERS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    /// Write an item for the owner; its request, made at the write, arrives `late` ms
    /// after it.
    Write { owner: usize, late: u64 },
    /// Another instance drains the owner (when nobody holds it here).
    OtherDrain(usize),
    /// Poll one action: a peek is answered with the marks less `slack` ms, a launch
    /// starts a turn that takes the owner's items.
    Poll { slack: u64 },
    /// End the `pick`-th running turn, failed or not.
    Finish { pick: usize, fail: bool },
    /// Time passes.
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..OWNERS, prop_oneof![Just(0u64), 0..50u64]).prop_map(|(owner, late)| Op::Write { owner, late }),
        2 => (0..OWNERS).prop_map(Op::OtherDrain),
        3 => prop_oneof![Just(0u64), 0..20u64].prop_map(|slack| Op::Poll { slack }),
        3 => (0..4usize, prop::bool::weighted(0.2)).prop_map(|(pick, fail)| Op::Finish { pick, fail }),
        2 => (1..40u64).prop_map(Op::Advance),
    ]
}

/// A turn running here: the owner, when it took the claim, the items it took.
type Turn = (usize, u64, Vec<u64>);

struct World {
    now: u64,
    /// Per owner: the write times of items not drained yet.
    backlog: Vec<Vec<u64>>,
    /// Per owner: when the latest complete drain began.
    mark: Vec<Option<u64>>,
    /// Requests written but not yet delivered: (due, owner, made).
    pending: Vec<(u64, usize, u64)>,
    running: Vec<Turn>,
}

impl World {
    fn publish(&mut self, owner: usize, began: u64) {
        self.mark[owner] = Some(self.mark[owner].map_or(began, |m| m.max(began)));
    }

    fn deliver(&mut self, s: &mut Scheduler<SmallRng>) {
        let now = self.now;
        let due: Vec<_> = self.pending.iter().filter(|(at, ..)| *at <= now).copied().collect();
        self.pending.retain(|(at, ..)| *at > now);
        for (_, owner, made) in due {
            let _ = s.request_made(Time::from_millis(now), name(owner), Time::from_millis(made));
        }
    }

    fn poll(&mut self, s: &mut Scheduler<SmallRng>, slack: u64) -> bool {
        let now = Time::from_millis(self.now);
        let Some(action) = s.poll_action(now) else { return false };
        match action {
            Action::Peek(owners) => {
                let answers: Vec<(OwnerId, Peeked)> = owners
                    .into_iter()
                    .map(|o| {
                        let drained = self.mark[index(&o)].map(|m| Time::from_millis(m.saturating_sub(slack)));
                        (o, Peeked { claim: PeekResult::Free, drained })
                    })
                    .collect();
                s.on_peek(now, answers);
            }
            Action::Launch { owner, .. } => {
                let o = index(&owner);
                let taken = std::mem::take(&mut self.backlog[o]);
                self.running.push((o, self.now, taken));
            }
        }
        true
    }

    fn finish(&mut self, s: &mut Scheduler<SmallRng>, pick: usize, fail: bool) {
        if self.running.is_empty() {
            return;
        }
        let (owner, start, taken) = self.running.remove(pick % self.running.len());
        let outcome = if fail {
            let mut back = taken;
            back.append(&mut self.backlog[owner]);
            self.backlog[owner] = back;
            TurnOutcome::Failed
        } else if self.backlog[owner].is_empty() {
            self.publish(owner, start);
            TurnOutcome::Productive { more: false }
        } else {
            TurnOutcome::Productive { more: true }
        };
        s.on_turn(Time::from_millis(self.now), &name(owner), outcome).expect("running");
    }
}

fn name(owner: usize) -> OwnerId {
    OwnerId::from(format!("o{owner}"))
}

fn index(owner: &OwnerId) -> usize {
    owner.as_str()[1..].parse().expect("o<n>")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_requested_item_is_never_left_unserved(ops in prop::collection::vec(op(), 1..100)) {
        let mut config = SchedulerConfig::default();
        config.skip_served = Switch::On;
        config.workers = 2;
        let mut s = Scheduler::new(config, SmallRng::seed_from_u64(3));
        let mut w = World {
            now: 0,
            backlog: vec![Vec::new(); OWNERS],
            mark: vec![None; OWNERS],
            pending: Vec::new(),
            running: Vec::new(),
        };
        for op in ops {
            match op {
                Op::Write { owner, late } => {
                    w.backlog[owner].push(w.now);
                    w.pending.push((w.now + late, owner, w.now));
                }
                Op::OtherDrain(owner) => {
                    let running = matches!(s.state_of(&name(owner)), Some(OwnerState::Running { .. }));
                    if !running {
                        w.backlog[owner].clear();
                        w.publish(owner, w.now);
                    }
                }
                Op::Poll { slack } => {
                    w.poll(&mut s, slack);
                }
                Op::Finish { pick, fail } => w.finish(&mut s, pick, fail),
                Op::Advance(ms) => {
                    w.now += ms;
                    s.handle_timeout(Time::from_millis(w.now));
                }
            }
            w.deliver(&mut s);
        }
        // Run everything out: deliver, poll, end every turn (drained from now on),
        // fire timers.
        for _ in 0..10_000 {
            w.deliver(&mut s);
            while w.poll(&mut s, 0) {}
            if !w.running.is_empty() {
                w.now += 1;
                w.finish(&mut s, 0, false);
                continue;
            }
            let next = s.next_deadline().map(Time::as_millis).into_iter().chain(w.pending.iter().map(|p| p.0)).min();
            match next {
                Some(at) => {
                    w.now = w.now.max(at);
                    s.handle_timeout(Time::from_millis(w.now));
                }
                None => break,
            }
        }
        prop_assert_eq!(s.queue_len() + s.timer_count() + s.running_count() + s.peeking_count(), 0);
        for (owner, left) in w.backlog.iter().enumerate() {
            prop_assert!(left.is_empty(), "owner {} kept items written at {:?}", owner, left);
        }
    }
}

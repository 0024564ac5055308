//! Release wake-up (`on_release`, `waits_for_claim`): which waits a release ends, under
//! each switch position, and properties over random operation sequences.

use proptest::prelude::*;

use super::*;

/// Where `check_release` puts the owner `x` before the release notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prior {
    /// A peek found the claim held (claim-aware On): a claim retry timer.
    HeldPeek,
    /// A turn lost the claim race (claim-aware On): a claim retry timer.
    ClaimBusyTurn,
    /// A turn failed: a failure backoff timer.
    FailedTurn,
    Unknown,
    Queued,
    Running,
    HandedOff,
    Closed,
}

fn put(s: &mut S, prior: Prior) {
    let now = t(0);
    match prior {
        Prior::HeldPeek => {
            let _ = s.request(now, id("x"));
            assert_eq!(s.poll_action(now), peek(&["x"]));
            s.on_peek(now, vec![(id("x"), PeekResult::Busy)]);
        }
        Prior::ClaimBusyTurn => {
            run(s, now, "x");
            assert_eq!(s.on_turn(now, &id("x"), ClaimBusy), Ok(()));
        }
        Prior::FailedTurn => {
            run(s, now, "x");
            assert_eq!(s.on_turn(now, &id("x"), Failed), Ok(()));
        }
        Prior::Unknown => {}
        Prior::Queued => {
            let _ = s.request(now, id("x"));
        }
        Prior::Running => run(s, now, "x"),
        Prior::HandedOff => {
            run(s, now, "filler");
            assert_eq!(s.on_turn(now, &id("filler"), ClaimBusy), Ok(()));
            put(s, Prior::ClaimBusyTurn);
            assert_eq!(s.state_of(&id("x")), Some(OwnerState::HandedOff));
        }
        Prior::Closed => {
            put(s, Prior::ClaimBusyTurn);
            assert_eq!(s.close(), ids(&["x"]));
        }
    }
}

#[track_caller]
fn check_release(prior: Prior, wake: Switch, expected: Woken) {
    let cfg = SchedulerConfig { release_wake: wake, max_retry_timers: 1, ..config(On, 2) };
    let mut s = sched(cfg);
    put(&mut s, prior);
    let claim_wait = matches!(prior, Prior::HeldPeek | Prior::ClaimBusyTurn);
    assert_eq!(s.waits_for_claim(&id("x")), claim_wait, "{prior:?}");
    let before = (s.state_of(&id("x")), s.queue_len(), s.timer_count(), s.next_deadline());
    let _ = decisions(&mut s);
    let now = t(1);
    assert_eq!(s.on_release(now, &id("x")), expected, "{prior:?} {wake}");
    assert_eq!(decisions(&mut s), vec![], "a wake-up is not a decision event");
    if expected == Woken::Queued {
        assert_eq!(s.state_of(&id("x")), Some(OwnerState::Queued { entry: Initial }));
        assert_eq!((s.queue_len(), s.timer_count(), s.next_deadline()), (1, 0, None));
        assert!(!s.waits_for_claim(&id("x")));
        // Peeked again before launch: a release someone re-took costs a peek, not a turn.
        assert_eq!(s.poll_action(now), peek(&["x"]));
    } else {
        let after = (s.state_of(&id("x")), s.queue_len(), s.timer_count(), s.next_deadline());
        assert_eq!(after, before, "{prior:?} {wake}: nothing changes");
    }
}

#[test]
fn a_release_ends_only_claim_waits_and_only_when_on() {
    use Woken::{Ignored, Queued, WouldQueue};
    for prior in [Prior::HeldPeek, Prior::ClaimBusyTurn] {
        check_release(prior, On, Queued);
        check_release(prior, Shadow, WouldQueue);
        check_release(prior, Off, Ignored);
    }
    for wake in [Off, Shadow, On] {
        for prior in [Prior::FailedTurn, Prior::Unknown, Prior::Queued, Prior::Running, Prior::HandedOff, Prior::Closed]
        {
            check_release(prior, wake, Ignored);
        }
    }
}

#[test]
fn without_claim_aware_enforcing_there_is_nothing_to_wake() {
    for mode in [Off, Shadow] {
        let mut s = sched(config(mode, 1));
        run(&mut s, t(0), "x");
        assert_eq!(s.on_turn(t(0), &id("x"), ClaimBusy), Ok(()));
        assert!(!s.waits_for_claim(&id("x")), "{mode}: re-entered at once, no timer");
        assert_eq!(s.on_release(t(1), &id("x")), Woken::Ignored);
    }
}

#[test]
fn a_woken_owner_leaves_no_timer_behind_and_may_wait_again() {
    let mut s = sched(config(On, 1));
    put(&mut s, Prior::ClaimBusyTurn);
    let Some(OwnerState::Timer { due }) = s.state_of(&id("x")) else { panic!("no timer") };
    while s.poll_event().is_some() {}
    assert_eq!(s.on_release(t(10), &id("x")), Woken::Queued);
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(events, vec![Event::OwnerQueueDepth(1), Event::RetryTimers(0)], "gauges follow");
    // Someone took the claim again before our peek: a fresh window, from now.
    assert_eq!(s.poll_action(t(10)), peek(&["x"]));
    s.on_peek(t(20), vec![(id("x"), PeekResult::Busy)]);
    let Some(OwnerState::Timer { due: again }) = s.state_of(&id("x")) else { panic!("no timer") };
    assert!(again >= t(20) + ms(5000) && again <= t(20) + ms(15_000), "{again}");
    assert!(s.waits_for_claim(&id("x")));
    // Woken again, it runs; the old deadline fires nothing.
    assert_eq!(s.on_release(t(30), &id("x")), Woken::Queued);
    assert_eq!(s.poll_action(t(30)), peek(&["x"]));
    s.on_peek(t(30), vec![(id("x"), PeekResult::Free)]);
    assert_eq!(s.poll_action(t(30)), launch("x", Initial));
    assert_eq!(s.on_turn(t(31), &id("x"), Done), Ok(()));
    s.handle_timeout(due.max(again));
    assert_eq!((s.state_of(&id("x")), s.queue_len(), s.poll_action(due.max(again))), (None, 0, None));
    // A second notification for the same release is ignored.
    assert_eq!(s.on_release(t(40), &id("x")), Woken::Ignored);
}

// ---- properties ----------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Request(usize),
    Poll,
    /// Answer the `pick`-th outstanding batch: `held[i]` for its `i`-th owner.
    Peek(usize, Vec<bool>),
    Turn(usize, TurnOutcome),
    Advance(u64),
    Release(usize),
    Close,
}

const N: usize = 6;

fn op() -> impl Strategy<Value = Op> {
    let outcomes = [MORE, NO_MORE, Done, ClaimBusy, Failed];
    prop_oneof![
        6 => (0..N).prop_map(Op::Request),
        6 => Just(Op::Poll),
        4 => (any::<usize>(), prop::collection::vec(any::<bool>(), N)).prop_map(|(p, h)| Op::Peek(p, h)),
        5 => (any::<usize>(), 0..outcomes.len()).prop_map(move |(p, o)| Op::Turn(p, outcomes[o])),
        2 => (0u64..20_000).prop_map(Op::Advance),
        5 => (0..N).prop_map(Op::Release),
        1 => Just(Op::Close),
    ]
}

/// A scheduler, its clock, and what its driver has outstanding.
struct Driven {
    s: S,
    now: Time,
    batches: Vec<Vec<OwnerId>>,
    running: Vec<OwnerId>,
}

/// What one step returned, to compare twins.
type Step = (Option<Action>, Option<Woken>, Vec<Event<'static>>, Vec<Option<OwnerState>>, Vec<OwnerId>);

impl Driven {
    fn new(cfg: SchedulerConfig, seed: u64) -> Self {
        Driven { s: Scheduler::new(cfg, SmallRng::seed_from_u64(seed)), now: t(0), batches: vec![], running: vec![] }
    }

    fn step(&mut self, op: &Op, names: &[OwnerId]) -> Step {
        let (mut action, mut woken, mut returned) = (None, None, Vec::new());
        match op {
            Op::Request(i) => {
                let _ = self.s.request(self.now, names[*i].clone());
            }
            Op::Poll => {
                action = self.s.poll_action(self.now);
                match &action {
                    Some(Action::Peek(owners)) => self.batches.push(owners.clone()),
                    Some(Action::Launch { owner, .. }) => self.running.push(owner.clone()),
                    None => {}
                }
            }
            Op::Peek(pick, held) if !self.batches.is_empty() => {
                let batch = self.batches.remove(pick % self.batches.len());
                let answers =
                    batch.into_iter().zip(held).map(|(o, &h)| (o, if h { PeekResult::Busy } else { PeekResult::Free }));
                self.s.on_peek(self.now, answers);
            }
            Op::Turn(pick, outcome) if !self.running.is_empty() => {
                let owner = self.running.remove(pick % self.running.len());
                assert_eq!(self.s.on_turn(self.now, &owner, *outcome), Ok(()));
            }
            Op::Advance(by) => {
                self.now += ms(*by);
                self.s.handle_timeout(self.now);
            }
            Op::Release(i) => woken = Some(self.s.on_release(self.now, &names[*i])),
            Op::Close => {
                returned = self.s.close();
                self.batches.clear();
            }
            Op::Peek(..) | Op::Turn(..) => {}
        }
        while let Some(o) = self.s.poll_handoff() {
            returned.push(o);
        }
        let events = std::iter::from_fn(|| self.s.poll_event()).collect();
        (action, woken, events, names.iter().map(|o| self.s.state_of(o)).collect(), returned)
    }
}

fn cfg_strategy() -> impl Strategy<Value = SchedulerConfig> {
    let switch = || prop_oneof![Just(Off), Just(Shadow), Just(On)];
    (switch(), switch(), 1usize..=3, 0usize..=3).prop_map(|(claim_aware, release_wake, workers, cap)| SchedulerConfig {
        claim_aware,
        release_wake,
        workers,
        max_retry_timers: cap,
        backoff_min: ms(100),
        backoff_max: ms(5000),
        ..SchedulerConfig::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_500))]

    /// Unless both switches are On, release notifications change nothing at all: a twin
    /// that never hears them takes the same actions, deadlines and events. With both On,
    /// a notification only ever moves an owner from a claim retry timer to the FIFO, and
    /// every intent is still accounted for in the end.
    #[test]
    fn releases_wake_only_claim_waits(cfg in cfg_strategy(), seed in any::<u64>(), ops in prop::collection::vec(op(), 1..80)) {
        let names: Vec<OwnerId> = (0..N).map(|i| OwnerId::from(format!("o{i}"))).collect();
        let enforcing = cfg.claim_aware == On && cfg.release_wake == On;
        let mut heard = Driven::new(cfg.clone(), seed);
        let mut deaf = Driven::new(cfg.clone(), seed);
        for op in &ops {
            let waited: Vec<bool> = names.iter().map(|o| heard.s.waits_for_claim(o)).collect();
            let before: Vec<Option<OwnerState>> = names.iter().map(|o| heard.s.state_of(o)).collect();
            let (timers, queue) = (heard.s.timer_count(), heard.s.queue_len());
            let got = heard.step(op, &names);
            if let (Op::Release(i), Some(woken)) = (op, got.1) {
                let expected = match (waited[*i], cfg.release_wake) {
                    (true, On) => Woken::Queued,
                    (true, Shadow) => Woken::WouldQueue,
                    _ => Woken::Ignored,
                };
                prop_assert_eq!(woken, expected);
                if woken == Woken::Queued {
                    prop_assert_eq!(got.3[*i], Some(OwnerState::Queued { entry: Initial }));
                    prop_assert_eq!((heard.s.timer_count(), heard.s.queue_len()), (timers - 1, queue + 1));
                    for (j, state) in got.3.iter().enumerate() {
                        if j != *i {
                            prop_assert_eq!(*state, before[j], "only the woken owner moves");
                        }
                    }
                } else {
                    prop_assert_eq!(&got.3, &before, "an ignored release changes nothing");
                }
            }
            for (o, state) in names.iter().zip(&got.3) {
                if heard.s.waits_for_claim(o) {
                    prop_assert!(matches!(state, Some(OwnerState::Timer { .. })), "a claim wait is a timer");
                }
            }
            prop_assert!(heard.s.running_count() + heard.s.peeking_count() <= cfg.slots());
            prop_assert!(heard.s.timer_count() <= cfg.max_retry_timers);
            if !enforcing && !matches!(op, Op::Release(_)) {
                let twin = deaf.step(op, &names);
                prop_assert_eq!((&got.0, &got.2, &got.3, &got.4), (&twin.0, &twin.2, &twin.3, &twin.4));
            }
        }
        // Close, finish every running turn, take every hand-off: nobody is left inside.
        let _ = heard.s.close();
        for owner in std::mem::take(&mut heard.running) {
            prop_assert_eq!(heard.s.on_turn(heard.now, &owner, Done), Ok(()));
        }
        while heard.s.poll_handoff().is_some() {}
        for o in &names {
            prop_assert_eq!(heard.s.state_of(o), None);
        }
    }
}

//! Property tests of the claim-aware owner admission scheduler.
//!
//! Random operation sequences over a dozen owners run under each switch position with
//! small caps (1–4 workers, 1–4 retry timers). A model kept here predicts, step by
//! step, where every owner must be, the FIFO and timer order, every action and every
//! event; only the jittered deadlines come from the scheduler, and those are checked
//! against their windows. Every case ends by closing the scheduler and finishing
//! every running turn, so each requested owner must end up finished, returned by
//! `close` or handed off: nothing is lost.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use drain_core::admission::{
    Action, Closed, Entry, NotRunning, OwnerId, OwnerState, PeekResult, Requested, Scheduler, SchedulerConfig,
    TurnOutcome,
};
use drain_core::event::{Event, SkipReason};
use drain_core::{Switch, Time};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;

const OWNERS: usize = 12;

const OUTCOMES: [TurnOutcome; 5] = [
    TurnOutcome::Productive { more: true },
    TurnOutcome::Productive { more: false },
    TurnOutcome::Done,
    TurnOutcome::ClaimBusy,
    TurnOutcome::Failed,
];

/// One operation of a generated sequence. Indices pick among the current candidates
/// modulo their number, so every operation is meaningful whatever came before.
#[derive(Debug, Clone)]
enum Op {
    /// Request owner `n`.
    Request(usize),
    /// Poll one action.
    Poll,
    /// Answer the `pick`-th outstanding peek batch, one code per member: 0 free,
    /// 1 held, 2 error, 3 no answer; plus, maybe, an answer for an owner not peeking.
    Peek { pick: usize, codes: Vec<u8>, stray: Option<usize> },
    /// End the `pick`-th running turn (or, with none running, try a non-running owner).
    Turn { pick: usize, outcome: TurnOutcome },
    /// Advance time by this many milliseconds, then fire due timers.
    Advance(u64),
    /// Jump to the next deadline, then fire due timers.
    ToDeadline,
    /// Take one hand-off.
    Handoff,
    /// Close the scheduler.
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        24 => (0..OWNERS).prop_map(Op::Request),
        24 => Just(Op::Poll),
        12 => (any::<usize>(), prop::collection::vec(0u8..4, OWNERS), prop::option::weighted(0.2, 0..OWNERS))
            .prop_map(|(pick, codes, stray)| Op::Peek { pick, codes, stray }),
        20 => (any::<usize>(), 0..OUTCOMES.len())
            .prop_map(|(pick, o)| Op::Turn { pick, outcome: OUTCOMES[o] }),
        8 => (0u64..20_000).prop_map(Op::Advance),
        4 => Just(Op::ToDeadline),
        4 => Just(Op::Handoff),
        1 => Just(Op::Close),
    ]
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(mode: Switch) -> impl Strategy<Value = SchedulerConfig> {
    (1usize..=4, 1usize..=4, 0u64..=5000, 0u64..=10_000, any::<bool>(), 1u64..=2000, 0u64..=20_000).prop_map(
        move |(workers, cap, low, span, reversed, base, failure_cap)| {
            let (min, max) = if reversed { (low + span, low) } else { (low, low + span) };
            {
                let mut m = SchedulerConfig::default();
                m.claim_aware = mode;
                m.release_wake = Switch::On;
                // The model is admission without drain stamps (tests/served_props.rs has them).
                m.skip_served = Switch::Off;
                m.workers = workers;
                m.backoff_min = ms(min);
                m.backoff_max = ms(max);
                m.max_retry_timers = cap;
                m.failure_base = ms(base);
                m.failure_cap = ms(failure_cap);
                m
            }
        },
    )
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..60)
}

fn mode() -> impl Strategy<Value = Switch> {
    prop_oneof![Just(Switch::Off), Just(Switch::Shadow), Just(Switch::On)]
}

/// One step's events and every owner's state afterwards.
type Snapshot = (Vec<Event<'static>>, [Option<OwnerState>; OWNERS]);

/// The scheduler under test and the model of what it must hold.
struct Run {
    s: Scheduler<SmallRng>,
    cfg: SchedulerConfig,
    mode: Switch,
    now: Time,
    ids: Vec<OwnerId>,
    /// Where each owner must be (timer deadlines as the scheduler drew them).
    state: [Option<OwnerState>; OWNERS],
    /// Owners requested and not yet finished, handed back or returned by close.
    intents: BTreeSet<usize>,
    fifo: VecDeque<usize>,
    ready: VecDeque<usize>,
    batches: Vec<Vec<usize>>,
    timers: BTreeMap<(Time, u64), usize>,
    armed: u64,
    handoffs: VecDeque<usize>,
    failures: [u32; OWNERS],
    closed: bool,
    /// Events this step must emit, in order (gauges are appended by `check`).
    expected: Vec<Event<'static>>,
    gauges: (usize, usize),
    /// Every step's events and states, when recording for the determinism property.
    trace: Option<Vec<Snapshot>>,
}

impl Run {
    fn new(cfg: SchedulerConfig, seed: u64, record: bool) -> Self {
        Run {
            s: Scheduler::new(cfg.clone(), SmallRng::seed_from_u64(seed)),
            mode: cfg.claim_aware,
            cfg,
            now: Time::from_millis(1_000),
            ids: (0..OWNERS).map(|i| OwnerId::from(format!("owner-{i}"))).collect(),
            state: [None; OWNERS],
            intents: BTreeSet::new(),
            fifo: VecDeque::new(),
            ready: VecDeque::new(),
            batches: Vec::new(),
            timers: BTreeMap::new(),
            armed: 0,
            handoffs: VecDeque::new(),
            failures: [0; OWNERS],
            closed: false,
            expected: Vec::new(),
            gauges: (0, 0),
            trace: record.then(Vec::new),
        }
    }

    fn count(&self, f: impl Fn(&OwnerState) -> bool) -> usize {
        self.state.iter().flatten().filter(|s| f(s)).count()
    }

    fn running(&self) -> Vec<usize> {
        (0..OWNERS).filter(|&i| matches!(self.state[i], Some(OwnerState::Running { .. }))).collect()
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Request(i) => self.request(i),
            Op::Poll => self.poll(),
            Op::Peek { pick, ref codes, stray } => self.peek(pick, codes, stray),
            Op::Turn { pick, outcome } => self.turn(pick, outcome),
            Op::Advance(by) => self.advance(self.now + ms(by)),
            Op::ToDeadline => {
                let next = self.timers.keys().next().map(|&(due, _)| due);
                assert_eq!(self.s.next_deadline(), next, "next deadline");
                self.advance(next.map_or(self.now, |due| due.max(self.now)));
            }
            Op::Handoff => self.handoff(),
            Op::Close => self.close(),
        }
        self.check();
    }

    /// Close if still open, finish every running turn, take every hand-off: every
    /// intent must then have been accounted for.
    fn finish(&mut self) {
        if !self.closed {
            self.step(&Op::Close);
        }
        for (k, _) in self.running().into_iter().enumerate() {
            self.step(&Op::Turn { pick: 0, outcome: OUTCOMES[k % OUTCOMES.len()] });
        }
        while !self.handoffs.is_empty() {
            self.step(&Op::Handoff);
        }
        self.step(&Op::Handoff);
        assert!(self.intents.is_empty(), "intents left after close: {:?}", self.intents);
        for owner in &self.ids {
            assert_eq!(self.s.state_of(owner), None, "{owner} still known");
        }
        assert_eq!(self.s.close(), Vec::<OwnerId>::new());
    }

    // ---- operations and their predicted effects ------------------------------------

    fn request(&mut self, i: usize) {
        let got = self.s.request(self.now, self.ids[i].clone());
        if self.closed {
            assert_eq!(got, Err(Closed), "request after close");
            return;
        }
        match self.state[i] {
            None => {
                assert_eq!(got, Ok(Requested::Queued));
                assert!(self.intents.insert(i));
                self.queue(i, Entry::Initial);
            }
            Some(OwnerState::Running { .. }) => {
                assert_eq!(got, Ok(Requested::MarkedDirty));
                self.state[i] = Some(OwnerState::Running { dirty: true });
            }
            Some(_) => assert_eq!(got, Ok(Requested::Coalesced), "request of {i}"),
        }
    }

    fn poll(&mut self) {
        let busy = self.count(|s| matches!(s, OwnerState::Running { .. } | OwnerState::Peeking));
        let free = self.cfg.slots() - busy;
        let got = self.s.poll_action(self.now);
        let expected = if free == 0 {
            None
        } else if let Some(i) = self.ready.pop_front() {
            self.state[i] = Some(OwnerState::Running { dirty: false });
            Some(Action::Launch { owner: self.ids[i].clone(), entry: Entry::Initial })
        } else if let Some(&head) = self.fifo.front() {
            let Some(OwnerState::Queued { entry }) = self.state[head] else { panic!("FIFO head {head} is not queued") };
            if entry == Entry::Continuation || self.mode == Switch::Off {
                self.fifo.pop_front();
                self.state[head] = Some(OwnerState::Running { dirty: false });
                Some(Action::Launch { owner: self.ids[head].clone(), entry })
            } else {
                let mut batch = Vec::new();
                while let Some(&i) = self.fifo.front() {
                    if batch.len() == free || self.state[i] != Some(OwnerState::Queued { entry: Entry::Initial }) {
                        break;
                    }
                    self.fifo.pop_front();
                    self.state[i] = Some(OwnerState::Peeking);
                    batch.push(i);
                }
                let owners = batch.iter().map(|&i| self.ids[i].clone()).collect();
                self.batches.push(batch);
                Some(Action::Peek(owners))
            }
        } else {
            None
        };
        if let Some(Action::Peek(owners)) = &got {
            // Stated separately from the model for clarity: Off never peeks, a
            // continuation is never peeked, a batch never exceeds the free slots.
            assert_ne!(self.mode, Switch::Off, "Off peeked");
            assert!(!owners.is_empty() && owners.len() <= free);
        }
        assert_eq!(got, expected, "poll_action");
    }

    fn peek(&mut self, pick: usize, codes: &[u8], stray: Option<usize>) {
        let stray = stray.filter(|&i| self.state[i] != Some(OwnerState::Peeking));
        let mut results = Vec::new();
        if let Some(i) = stray {
            results.push((self.ids[i].clone(), PeekResult::Busy));
        }
        if self.batches.is_empty() {
            self.s.on_peek(self.now, results);
            return;
        }
        let b = pick % self.batches.len();
        let batch = self.batches[b].clone();
        let answers: Vec<(usize, PeekResult)> = batch
            .iter()
            .zip(codes)
            .filter_map(|(&i, &code)| match code {
                0 => Some((i, PeekResult::Free)),
                1 => Some((i, PeekResult::Busy)),
                2 => Some((i, PeekResult::Error)),
                _ => None,
            })
            .collect();
        results.extend(answers.iter().map(|&(i, r)| (self.ids[i].clone(), r)));
        self.s.on_peek(self.now, results);
        if answers.is_empty() {
            return; // No result names the batch: it stays outstanding.
        }
        self.batches.remove(b);
        for &(i, result) in &answers {
            self.settle(i, result);
        }
        for i in batch {
            if self.state[i] == Some(OwnerState::Peeking) {
                self.settle(i, PeekResult::Error);
            }
        }
    }

    fn settle(&mut self, i: usize, result: PeekResult) {
        match result {
            PeekResult::Free => self.make_ready(i),
            PeekResult::Error => {
                self.expected.push(Event::PeekError);
                self.make_ready(i);
            }
            PeekResult::Busy => {
                let mode = self.mode;
                self.expected.push(Event::OwnerSkipped { reason: SkipReason::ClaimBusy, mode });
                if mode == Switch::On {
                    let (low, high) = self.cfg.claim_busy_window();
                    self.arm(i, low, high);
                } else {
                    self.make_ready(i);
                }
            }
        }
    }

    fn turn(&mut self, pick: usize, outcome: TurnOutcome) {
        let running = self.running();
        if running.is_empty() {
            let i = pick % OWNERS;
            let owner = self.ids[i].clone();
            assert_eq!(self.s.on_turn(self.now, &owner, outcome), Err(NotRunning(owner)));
            return;
        }
        let i = running[pick % running.len()];
        let Some(OwnerState::Running { dirty }) = self.state[i] else { unreachable!() };
        assert_eq!(self.s.on_turn(self.now, &self.ids[i], outcome), Ok(()));
        self.expected.push(Event::OwnerTurn { outcome });
        self.failures[i] = if outcome == TurnOutcome::Failed { self.failures[i] + 1 } else { 0 };
        match outcome {
            TurnOutcome::Productive { more: true } => self.queue(i, Entry::Continuation),
            TurnOutcome::Productive { more: false } | TurnOutcome::Done => {
                if dirty {
                    self.queue(i, Entry::Initial);
                } else {
                    self.forget(i);
                }
            }
            TurnOutcome::ClaimBusy => {
                if self.mode != Switch::Off && !self.closed {
                    self.expected.push(Event::ClaimBusyBackoff { mode: self.mode });
                }
                if self.mode == Switch::On {
                    let (low, high) = self.cfg.claim_busy_window();
                    self.arm(i, low, high);
                } else {
                    // Off and Shadow: immediate re-entry at the back of the FIFO.
                    self.queue(i, Entry::Initial);
                }
            }
            TurnOutcome::Failed => {
                let ceiling = self.cfg.failure_ceiling(self.failures[i]);
                self.arm(i, Duration::ZERO, ceiling);
            }
        }
    }

    fn advance(&mut self, to: Time) {
        self.now = to;
        self.s.handle_timeout(self.now);
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let i = entry.remove();
            self.queue(i, Entry::Initial);
        }
    }

    fn handoff(&mut self) {
        let got = self.s.poll_handoff();
        let expected = self.handoffs.pop_front();
        assert_eq!(got, expected.map(|i| self.ids[i].clone()), "hand-off order");
        if let Some(i) = expected {
            self.forget(i);
        }
    }

    fn close(&mut self) {
        let got = self.s.close();
        let mut expected: Vec<usize> = self.handoffs.drain(..).collect();
        expected.extend(self.ready.drain(..));
        expected.extend(self.batches.drain(..).flatten());
        expected.extend(self.fifo.drain(..));
        expected.extend(std::mem::take(&mut self.timers).into_values());
        let expected_ids: Vec<OwnerId> = expected.iter().map(|&i| self.ids[i].clone()).collect();
        assert_eq!(got, expected_ids, "close() returns every pending intent, in order");
        for i in expected {
            self.forget(i);
        }
        self.closed = true;
    }

    // ---- model transitions -------------------------------------------------------------

    fn queue(&mut self, i: usize, entry: Entry) {
        if self.closed {
            self.hand_off(i);
        } else {
            self.state[i] = Some(OwnerState::Queued { entry });
            self.fifo.push_back(i);
        }
    }

    fn make_ready(&mut self, i: usize) {
        self.state[i] = Some(OwnerState::Ready);
        self.ready.push_back(i);
    }

    /// A timer whose delay must lie in `[low, high]`; the deadline is the scheduler's.
    fn arm(&mut self, i: usize, low: Duration, high: Duration) {
        if self.closed {
            self.hand_off(i);
        } else if self.timers.len() >= self.cfg.max_retry_timers {
            self.expected.push(Event::RetryOverflow);
            self.hand_off(i);
        } else {
            let Some(OwnerState::Timer { due }) = self.s.state_of(&self.ids[i]) else {
                panic!("owner {i} should be on a timer, is {:?}", self.s.state_of(&self.ids[i]))
            };
            assert!(
                due >= self.now + low && due <= self.now + high,
                "deadline {due} outside [{} + {low:?}, + {high:?}]",
                self.now
            );
            self.armed += 1;
            self.timers.insert((due, self.armed), i);
            self.state[i] = Some(OwnerState::Timer { due });
        }
    }

    fn hand_off(&mut self, i: usize) {
        self.state[i] = Some(OwnerState::HandedOff);
        self.handoffs.push_back(i);
        self.failures[i] = 0;
    }

    /// The owner left the scheduler: finished, handed back, or returned by close.
    fn forget(&mut self, i: usize) {
        assert!(self.intents.remove(&i), "owner {i} left without an intent");
        self.state[i] = None;
        self.failures[i] = 0;
    }

    // ---- invariants after every step -----------------------------------------------

    fn check(&mut self) {
        let depth = self.fifo.len() + self.ready.len();
        if depth != self.gauges.0 {
            self.gauges.0 = depth;
            self.expected.push(Event::OwnerQueueDepth(depth));
        }
        if self.timers.len() != self.gauges.1 {
            self.gauges.1 = self.timers.len();
            self.expected.push(Event::RetryTimers(self.timers.len()));
        }
        let expected = std::mem::take(&mut self.expected);
        let events: Vec<Event<'static>> = std::iter::from_fn(|| self.s.poll_event()).collect();
        assert_eq!(events, expected, "events");

        let s = &self.s;
        let states: [Option<OwnerState>; OWNERS] = std::array::from_fn(|i| s.state_of(&self.ids[i]));
        // Nothing lost, nothing duplicated: each owner with an intent is in exactly the
        // predicted place, and the counts of every collection agree with the model.
        assert_eq!(states, self.state, "owner states");
        for (i, state) in states.iter().enumerate() {
            assert_eq!(self.intents.contains(&i), state.is_some(), "intent of owner {i}");
        }
        let running = self.count(|s| matches!(s, OwnerState::Running { .. }));
        let peeking = self.count(|s| *s == OwnerState::Peeking);
        assert_eq!(s.queue_len(), self.fifo.len() + self.ready.len());
        assert_eq!(s.queue_len(), self.count(|s| matches!(s, OwnerState::Queued { .. } | OwnerState::Ready)));
        assert_eq!(s.timer_count(), self.timers.len());
        assert_eq!(s.timer_count(), self.count(|s| matches!(s, OwnerState::Timer { .. })));
        assert!(s.timer_count() <= self.cfg.max_retry_timers, "timer cap");
        assert_eq!((s.running_count(), s.peeking_count()), (running, peeking));
        assert!(running + peeking <= self.cfg.workers, "slots");
        assert_eq!(s.handoff_count(), self.handoffs.len());
        assert_eq!(s.next_deadline(), self.timers.keys().next().map(|&(due, _)| due));
        assert_eq!(s.is_closed(), self.closed);
        if self.closed {
            assert_eq!((s.queue_len(), s.timer_count(), peeking), (0, 0, 0), "after close");
        }
        if let Some(trace) = &mut self.trace {
            trace.push((events, states));
        }
    }
}

fn run_case(cfg: SchedulerConfig, seed: u64, ops: &[Op]) {
    let mut run = Run::new(cfg, seed, false);
    for op in ops {
        run.step(op);
    }
    run.finish();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn off_model_holds(cfg in config(Switch::Off), seed in any::<u64>(), ops in ops()) {
        run_case(cfg, seed, &ops);
    }

    #[test]
    fn shadow_model_holds(cfg in config(Switch::Shadow), seed in any::<u64>(), ops in ops()) {
        run_case(cfg, seed, &ops);
    }

    #[test]
    fn on_model_holds(cfg in config(Switch::On), seed in any::<u64>(), ops in ops()) {
        run_case(cfg, seed, &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// The same seed and the same inputs give the same actions, deadlines and events.
    #[test]
    fn same_seed_same_run(
        cfg in mode().prop_flat_map(config),
        seed in any::<u64>(),
        ops in ops(),
    ) {
        let trace = |cfg: SchedulerConfig| {
            let mut run = Run::new(cfg, seed, true);
            for op in &ops {
                run.step(op);
            }
            run.finish();
            run.trace.take().unwrap_or_default()
        };
        let first = trace(cfg.clone());
        prop_assert_eq!(first, trace(cfg));
    }
}

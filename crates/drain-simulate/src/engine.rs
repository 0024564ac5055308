//! The owner side: N instances, each driving its own drain-core [`Scheduler`], on one
//! discrete-event queue in virtual time.
//!
//! The engine is only the world around the schedulers: it delivers requests, answers
//! peeks from the claim store, runs turns (acquire the claim, work up to `per_turn`
//! items, release), fires the schedulers' timers at their deadlines and, for the
//! release wake-up policies, delivers release notifications. Every admission decision
//! (coalescing, FIFO order, peeks, backoff, continuations, timer cap, hand-offs) is
//! the real scheduler's.

use std::collections::VecDeque;
use std::time::Duration;

use drain_core::admission::{
    Action, OwnerId, PeekResult, Peeked, Requested, Scheduler, SchedulerConfig, TurnOutcome, Woken,
};
use drain_core::event::{Event, SkipReason};
use drain_core::{Switch, Time};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::agenda::Agenda;
use super::claims::Claims;
use super::passes::Passes;
use super::policy::Wake;
use super::progress::Reached;
use super::scenario::Scenario;
use super::tally::Tally;
use super::workload::Workload;

/// How long after the arrival window the run may go on draining.
pub(crate) const DRAIN_GRACE_MS: u64 = 600_000;
/// A hand-off is requested again by the next serving pass, this much later.
const HANDOFF_PASS_MS: u64 = 1000;
/// The claim TTL a turn takes beyond its work (as the testkit's `BacklogWork`).
const CLAIM_TTL_SLACK_MS: u64 = 30_000;

/// How a turn ended, as the engine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    /// Lost the claim race.
    Busy,
    /// Took the claim, nothing to do.
    Empty,
    /// Worked at least one item.
    Worked,
}

/// One scheduled happening. The agenda orders events by (time, insertion); the derive
/// only makes its far heap's tuples comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The `n`-th arrival lands in its owner's backlog.
    Arrival(u32),
    /// A request for `owner`, made at `made` (ms: its arrival's time, as a request
    /// message keeps the time it was sent), reaches `inst`.
    Deliver { inst: u16, owner: u32, made: u64 },
    /// The oldest outstanding peek batch of `inst` comes back.
    PeekDone { inst: u16 },
    /// A launched turn's acquire reaches the claim store.
    Acquire { inst: u16, owner: u32 },
    /// A turn ends (its release, if any, is done).
    TurnEnd { inst: u16, owner: u32, end: End },
    /// A scheduler deadline.
    Timer { inst: u16 },
    /// A release notification (or a self-set wake-up at the holder's expiry).
    Notify { inst: u16, owner: u32 },
    /// `inst`'s pass over the backlogs (a seeded workload).
    Pass { inst: u16 },
}

struct Instance {
    sched: Scheduler<SmallRng>,
    /// The deadline a `Timer` event is queued for.
    armed: Option<Time>,
    /// Outstanding peek batches and when each was sent, oldest first (every peek
    /// takes the same round trip).
    peeks: VecDeque<(u64, Vec<OwnerId>)>,
    /// Timers pending at the last look (for the fleet-wide maximum).
    timers: usize,
}

/// The fleet under one policy.
pub(crate) struct Fleet<'a> {
    sc: &'a Scenario,
    w: &'a Workload,
    wake: Wake,
    /// Turns publish drain stamps and peeks read them (`skip_served` computes).
    marks: bool,
    now: u64,
    agenda: Agenda<Ev>,
    insts: Vec<Instance>,
    names: Vec<OwnerId>,
    /// Per owner: (arrival ms, work ms) of items not yet worked.
    backlog: Vec<VecDeque<(u64, u32)>>,
    claims: Claims,
    fleet_timers: usize,
    tally: Tally,
    /// A seeded workload's passes (`None`: deliveries drawn with the arrivals).
    passes: Option<Passes>,
    /// Per owner: turns working its items now (they are in flight, not in `backlog`).
    working: Vec<u32>,
}

/// The scheduler configuration every instance of a policy runs.
pub(crate) fn scheduler_config(
    sc: &Scenario,
    claim_aware: Switch,
    wake: Wake,
    backoff_ms: (u64, u64),
    skip_served: Switch,
) -> SchedulerConfig {
    {
        let mut m = SchedulerConfig::default();
        m.claim_aware = claim_aware;
        m.skip_served = skip_served;
        m.release_wake = if wake == Wake::Never { Switch::Off } else { Switch::On };
        m.workers = sc.workers;
        m.backoff_min = Duration::from_millis(backoff_ms.0);
        m.backoff_max = Duration::from_millis(backoff_ms.1);
        m.max_retry_timers = sc.max_retry_timers;
        m
    }
}

/// Index of an owner from its name (`o<index>`).
fn index_of(owner: &OwnerId) -> u32 {
    owner.as_str().get(1..).and_then(|n| n.parse().ok()).unwrap_or(u32::MAX)
}

impl<'a> Fleet<'a> {
    /// A fleet of `sc.instances` schedulers configured by `config`, facing `w`.
    pub(crate) fn new(sc: &'a Scenario, w: &'a Workload, config: &SchedulerConfig, wake: Wake, seed: u64) -> Self {
        let insts = (0..sc.instances.clamp(1, usize::from(u16::MAX)))
            .map(|i| Instance {
                sched: Scheduler::new(config.clone(), SmallRng::seed_from_u64(seed.wrapping_add(i as u64 * 7919))),
                armed: None,
                peeks: VecDeque::new(),
                timers: 0,
            })
            .collect();
        Fleet {
            sc,
            w,
            wake,
            marks: config.skip_served.computes(),
            now: 0,
            agenda: Agenda::new(),
            insts,
            names: (0..sc.owners).map(|i| OwnerId::from(format!("o{i}"))).collect(),
            backlog: vec![VecDeque::new(); sc.owners],
            claims: Claims::new(sc.owners),
            fleet_timers: 0,
            tally: Tally::new(sc.duration_ms()),
            passes: Passes::new(sc, seed),
            working: vec![0; sc.owners],
        }
    }

    fn at(&mut self, at: u64, ev: Ev) {
        self.agenda.push(at, ev);
    }

    /// Run to the end: every arrival, then drain until nothing is left to happen (or
    /// the grace period ends).
    /// `reached` follows the virtual time, for a progress display.
    pub(crate) fn run(mut self, reached: &Reached) -> Tally {
        if let Some(passes) = &self.passes {
            for inst in passes.start(self.w, &mut self.backlog).collect::<Vec<_>>() {
                self.at(0, Ev::Pass { inst });
            }
        } else if !self.w.arrivals.is_empty() {
            self.at(self.w.arrivals[0].at, Ev::Arrival(0));
        }
        let stop = self.sc.duration_ms() + DRAIN_GRACE_MS;
        while let Some((at, ev)) = self.agenda.pop(stop) {
            self.now = at;
            reached.at(at);
            self.handle(ev);
        }
        self.tally.end_ms = self.now;
        self.tally.unfinished = self.backlog.iter().map(|b| b.len() as u64).sum();
        self.tally
    }

    fn handle(&mut self, ev: Ev) {
        let now = Time::from_millis(self.now);
        // A stopped instance starts nothing more; its running turns finish.
        if let (Ev::Deliver { inst, .. } | Ev::Timer { inst } | Ev::Notify { inst, .. }, Some(p)) = (ev, &self.passes)
            && p.stopped(inst)
        {
            return;
        }
        match ev {
            Ev::Arrival(n) => {
                let made = self.now;
                let (deliveries, next) = self.w.arrive(n, &mut self.backlog);
                for (at, inst, owner) in deliveries {
                    self.at(at, Ev::Deliver { inst, owner, made });
                }
                if let Some(at) = next {
                    self.at(at, Ev::Arrival(n + 1));
                }
            }
            Ev::Deliver { inst, owner, made } => {
                self.request(inst, owner, made);
                self.pump(inst);
            }
            Ev::Pass { inst } => {
                let Some(passes) = &mut self.passes else { return };
                let (backlog, working) = (&self.backlog, &self.working);
                let wanted = passes.pass(inst, backlog.len(), |o| !backlog[o].is_empty() || working[o] > 0);
                if wanted.is_empty() {
                    return;
                }
                let next = self.now + passes.every_ms();
                for owner in wanted {
                    self.request(inst, owner, self.now);
                }
                self.pump(inst);
                self.at(next, Ev::Pass { inst });
            }
            Ev::PeekDone { inst } => {
                let (sent, owners) = self.insts[usize::from(inst)].peeks.pop_front().unwrap_or_default();
                let results: Vec<(OwnerId, Peeked)> = owners
                    .iter()
                    .map(|o| {
                        let held = self.claims.peek(index_of(o) as usize, self.now).is_some();
                        let claim = if held { PeekResult::Busy } else { PeekResult::Free };
                        // As drain-core's driver converts the store's answer: the peek's
                        // send time less the mark's age, less a millisecond of rounding.
                        // An owner never drained is marked at the origin, as the driver does.
                        let ago = self.claims.drained_ago(index_of(o) as usize, self.now);
                        let at = ago.map_or(Time::ZERO, |ago| Time::from_millis(sent.saturating_sub(ago + 1)));
                        let drained = self.marks.then_some(at);
                        (o.clone(), Peeked { claim, drained })
                    })
                    .collect();
                self.insts[usize::from(inst)].sched.on_peek(now, results);
                for o in &owners {
                    self.deferred(inst, index_of(o));
                }
                self.pump(inst);
            }
            Ev::Acquire { inst, owner } => self.acquire(inst, owner),
            Ev::TurnEnd { inst, owner, end } => self.turn_end(inst, owner, end),
            Ev::Timer { inst } => {
                let i = &mut self.insts[usize::from(inst)];
                if i.armed == Some(now) {
                    i.armed = None;
                }
                i.sched.handle_timeout(now);
                self.pump(inst);
            }
            Ev::Notify { inst, owner } => {
                self.tally.wakes_sent += 1;
                let s = &mut self.insts[usize::from(inst)].sched;
                if s.on_release(now, &self.names[owner as usize]) == Woken::Queued {
                    self.tally.wakes_effective += 1;
                }
                self.pump(inst);
            }
        }
    }

    /// A request for `owner` reaches `inst`'s scheduler.
    fn request(&mut self, inst: u16, owner: u32, made: u64) {
        let now = Time::from_millis(self.now);
        let s = &mut self.insts[usize::from(inst)].sched;
        let name = &self.names[owner as usize];
        if let Ok(Requested::Coalesced) = s.request_made(now, name.clone(), Time::from_millis(made))
            && s.waits_for_claim(name)
        {
            self.tally.absorbed_by_backoff += 1;
        }
    }

    /// The turn's acquire reaches the claim store: work, or lose the race.
    fn acquire(&mut self, inst: u16, owner: u32) {
        let o = owner as usize;
        let work: u64 = self.backlog[o].iter().take(self.sc.per_turn).map(|&(_, w)| u64::from(w)).sum();
        let (ttl, renewed) = match self.wake {
            Wake::AtExpiry { ttl_ms } => (ttl_ms, true),
            _ => (work + CLAIM_TTL_SLACK_MS, false),
        };
        if !self.claims.acquire(o, inst, self.now, ttl, renewed) {
            self.at(self.now + self.sc.lost_race_ms, Ev::TurnEnd { inst, owner, end: End::Busy });
            return;
        }
        let take = self.backlog[o].len().min(self.sc.per_turn);
        if take == 0 {
            self.at(self.now + self.sc.rtt_ms, Ev::TurnEnd { inst, owner, end: End::Empty });
            return;
        }
        self.working[o] += 1;
        let mut t = self.now;
        for _ in 0..take {
            let Some((arrived, w)) = self.backlog[o].pop_front() else { break };
            t += u64::from(w);
            self.tally.item(arrived, t, self.sc.duration_ms());
        }
        self.at(t + self.sc.rtt_ms, Ev::TurnEnd { inst, owner, end: End::Worked });
    }

    fn turn_end(&mut self, inst: u16, owner: u32, end: End) {
        let o = owner as usize;
        let outcome = match end {
            End::Busy => {
                self.tally.busy(self.now);
                TurnOutcome::ClaimBusy
            }
            End::Empty | End::Worked => {
                let more = end == End::Worked && !self.backlog[o].is_empty();
                // A turn that left nothing behind publishes its drain stamp (with marks).
                self.claims.release_drained(o, inst, self.now, self.marks && !more);
                if end == End::Empty {
                    self.tally.empty(self.now);
                } else {
                    self.tally.productive += 1;
                    self.working[o] -= 1;
                }
                // A holder that continues keeps the owner: only a final release notifies.
                if !more {
                    self.notify_release(owner);
                }
                if end == End::Empty { TurnOutcome::Done } else { TurnOutcome::Productive { more } }
            }
        };
        let now = Time::from_millis(self.now);
        let _ = self.insts[usize::from(inst)].sched.on_turn(now, &self.names[o], outcome);
        self.deferred(inst, owner);
        self.pump(inst);
    }

    /// After a peek or a turn: if `inst` now waits on a claim retry timer for `owner`,
    /// register it where the wake-up policy will find it.
    fn deferred(&mut self, inst: u16, owner: u32) {
        if self.wake == Wake::Never || !self.insts[usize::from(inst)].sched.waits_for_claim(&self.names[owner as usize])
        {
            return;
        }
        match self.wake {
            Wake::One | Wake::All => self.claims.wait(owner as usize, inst),
            Wake::AtExpiry { .. } => {
                if let Some(h) = self.claims.peek(owner as usize, self.now) {
                    self.at(self.now + h.remaining(self.now) + 1, Ev::Notify { inst, owner });
                }
            }
            Wake::Never => {}
        }
    }

    /// `owner`'s claim was released for good: notify waiters per the policy.
    fn notify_release(&mut self, owner: u32) {
        let o = owner as usize;
        let name = &self.names[o];
        let insts = &self.insts;
        let mut woken = Vec::new();
        match self.wake {
            Wake::One => woken.extend(self.claims.pop_waiter(o, |i| insts[usize::from(i)].sched.waits_for_claim(name))),
            Wake::All => {
                while let Some(i) = self.claims.pop_waiter(o, |i| insts[usize::from(i)].sched.waits_for_claim(name)) {
                    woken.push(i);
                }
            }
            Wake::Never | Wake::AtExpiry { .. } => {}
        }
        for inst in woken {
            self.at(self.now + self.sc.notify_ms, Ev::Notify { inst, owner });
        }
    }

    /// Take every action `inst`'s scheduler has, drain its events and hand-offs, and
    /// keep one timer event queued for its next deadline.
    fn pump(&mut self, inst: u16) {
        let now = Time::from_millis(self.now);
        let after_rtt = self.now + self.sc.rtt_ms;
        let stopped = self.passes.as_ref().is_some_and(|p| p.stopped(inst));
        let i = &mut self.insts[usize::from(inst)];
        while let Some(action) = if stopped { None } else { i.sched.poll_action(now) } {
            match action {
                Action::Peek(owners) => {
                    self.tally.peeks += owners.len() as u64;
                    self.tally.peek_round_trips += 1;
                    i.peeks.push_back((self.now, owners));
                    self.agenda.push(after_rtt, Ev::PeekDone { inst });
                }
                Action::Launch { owner, .. } => {
                    self.agenda.push(after_rtt, Ev::Acquire { inst, owner: index_of(&owner) });
                }
            }
        }
        while let Some(event) = i.sched.poll_event() {
            match event {
                Event::RetryTimers(n) => {
                    self.fleet_timers = self.fleet_timers + n - i.timers;
                    i.timers = n;
                    self.tally.timers_max = self.tally.timers_max.max(n);
                    self.tally.timers_fleet_max = self.tally.timers_fleet_max.max(self.fleet_timers);
                }
                Event::OwnerSkipped { reason: SkipReason::Served, mode: Switch::On } => self.tally.served += 1,
                _ => {}
            }
        }
        while let Some(owner) = i.sched.poll_handoff() {
            self.tally.handoffs += 1;
            let (owner, made) = (index_of(&owner), self.now);
            self.agenda.push(self.now + HANDOFF_PASS_MS, Ev::Deliver { inst, owner, made });
        }
        if let Some(d) = i.sched.next_deadline()
            && i.armed != Some(d)
        {
            i.armed = Some(d);
            self.agenda.push(d.as_millis(), Ev::Timer { inst });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{Kind, candidates};
    use super::super::run_policy;
    use super::*;

    /// Under every policy of the search, on a small re-requesting fleet: every item is
    /// worked exactly once, nothing is left behind, and each policy's mechanism shows
    /// in the counts (and only where it should).
    #[test]
    fn every_item_is_worked_once_under_every_policy() {
        let mut sc = Scenario::preset("seed-fleet").expect("preset");
        sc.duration_s = 60;
        let w = Workload::generate(&sc, 5);
        for policy in candidates() {
            let t = run_policy(&sc, &w, &policy, 5, &Default::default());
            let key = policy.key;
            assert_eq!((t.latencies.len(), t.unfinished), (w.items(), 0), "{key}: every item once");
            assert!(t.productive > 0 && t.productive <= w.items() as u64, "{key}");
            match policy.kind {
                Kind::Oracle => assert_eq!((t.claim_busy, t.empty, t.peeks), (0, 0, 0), "{key}"),
                Kind::Scheduler { claim_aware, wake, skip_served, .. } => {
                    assert_eq!(t.peeks > 0, claim_aware == Switch::On, "{key}: peeks only when claim-aware");
                    assert_eq!(
                        t.served > 0,
                        skip_served == Switch::On,
                        "{key}: requests skipped as served only when on"
                    );
                    assert_eq!(t.wakes_sent > 0, wake != Wake::Never, "{key}: wake-ups only when configured");
                    assert!(t.claim_busy > 0, "{key}: a re-requesting fleet races at least sometimes");
                    if claim_aware == Switch::Off {
                        assert_eq!((t.timers_max, t.absorbed_by_backoff), (0, 0), "{key}: legacy never waits");
                    }
                }
            }
            assert_eq!(t.handoffs, 0, "{key}: 1024 timers per instance are plenty here");
        }
    }
}

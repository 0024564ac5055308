//! The oracle: a *model*, not drain-core code. An omniscient dispatcher that knows
//! every claim and every backlog, so it never peeks, never loses a claim race and
//! never runs an empty turn, on the same workload, slots and round trips as the
//! fleet of real schedulers. Its figures are the floor the real policies are measured
//! against.
//!
//! Rules: a request reaching an instance for an owner with work that nobody is
//! running starts a turn there if a slot is free (taking it from another instance's
//! FIFO if it waited there: omniscient work stealing), else waits in that instance's
//! FIFO; an owner that is running absorbs the request (its holder continues while
//! work remains, at the back of its FIFO, like a continuation).

use std::collections::VecDeque;

use super::agenda::Agenda;
use super::engine::DRAIN_GRACE_MS;
use super::passes::Passes;
use super::progress::Reached;
use super::scenario::Scenario;
use super::tally::Tally;
use super::workload::Workload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival(u32),
    Deliver { inst: u16, owner: u32 },
    TurnEnd { inst: u16, owner: u32 },
    Pass { inst: u16 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Idle,
    Queued(u16),
    Running,
}

/// Run the oracle on `w`.
pub(crate) fn run(sc: &Scenario, w: &Workload, reached: &Reached) -> Tally {
    let mut m = Oracle {
        sc,
        w,
        now: 0,
        agenda: Agenda::new(),
        free: vec![sc.workers.max(1); sc.instances.clamp(1, usize::from(u16::MAX))],
        fifo: vec![VecDeque::new(); sc.instances.clamp(1, usize::from(u16::MAX))],
        place: vec![Where::Idle; sc.owners],
        backlog: vec![VecDeque::new(); sc.owners],
        tally: Tally::new(sc.duration_ms()),
        passes: Passes::new(sc, 0),
    };
    if let Some(passes) = &m.passes {
        for inst in passes.start(w, &mut m.backlog).collect::<Vec<_>>() {
            m.at(0, Ev::Pass { inst });
        }
    } else if let Some(first) = w.arrivals.first() {
        m.at(first.at, Ev::Arrival(0));
    }
    let stop = sc.duration_ms() + DRAIN_GRACE_MS;
    while let Some((at, ev)) = m.agenda.pop(stop) {
        m.now = at;
        reached.at(at);
        m.handle(ev);
    }
    m.tally.end_ms = m.now;
    m.tally.unfinished = m.backlog.iter().map(|b| b.len() as u64).sum();
    m.tally
}

struct Oracle<'a> {
    sc: &'a Scenario,
    w: &'a Workload,
    now: u64,
    agenda: Agenda<Ev>,
    free: Vec<usize>,
    fifo: Vec<VecDeque<u32>>,
    place: Vec<Where>,
    backlog: Vec<VecDeque<(u64, u32)>>,
    tally: Tally,
    passes: Option<Passes>,
}

impl Oracle<'_> {
    fn at(&mut self, at: u64, ev: Ev) {
        self.agenda.push(at, ev);
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival(n) => {
                let (deliveries, next) = self.w.arrive(n, &mut self.backlog);
                for (at, inst, owner) in deliveries {
                    self.at(at, Ev::Deliver { inst, owner });
                }
                if let Some(at) = next {
                    self.at(at, Ev::Arrival(n + 1));
                }
            }
            Ev::Pass { inst } => {
                let Some(passes) = &mut self.passes else { return };
                let (backlog, place) = (&self.backlog, &self.place);
                let wanted = passes.pass(inst, backlog.len(), |o| !backlog[o].is_empty() || place[o] == Where::Running);
                if wanted.is_empty() {
                    return;
                }
                let next = self.now + passes.every_ms();
                for owner in wanted {
                    self.handle(Ev::Deliver { inst, owner });
                }
                self.at(next, Ev::Pass { inst });
            }
            Ev::Deliver { inst, owner } => {
                if self.passes.as_ref().is_some_and(|p| p.stopped(inst)) {
                    return;
                }
                let o = owner as usize;
                if self.backlog[o].is_empty() {
                    return; // Already worked: nothing to launch.
                }
                match self.place[o] {
                    Where::Running => {}
                    Where::Queued(_) | Where::Idle if self.free[usize::from(inst)] > 0 => self.launch(inst, owner),
                    Where::Queued(_) => {}
                    Where::Idle => {
                        self.place[o] = Where::Queued(inst);
                        self.fifo[usize::from(inst)].push_back(owner);
                    }
                }
            }
            Ev::TurnEnd { inst, owner } => {
                let o = owner as usize;
                self.free[usize::from(inst)] += 1;
                self.place[o] = Where::Idle;
                if !self.backlog[o].is_empty() {
                    self.place[o] = Where::Queued(inst);
                    self.fifo[usize::from(inst)].push_back(owner);
                }
                self.dispatch(inst);
            }
        }
    }

    /// Fill `inst`'s free slots from its FIFO, skipping entries that moved or emptied.
    fn dispatch(&mut self, inst: u16) {
        while self.free[usize::from(inst)] > 0 {
            let Some(owner) = self.fifo[usize::from(inst)].pop_front() else { break };
            if self.place[owner as usize] == Where::Queued(inst) {
                if self.backlog[owner as usize].is_empty() {
                    self.place[owner as usize] = Where::Idle;
                } else {
                    self.launch(inst, owner);
                }
            }
        }
    }

    /// A turn: acquire (one round trip), work up to `per_turn` items, release.
    fn launch(&mut self, inst: u16, owner: u32) {
        let o = owner as usize;
        self.free[usize::from(inst)] -= 1;
        self.place[o] = Where::Running;
        self.tally.productive += 1;
        let mut t = self.now + self.sc.rtt_ms;
        for _ in 0..self.sc.per_turn {
            let Some((arrived, w)) = self.backlog[o].pop_front() else { break };
            t += u64::from(w);
            self.tally.item(arrived, t, self.sc.duration_ms());
        }
        self.at(t + self.sc.rtt_ms, Ev::TurnEnd { inst, owner });
    }
}

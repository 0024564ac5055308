//! The fault run's history and its checker. Three rules:
//!
//! * **`fence.unique`**: no fence is handed to two holdings (two tokens);
//! * **`fence.order`**: the checked resource accepts no write that a fence check
//!   must refuse (`history/check.rs`: in real time, nothing smaller after a larger
//!   fence's write ended), and the same rule finds such writes on the unchecked one;
//! * **`writes.resume`**: after each fault ends, the checked resource accepts a
//!   write of a holding taken after it within one TTL and two seconds (the guard's
//!   loss, a fresh acquire, a reconnect).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::order::{self, Write};

/// How far past one TTL a first write after a fault may come.
const RESUME_SLACK: Duration = Duration::from_secs(2);

/// The faults of the schedule, in the order a full cycle runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    Failover,
    FrozenHolder,
    SlowReplies,
    Partition,
    EmptyRestart,
}

impl Fault {
    pub(crate) const ALL: [Fault; 5] =
        [Fault::Failover, Fault::FrozenHolder, Fault::SlowReplies, Fault::Partition, Fault::EmptyRestart];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::Failover => "failover that loses the last writes",
            Fault::FrozenHolder => "holder frozen past the TTL",
            Fault::SlowReplies => "slow replies (primary stopped 400 ms)",
            Fault::Partition => "partition (proxy held 2 TTL)",
            Fault::EmptyRestart => "restart (Redis: empty; PostgreSQL: crash recovery)",
        }
    }
}

/// One fault as it ran.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FaultRun {
    pub(crate) fault: Fault,
    pub(crate) from: Duration,
    /// When the nemesis had undone it (the replica promoted, the holder thawed, …).
    pub(crate) to: Duration,
}

/// One holding of the lease.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    pub(crate) holder: usize,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) at: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Accepted,
    Stale,
    Failed,
}

/// One write to resource 0 (fence checked) or 1 (plain).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt {
    pub(crate) resource: usize,
    pub(crate) holder: usize,
    pub(crate) fence: u64,
    pub(crate) id: u64,
    pub(crate) start: Duration,
    pub(crate) end: Option<(Duration, Outcome)>,
}

/// What a run recorded.
pub(crate) struct History {
    pub(crate) turns: Vec<Turn>,
    pub(crate) attempts: Vec<Attempt>,
    pub(crate) faults: Vec<FaultRun>,
    /// What each resource holds at the end (ids; the plain one in its order).
    pub(crate) landed: [Vec<u64>; 2],
    pub(crate) ttl: Duration,
    pub(crate) took: Duration,
}

/// A broken rule, and when (for the fault it is counted under).
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) rule: &'static str,
    pub(crate) at: Duration,
    pub(crate) what: String,
}

/// One fault's row of the results table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) fault: Fault,
    pub(crate) runs: usize,
    /// Acquires and writes from the fault's start to the next fault's.
    pub(crate) operations: usize,
    pub(crate) violations: usize,
    /// The longest wait, after the fault ended, for the checked resource's next
    /// accepted write.
    pub(crate) longest_stall: Duration,
}

/// The checker's verdict on a history.
pub(crate) struct Verdict {
    pub(crate) violations: Vec<Violation>,
    /// Stale writes the plain resource accepted (the same rule, unchecked).
    pub(crate) unchecked: usize,
    /// Writes the checked resource refused as stale.
    pub(crate) refused: usize,
    pub(crate) rows: Vec<Row>,
    pub(crate) turns: usize,
    pub(crate) writes: usize,
}

impl History {
    /// The writes `resource` holds, with their intervals and (plain: its order) place.
    fn accepted(&self, resource: usize) -> Vec<Write> {
        let place: BTreeMap<u64, u64> =
            self.landed[resource].iter().enumerate().map(|(i, &id)| (id, i as u64)).collect();
        self.attempts
            .iter()
            .filter(|a| a.resource == resource)
            .filter_map(|a| {
                let seq = place.get(&a.id)?;
                Some(Write {
                    id: a.id,
                    holder: a.holder,
                    fence: a.fence,
                    start: a.start,
                    end: a.end.filter(|(_, o)| *o == Outcome::Accepted).map(|(end, _)| end),
                    seq: (resource == 1).then_some(*seq),
                })
            })
            .collect()
    }
}

pub(crate) fn check(h: &History) -> Verdict {
    let mut violations = Vec::new();
    let mut holders: BTreeMap<u64, &Turn> = BTreeMap::new();
    for t in &h.turns {
        match holders.get(&t.fence) {
            Some(first) if first.token != t.token => violations.push(Violation {
                rule: "fence.unique",
                at: t.at,
                what: format!(
                    "fence {} handed to holder {} at {:.3} s and again to holder {} at {:.3} s",
                    t.fence,
                    first.holder,
                    first.at.as_secs_f64(),
                    t.holder,
                    t.at.as_secs_f64()
                ),
            }),
            Some(_) => {}
            None => {
                holders.insert(t.fence, t);
            }
        }
    }
    for v in order::violations(&h.accepted(0)) {
        let later = v.later();
        violations.push(Violation {
            rule: "fence.order",
            at: later.start,
            what: format!("write {} of fence {} accepted after a larger fence's write ({v:?})", later.id, later.fence),
        });
    }
    let unchecked = order::violations(&h.accepted(1)).len();
    let mut stalls = Vec::new();
    for f in &h.faults {
        // A write of a holding taken after the fault ended: a holder that kept its
        // lease through the fault proves nothing about taking it again.
        let fresh: Vec<u64> = h.turns.iter().filter(|t| t.at >= f.to).map(|t| t.fence).collect();
        let next = h
            .attempts
            .iter()
            .filter(|a| a.resource == 0 && fresh.contains(&a.fence))
            .filter_map(|a| a.end.filter(|(_, o)| *o == Outcome::Accepted).map(|(end, _)| end))
            .filter(|&end| end >= f.to)
            .min();
        let stall = next.map_or(h.took.saturating_sub(f.to), |end| end - f.to);
        if next.is_none() || stall > h.ttl + RESUME_SLACK {
            violations.push(Violation {
                rule: "writes.resume",
                at: f.to,
                what: format!("after {}: no accepted write for {:.3} s", f.fault.name(), stall.as_secs_f64()),
            });
        }
        stalls.push(stall);
    }
    let rows = rows(h, &violations, &stalls);
    let refused = h.attempts.iter().filter(|a| a.resource == 0 && matches!(a.end, Some((_, Outcome::Stale)))).count();
    Verdict { violations, unchecked, refused, rows, turns: h.turns.len(), writes: h.attempts.len() }
}

/// Per fault kind: runs, operations and violations in its windows, longest stall.
fn rows(h: &History, violations: &[Violation], stalls: &[Duration]) -> Vec<Row> {
    let window = |i: usize| {
        let from = h.faults[i].from;
        let to = h.faults.get(i + 1).map_or(h.took, |next| next.from);
        move |at: Duration| at >= from && at < to
    };
    let mut rows: BTreeMap<Fault, Row> = BTreeMap::new();
    for (i, f) in h.faults.iter().enumerate() {
        let inside = window(i);
        let ops =
            h.turns.iter().filter(|t| inside(t.at)).count() + h.attempts.iter().filter(|a| inside(a.start)).count();
        let bad = violations.iter().filter(|v| inside(v.at)).count();
        let row = rows.entry(f.fault).or_insert(Row {
            fault: f.fault,
            runs: 0,
            operations: 0,
            violations: 0,
            longest_stall: Duration::ZERO,
        });
        row.runs += 1;
        row.operations += ops;
        row.violations += bad;
        row.longest_stall = row.longest_stall.max(stalls[i]);
    }
    rows.into_values().collect()
}

impl Verdict {
    /// The results table, as docs/reliability.md shows it.
    pub(crate) fn table(&self) -> String {
        let mut out =
            String::from("| fault | runs | operations | violations | longest stall |\n|---|---:|---:|---:|---:|\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.2} s |\n",
                r.fault.name(),
                r.runs,
                r.operations,
                r.violations,
                r.longest_stall.as_secs_f64()
            ));
        }
        out
    }

    pub(crate) fn json(&self, store: &str) -> serde_json::Value {
        json!({
            "store": store,
            "turns": self.turns,
            "writes": self.writes,
            "violations": self.violations.iter().map(|v| json!({"rule": v.rule, "at_s": v.at.as_secs_f64(), "what": v.what})).collect::<Vec<_>>(),
            "unchecked_stale_accepted": self.unchecked,
            "refused_as_stale": self.refused,
            "rows": self.rows.iter().map(|r| json!({
                "fault": r.fault.name(), "runs": r.runs, "operations": r.operations,
                "violations": r.violations, "longest_stall_s": r.longest_stall.as_secs_f64(),
            })).collect::<Vec<_>>(),
        })
    }

    /// The rules broken, each once.
    pub(crate) fn rules(&self) -> Vec<&'static str> {
        let mut rules: Vec<&'static str> = self.violations.iter().map(|v| v.rule).collect();
        rules.sort_unstable();
        rules.dedup();
        rules
    }
}

//! The fleet run's history (`fleet.rs`) and its checker. Five rules:
//!
//! * **`fence.unique`**: no fence is logged by two ticks (of one process or two);
//! * **`fence.stamped`**: every message arrives with a fence, but those of a tick
//!   that failed open on the lease (the store did not answer its acquire), which
//!   receives for one TTL at most: none later than one TTL and two seconds after a
//!   fault ended;
//! * **`delivery.lost`**: every message fed arrives at the consumer, and the source
//!   ends empty;
//! * **`delivery.once`**: no more messages arrive twice than the processes counted as
//!   possible duplicates (claims that expired under a submit, submits that failed
//!   after the broker may have taken them);
//! * **`writes.resume`**: after each fault ends, the consumer accepts a message
//!   within one TTL and two seconds.
//!
//! What the consumer's fence check refused (a holder's messages that arrived after a
//! newer holder's) is counted, not judged: that is the check doing its work.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use super::check::{Fault, FaultRun, Violation};

/// How far past one TTL the first accepted message after a fault may come.
const RESUME_SLACK: Duration = Duration::from_secs(2);

/// A message at the consumer.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub(crate) id: String,
    pub(crate) fence: Option<u64>,
    pub(crate) at: Duration,
    /// The consumer's fence check refused it: a newer holder's message came first.
    pub(crate) refused: bool,
}

/// One tick a process logged, with the fence it held.
#[derive(Debug, Clone)]
pub(crate) struct Tick {
    pub(crate) instance: usize,
    pub(crate) fence: u64,
    pub(crate) possible_duplicates: u64,
    pub(crate) lease_lost: bool,
}

/// What a fleet run recorded.
pub(crate) struct FleetHistory {
    /// The ids fed, in order.
    pub(crate) fed: Vec<String>,
    pub(crate) arrivals: Vec<Arrival>,
    pub(crate) ticks: Vec<Tick>,
    pub(crate) faults: Vec<FaultRun>,
    /// Messages ready or unacknowledged in the source at the end.
    pub(crate) left_in_source: u64,
    pub(crate) ttl: Duration,
    pub(crate) took: Duration,
}

/// One fault's row of the results table.
#[derive(Debug, Clone)]
pub(crate) struct FleetRow {
    pub(crate) fault: Fault,
    pub(crate) runs: usize,
    /// Messages that arrived from the fault's start to the next fault's.
    pub(crate) operations: usize,
    pub(crate) violations: usize,
    pub(crate) refused: usize,
    pub(crate) longest_stall: Duration,
}

/// The checker's verdict on a fleet history.
pub(crate) struct FleetVerdict {
    pub(crate) violations: Vec<Violation>,
    pub(crate) rows: Vec<FleetRow>,
    pub(crate) fed: usize,
    pub(crate) ticks: usize,
    pub(crate) lost_leases: usize,
    /// Messages that arrived more than once, and the possible duplicates counted.
    pub(crate) twice: usize,
    pub(crate) counted: u64,
    /// Arrivals the consumer's fence check refused.
    pub(crate) refused: usize,
    /// Arrivals without a fence (sent by ticks that failed open).
    pub(crate) unfenced: usize,
}

pub(crate) fn check(h: &FleetHistory) -> FleetVerdict {
    let mut violations = Vec::new();
    let at_end = |violations: &mut Vec<Violation>, rule: &'static str, what: String| {
        violations.push(Violation { rule, at: h.took, what })
    };
    let mut fences: BTreeMap<u64, usize> = BTreeMap::new();
    for t in &h.ticks {
        if let Some(first) = fences.insert(t.fence, t.instance) {
            at_end(
                &mut violations,
                "fence.unique",
                format!("fence {} held by fleet-{first} and again by fleet-{}", t.fence, t.instance),
            );
        }
    }
    let failing_open = |at: Duration| h.faults.iter().any(|f| at >= f.from && at <= f.to + h.ttl + RESUME_SLACK);
    for a in h.arrivals.iter().filter(|a| a.fence.is_none()) {
        if !failing_open(a.at) {
            violations.push(Violation {
                rule: "fence.stamped",
                at: a.at,
                what: format!("{} arrived without a fence at {:.3} s, no fault near", a.id, a.at.as_secs_f64()),
            });
            break;
        }
    }
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    for a in &h.arrivals {
        *times.entry(a.id.as_str()).or_default() += 1;
    }
    let missing: Vec<&String> = h.fed.iter().filter(|id| !times.contains_key(id.as_str())).collect();
    if !missing.is_empty() {
        at_end(
            &mut violations,
            "delivery.lost",
            format!("{} message(s) never arrived: {:?}", missing.len(), &missing[..missing.len().min(5)]),
        );
    }
    if h.left_in_source > 0 {
        at_end(&mut violations, "delivery.lost", format!("{} message(s) left in the source", h.left_in_source));
    }
    let fed: BTreeSet<&str> = h.fed.iter().map(String::as_str).collect();
    let unknown = times.keys().filter(|id| !fed.contains(*id)).count();
    if unknown > 0 {
        at_end(&mut violations, "delivery.once", format!("{unknown} message(s) arrived that were never fed"));
    }
    let twice = times.values().filter(|&&n| n > 1).count();
    let counted: u64 = h.ticks.iter().map(|t| t.possible_duplicates).sum();
    if twice as u64 > counted {
        at_end(
            &mut violations,
            "delivery.once",
            format!("{twice} message(s) arrived twice, {counted} counted as possible duplicates"),
        );
    }
    let mut stalls = Vec::new();
    for f in &h.faults {
        let next = h.arrivals.iter().filter(|a| !a.refused && a.at >= f.to).map(|a| a.at).min();
        let stall = next.map_or(h.took.saturating_sub(f.to), |at| at - f.to);
        if next.is_none() || stall > h.ttl + RESUME_SLACK {
            violations.push(Violation {
                rule: "writes.resume",
                at: f.to,
                what: format!("after {}: no message accepted for {:.3} s", f.fault.name(), stall.as_secs_f64()),
            });
        }
        stalls.push(stall);
    }
    let rows = rows(h, &violations, &stalls);
    FleetVerdict {
        violations,
        rows,
        fed: h.fed.len(),
        ticks: h.ticks.len(),
        lost_leases: h.ticks.iter().filter(|t| t.lease_lost).count(),
        twice,
        counted,
        refused: h.arrivals.iter().filter(|a| a.refused).count(),
        unfenced: h.arrivals.iter().filter(|a| a.fence.is_none()).count(),
    }
}

fn rows(h: &FleetHistory, violations: &[Violation], stalls: &[Duration]) -> Vec<FleetRow> {
    let mut rows: BTreeMap<Fault, FleetRow> = BTreeMap::new();
    for (i, f) in h.faults.iter().enumerate() {
        let to = h.faults.get(i + 1).map_or(h.took, |next| next.from);
        let inside = |at: Duration| at >= f.from && at < to;
        let row = rows.entry(f.fault).or_insert(FleetRow {
            fault: f.fault,
            runs: 0,
            operations: 0,
            violations: 0,
            refused: 0,
            longest_stall: Duration::ZERO,
        });
        row.runs += 1;
        row.operations += h.arrivals.iter().filter(|a| inside(a.at)).count();
        row.refused += h.arrivals.iter().filter(|a| a.refused && inside(a.at)).count();
        row.violations += violations.iter().filter(|v| inside(v.at)).count();
        row.longest_stall = row.longest_stall.max(stalls[i]);
    }
    rows.into_values().collect()
}

impl FleetVerdict {
    /// The results table, as docs/reliability.md shows it.
    pub(crate) fn table(&self) -> String {
        let mut out = String::from(
            "| fault | runs | messages | violations | refused as stale | longest stall |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.2} s |\n",
                r.fault.name(),
                r.runs,
                r.operations,
                r.violations,
                r.refused,
                r.longest_stall.as_secs_f64()
            ));
        }
        out
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        json!({
            "fed": self.fed,
            "ticks": self.ticks,
            "lost_leases": self.lost_leases,
            "arrived_twice": self.twice,
            "counted_possible_duplicates": self.counted,
            "refused_as_stale": self.refused,
            "unfenced": self.unfenced,
            "violations": self.violations.iter().map(|v| json!({"rule": v.rule, "at_s": v.at.as_secs_f64(), "what": v.what})).collect::<Vec<_>>(),
            "rows": self.rows.iter().map(|r| json!({
                "fault": r.fault.name(), "runs": r.runs, "messages": r.operations,
                "violations": r.violations, "refused_as_stale": r.refused,
                "longest_stall_s": r.longest_stall.as_secs_f64(),
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

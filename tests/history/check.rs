//! The history checker: given the writes a resource accepted, each with its fence, the
//! real-time interval its writer saw and (where the resource keeps one) its position in
//! the resource's own order, find every write that a fence check must have refused.
//!
//! Two rules, both from docs/reliability.md ("Fencing"):
//!
//! * **resource order**: in the order the resource applied them, accepted fences never
//!   go down;
//! * **real time**: no write is accepted whose interval starts after the end of an
//!   accepted write with a larger fence (the newer holder's write was done and
//!   answered, and a stale holder's write still landed after it).
//!
//! Writes whose intervals overlap are concurrent and may land in either order, so the
//! real-time rule says nothing about them; a write whose end is unknown (it landed,
//! but its answer never came) only ever plays the later part. A few dozen lines of
//! sorting do this; a model checker (stateright was suggested) explores the states of
//! a model, which is not what is needed here: the histories are real ones, recorded
//! from real servers, and only need checking.

use std::time::Duration;

/// One write a resource accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Write {
    /// Unique over the run.
    pub(crate) id: u64,
    pub(crate) holder: usize,
    pub(crate) fence: u64,
    /// When its writer sent it, since the run began.
    pub(crate) start: Duration,
    /// When its writer had the answer; `None` when none came (it landed all the same).
    pub(crate) end: Option<Duration>,
    /// Its position in the resource's own order, when the resource keeps one.
    pub(crate) seq: Option<u64>,
}

/// A write a fence check must have refused, and the write it came after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// `later` was applied after `earlier` in the resource's own order, with a smaller fence.
    ResourceOrder { earlier: Write, later: Write },
    /// `later` started after `earlier` had ended, with a smaller fence.
    RealTime { earlier: Write, later: Write },
}

impl Violation {
    pub(crate) fn later(&self) -> &Write {
        match self {
            Violation::ResourceOrder { later, .. } | Violation::RealTime { later, .. } => later,
        }
    }
}

/// Every violation of the two rules in `accepted` (in any order): per write, the one
/// against the largest fence before it, in resource order first, then in real time.
pub(crate) fn violations(accepted: &[Write]) -> Vec<Violation> {
    let mut out = Vec::new();

    let mut ordered: Vec<&Write> = accepted.iter().filter(|w| w.seq.is_some()).collect();
    ordered.sort_by_key(|w| w.seq);
    let mut largest: Option<&Write> = None;
    for w in ordered {
        match largest {
            Some(l) if l.fence > w.fence => out.push(Violation::ResourceOrder { earlier: *l, later: *w }),
            Some(l) if l.fence >= w.fence => {}
            _ => largest = Some(w),
        }
    }

    // By end: the largest fence among the writes that ended before each instant.
    let mut ended: Vec<(Duration, &Write)> = accepted.iter().filter_map(|w| Some((w.end?, w))).collect();
    ended.sort_by_key(|(end, _)| *end);
    let mut running: Vec<&Write> = Vec::with_capacity(ended.len());
    for (_, w) in &ended {
        let best = running.last().filter(|b| b.fence >= w.fence).copied().unwrap_or(w);
        running.push(best);
    }
    for w in accepted {
        let before = ended.partition_point(|(end, _)| *end < w.start);
        if let Some(earlier) = before.checked_sub(1).map(|i| running[i])
            && earlier.fence > w.fence
            && !out.iter().any(|v| v.later().id == w.id)
        {
            out.push(Violation::RealTime { earlier: *earlier, later: *w });
        }
    }
    out
}

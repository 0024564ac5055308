//! The passes of `drain owners`' workload ([`Seeded`]): instead of deliveries drawn
//! with the arrivals, every pass each instance requests every owner that still has
//! items, in an order of its own, and an instance whose pass finds none stops.
//! Shared by the fleet of real schedulers and by the oracle.

use std::collections::VecDeque;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;

use super::scenario::{Scenario, Seeded};
use super::workload::Workload;

/// The instances' passes.
pub(crate) struct Passes {
    seeded: Seeded,
    stopped: Vec<bool>,
    rng: SmallRng,
}

impl Passes {
    /// The passes of `sc`, when its workload is seeded; the instances' orders are
    /// drawn from `seed`.
    pub(crate) fn new(sc: &Scenario, seed: u64) -> Option<Passes> {
        let instances = sc.instances.clamp(1, usize::from(u16::MAX));
        sc.seeded.map(|seeded| Passes {
            seeded,
            stopped: vec![false; instances],
            rng: SmallRng::seed_from_u64(seed ^ 0x009A_55E5),
        })
    }

    /// Put every item in its backlog (all arrive at time 0) and answer the instances,
    /// whose first pass is due at once.
    pub(crate) fn start(&self, w: &Workload, backlog: &mut [VecDeque<(u64, u32)>]) -> impl Iterator<Item = u16> {
        for n in 0..w.arrivals.len() {
            let _ = w.arrive(u32::try_from(n).unwrap_or(u32::MAX), backlog);
        }
        (0..self.stopped.len()).map(|i| u16::try_from(i).unwrap_or(u16::MAX))
    }

    /// Milliseconds between two passes of one instance.
    pub(crate) fn every_ms(&self) -> u64 {
        self.seeded.pass_ms.max(1)
    }

    /// `inst`'s pass: the owners it requests, in its order, of `owners` owners of
    /// which `pending` says which still have items. None: `inst` stops, for good.
    pub(crate) fn pass(&mut self, inst: u16, owners: usize, pending: impl Fn(usize) -> bool) -> Vec<u32> {
        if self.stopped(inst) {
            return Vec::new();
        }
        let mut wanted: Vec<u32> =
            (0..owners).filter(|&o| pending(o)).map(|o| u32::try_from(o).unwrap_or(u32::MAX)).collect();
        if wanted.is_empty() {
            self.stopped[usize::from(inst)] = true;
        }
        wanted.shuffle(&mut self.rng);
        wanted
    }

    /// `inst` has stopped: it starts nothing more (its running turns finish).
    pub(crate) fn stopped(&self, inst: u16) -> bool {
        self.stopped.get(usize::from(inst)).copied().unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{Kind, REPORTED};
    use super::super::run_policy;
    use super::*;

    /// On `drain owners`' workload every policy works every item exactly once and
    /// stops, the oracle wastes nothing, and claim-aware admission cuts the claim-busy
    /// turns legacy runs (the passes request every owner of every instance).
    #[test]
    fn every_item_once_and_every_instance_stops_on_the_seeded_workload() {
        let mut sc = Scenario::preset("owners").expect("preset");
        sc.owners = 40;
        sc.seeded = Some(Seeded { items: 2_000, pass_ms: 100 });
        let w = Workload::generate(&sc, 3);
        let mut busy = Vec::new();
        for policy in REPORTED {
            let t = run_policy(&sc, &w, &policy, 3, &Default::default());
            let key = policy.key;
            assert_eq!((t.latencies.len(), t.unfinished), (2_000, 0), "{key}: every item once");
            assert_eq!(t.productive, 40 * 3, "{key}: 50 items an owner in turns of 20, 20 and 10");
            assert!(t.end_ms < 60_000, "{key}: the instances stopped ({} ms)", t.end_ms);
            if policy.kind == Kind::Oracle {
                assert_eq!((t.claim_busy, t.empty), (0, 0), "{key}");
            }
            busy.push(t.claim_busy);
        }
        assert!(busy[1] * 5 < busy[0], "claim-aware cuts legacy's claim-busy turns: {busy:?}");
    }

    #[test]
    fn a_pass_names_the_pending_owners_and_an_empty_one_stops_its_instance() {
        let mut sc = Scenario::preset("owners").expect("preset");
        sc.instances = 2;
        let mut p = Passes::new(&sc, 1).expect("seeded");
        let mut first = p.pass(0, 6, |o| o % 2 == 0);
        first.sort_unstable();
        assert_eq!(first, [0, 2, 4]);
        assert!(p.pass(1, 6, |_| false).is_empty());
        assert!(p.stopped(1) && !p.stopped(0), "only the instance whose pass found nothing");
        assert!(p.pass(1, 6, |_| true).is_empty(), "stopped for good");
        assert!(Passes::new(&Scenario::preset("default").expect("preset"), 1).is_none());
    }
}

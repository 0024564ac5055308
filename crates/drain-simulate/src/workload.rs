//! The request stream, drawn once from the seed so that every policy faces exactly the
//! same arrivals, deliveries and per-item work.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::scenario::Scenario;

/// One arrival: items landing in an owner's backlog at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arrival {
    /// Milliseconds since the start.
    pub(crate) at: u64,
    /// Owner index (0 is the most popular).
    pub(crate) owner: u32,
    /// Index of the first item in [`Workload::work_ms`].
    pub(crate) first_item: u32,
    /// Items it brings (at least 1).
    pub(crate) items: u32,
    /// Index of the first delivery in [`Workload::deliveries`].
    pub(crate) first_delivery: u32,
    /// Deliveries of its request.
    pub(crate) deliveries: u32,
}

/// One request reaching one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// Milliseconds after the arrival.
    pub(crate) delay: u32,
    /// The instance.
    pub(crate) instance: u16,
}

/// Everything random about the outside world.
#[derive(Debug, Clone)]
pub(crate) struct Workload {
    /// In time order.
    pub(crate) arrivals: Vec<Arrival>,
    /// Work of each item, milliseconds.
    pub(crate) work_ms: Vec<u32>,
    /// Deliveries, grouped by arrival.
    pub(crate) deliveries: Vec<Delivery>,
}

/// Owner popularity: a Zipf-like distribution over ranks, sampled by inverting its CDF.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Zipf {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n.max(1))
            .map(|r| {
                acc += 1.0 / (r as f64).powf(s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut SmallRng) -> u32 {
        let u: f64 = rng.random();
        let i = self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1);
        u32::try_from(i).unwrap_or(u32::MAX)
    }
}

/// Exponential with this mean.
fn exp(rng: &mut SmallRng, mean: f64) -> f64 {
    let u: f64 = rng.random();
    -(1.0 - u).ln() * mean
}

/// Standard normal (Box–Muller).
fn normal(rng: &mut SmallRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One item's work: log-normal body, Pareto tail, capped; at least 1 ms.
fn item_ms(rng: &mut SmallRng, sc: &Scenario) -> u32 {
    let body = sc.service_median_ms * (sc.service_sigma * normal(rng)).exp();
    let ms = if rng.random_bool(sc.tail_p.clamp(0.0, 1.0)) {
        let u: f64 = 1.0 - rng.random::<f64>();
        body + sc.tail_min_ms * u.powf(-1.0 / 1.5)
    } else {
        body
    };
    (ms.round() as u32).clamp(1, sc.service_cap_ms.max(1))
}

impl Workload {
    /// Arrival `n` happens: its items join its owner's backlog, stamped with the
    /// arrival time. Returns its request's deliveries as `(at, instance, owner)` and
    /// the time of the next arrival, for the caller to schedule in its own agenda.
    pub(crate) fn arrive<'w>(
        &'w self,
        n: u32,
        backlog: &mut [VecDeque<(u64, u32)>],
    ) -> (impl Iterator<Item = (u64, u16, u32)> + 'w, Option<u64>) {
        let a = self.arrivals[n as usize];
        let items = &self.work_ms[a.first_item as usize..][..a.items as usize];
        backlog[a.owner as usize].extend(items.iter().map(|&work| (a.at, work)));
        let deliveries = self.deliveries[a.first_delivery as usize..][..a.deliveries as usize]
            .iter()
            .map(move |d| (a.at + u64::from(d.delay), d.instance, a.owner));
        (deliveries, self.arrivals.get(n as usize + 1).map(|next| next.at))
    }

    /// Draw the workload of `sc` from `seed`.
    pub(crate) fn generate(sc: &Scenario, seed: u64) -> Workload {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5EED_F1EE7);
        if let Some(seeded) = sc.seeded {
            return Workload::seeded(sc, seeded.items, &mut rng);
        }
        let zipf = Zipf::new(sc.owners, sc.zipf_s);
        let instances = sc.instances.clamp(1, usize::from(u16::MAX));
        let k = sc.requested_of.clamp(1, instances);
        // The base rate is set so that the mean over a burst cycle is `rate_per_s`.
        let (every, len) = (sc.burst_every_s.max(1) as f64, sc.burst_len_s as f64);
        let share = (len / every).min(1.0);
        let base_items = sc.rate_per_s.max(0.0) / (1.0 + (sc.burst_factor - 1.0).max(0.0) * share);
        let per_arrival = sc.items_per_arrival.max(1.0);
        let base_arrivals_per_ms = base_items / per_arrival / 1000.0;
        let end = sc.duration_ms() as f64;
        let (mut arrivals, mut work_ms, mut deliveries) = (Vec::new(), Vec::new(), Vec::new());
        let mut picked: Vec<u16> = Vec::with_capacity(k);
        let mut t = 0.0f64;
        if base_arrivals_per_ms <= 0.0 {
            return Workload { arrivals, work_ms, deliveries };
        }
        loop {
            let in_burst = sc.burst_len_s > 0 && (t / 1000.0) % every < len;
            let rate = if in_burst { base_arrivals_per_ms * sc.burst_factor.max(1.0) } else { base_arrivals_per_ms };
            t += exp(&mut rng, 1.0 / rate);
            if t >= end {
                break;
            }
            let owner = zipf.sample(&mut rng);
            // 1 + geometric extra items, mean `per_arrival`.
            let p_more = 1.0 - 1.0 / per_arrival;
            let mut items = 1u32;
            while items < 10_000 && rng.random_bool(p_more) {
                items += 1;
            }
            let first_item = u32::try_from(work_ms.len()).unwrap_or(u32::MAX);
            for _ in 0..items {
                work_ms.push(item_ms(&mut rng, sc));
            }
            picked.clear();
            while picked.len() < k {
                let i = rng.random_range(0..instances) as u16;
                if !picked.contains(&i) {
                    picked.push(i);
                }
            }
            let first_delivery = u32::try_from(deliveries.len()).unwrap_or(u32::MAX);
            for &instance in &picked {
                let mut delay = exp(&mut rng, sc.delivery_mean_ms);
                deliveries.push(Delivery { delay: delay as u32, instance });
                for _ in 0..sc.rerequests {
                    delay += exp(&mut rng, sc.rerequest_gap_ms);
                    deliveries.push(Delivery { delay: delay as u32, instance });
                }
            }
            let count = u32::try_from(deliveries.len()).unwrap_or(u32::MAX) - first_delivery;
            arrivals.push(Arrival { at: t as u64, owner, first_item, items, first_delivery, deliveries: count });
        }
        Workload { arrivals, work_ms, deliveries }
    }

    /// `items` items round-robin over the owners, all at time 0, each drawn as the
    /// stream's are; no deliveries (the passes request the owners).
    fn seeded(sc: &Scenario, items: u32, rng: &mut SmallRng) -> Workload {
        let owners = u32::try_from(sc.owners.max(1)).unwrap_or(u32::MAX);
        let work_ms: Vec<u32> = (0..items).map(|_| item_ms(rng, sc)).collect();
        let arrivals = (0..owners.min(items))
            .scan(0u32, |first_item, owner| {
                let n = items / owners + u32::from(owner < items % owners);
                let a = Arrival { at: 0, owner, first_item: *first_item, items: n, first_delivery: 0, deliveries: 0 };
                *first_item += n;
                Some(a)
            })
            .collect();
        Workload { arrivals, work_ms, deliveries: Vec::new() }
    }

    /// Items in the whole run.
    pub(crate) fn items(&self) -> usize {
        self.work_ms.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_follows_the_scenario() {
        let sc = Scenario::preset("default").expect("preset");
        let w = Workload::generate(&sc, 1);
        let per_s = w.items() as f64 / sc.duration_s as f64;
        assert!((per_s - sc.rate_per_s).abs() < sc.rate_per_s * 0.1, "mean rate {per_s}");
        assert!(w.arrivals.windows(2).all(|p| p[0].at <= p[1].at), "in time order");
        // Zipf: the top owner is far more popular than the median one.
        let top = w.arrivals.iter().filter(|a| a.owner == 0).count();
        let mid = w.arrivals.iter().filter(|a| a.owner == 100).count();
        assert!(top > 20 * mid.max(1), "top {top} mid {mid}");
        // Every arrival is requested of 3 distinct instances.
        for a in &w.arrivals {
            let ds = &w.deliveries[a.first_delivery as usize..][..a.deliveries as usize];
            let mut insts: Vec<u16> = ds.iter().map(|d| d.instance).collect();
            insts.sort_unstable();
            insts.dedup();
            assert_eq!(insts.len(), 3);
        }
        // A heavy tail: the largest item is orders of magnitude above the median.
        let mut work = w.work_ms.clone();
        work.sort_unstable();
        assert!(work[work.len() - 1] > 50 * work[work.len() / 2]);
        assert_eq!(Workload::generate(&sc, 1).work_ms, w.work_ms, "same seed, same workload");
    }

    #[test]
    fn the_owners_preset_seeds_every_item_at_the_start_round_robin() {
        let mut sc = Scenario::preset("owners").expect("preset");
        sc.owners = 3;
        sc.seeded = Some(super::super::scenario::Seeded { items: 8, pass_ms: 100 });
        let w = Workload::generate(&sc, 1);
        let shape: Vec<(u64, u32, u32, u32)> =
            w.arrivals.iter().map(|a| (a.at, a.owner, a.first_item, a.items)).collect();
        assert_eq!(shape, [(0, 0, 0, 3), (0, 1, 3, 3), (0, 2, 6, 2)]);
        assert_eq!((w.items(), w.deliveries.len()), (8, 0));
        assert!(w.work_ms.iter().all(|&ms| ms == 2), "2 ms an item, no spread: {:?}", w.work_ms);
    }
}

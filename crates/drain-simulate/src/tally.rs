//! What one policy's run counted, and the arithmetic of its summary.

/// Counts and samples of one owner-side run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    /// Turns that lost the claim race.
    pub(crate) claim_busy: u64,
    /// Turns that worked at least one item.
    pub(crate) productive: u64,
    /// Turns that took the claim and found nothing to do.
    pub(crate) empty: u64,
    /// Owners peeked (one key each).
    pub(crate) peeks: u64,
    /// Peek round trips (batches).
    pub(crate) peek_round_trips: u64,
    /// Intents handed back by a scheduler (timer cap overflow).
    pub(crate) handoffs: u64,
    /// Most retry timers pending on one instance at once.
    pub(crate) timers_max: usize,
    /// Most retry timers pending across the fleet at once.
    pub(crate) timers_fleet_max: usize,
    /// Release notifications delivered to an instance.
    pub(crate) wakes_sent: u64,
    /// Notifications that took an owner off its retry timer.
    pub(crate) wakes_effective: u64,
    /// Requests that reached an instance while it held the owner on a claim retry
    /// timer: coalesced into the backoff (the request does not pull it forward).
    pub(crate) absorbed_by_backoff: u64,
    /// Requests dropped at a peek because a drain that began after they were made
    /// served them (drain stamps).
    pub(crate) served: u64,
    /// Per completed item: milliseconds from its arrival to the end of its work.
    pub(crate) latencies: Vec<u32>,
    /// Items completed by the end of the arrival window.
    pub(crate) done_in_window: u64,
    /// Items left in backlogs when the run stopped.
    pub(crate) unfinished: u64,
    /// Virtual time of the last event.
    pub(crate) end_ms: u64,
    /// The same, over time.
    pub(crate) series: Series,
}

/// Per-bucket counts over the arrival window, for the chart.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    /// Bucket width.
    pub(crate) bucket_ms: u64,
    /// Claim-busy plus empty turns, by the bucket in which they ended.
    pub(crate) wasted: Vec<u64>,
    /// Item latencies, by the bucket of the item's arrival.
    pub(crate) latencies: Vec<Vec<u32>>,
}

/// Buckets of a chart.
pub(crate) const BUCKETS: u64 = 60;

impl Series {
    /// `BUCKETS` empty buckets over `window_ms`.
    pub(crate) fn new(window_ms: u64) -> Series {
        let bucket_ms = window_ms.div_ceil(BUCKETS).max(1);
        let n = window_ms.div_ceil(bucket_ms).max(1) as usize;
        Series { bucket_ms, wasted: vec![0; n], latencies: vec![Vec::new(); n] }
    }

    fn index(&self, at: u64) -> Option<usize> {
        let i = (at / self.bucket_ms.max(1)) as usize;
        (i < self.wasted.len()).then_some(i)
    }

    /// A wasted turn ended at `at` (ignored after the window).
    pub(crate) fn waste(&mut self, at: u64) {
        if let Some(i) = self.index(at) {
            self.wasted[i] += 1;
        }
    }

    /// An item that arrived at `arrived` took `latency`.
    pub(crate) fn latency(&mut self, arrived: u64, latency: u32) {
        if let Some(i) = self.index(arrived) {
            self.latencies[i].push(latency);
        }
    }

    /// The p99 latency of each bucket (`None` when no item arrived in it).
    pub(crate) fn p99(&self) -> Vec<Option<u32>> {
        self.latencies
            .iter()
            .map(|l| {
                let mut l = l.clone();
                l.sort_unstable();
                percentile(&l, 0.99)
            })
            .collect()
    }
}

impl Tally {
    /// An empty tally whose series covers `window_ms`.
    pub(crate) fn new(window_ms: u64) -> Tally {
        Tally { series: Series::new(window_ms), ..Tally::default() }
    }

    /// An item that arrived at `arrived` finished its work at `done`.
    pub(crate) fn item(&mut self, arrived: u64, done: u64, window_ms: u64) {
        let latency = u32::try_from(done.saturating_sub(arrived)).unwrap_or(u32::MAX);
        self.latencies.push(latency);
        self.series.latency(arrived, latency);
        if done <= window_ms {
            self.done_in_window += 1;
        }
    }

    /// A turn that lost the claim race ended at `at`.
    pub(crate) fn busy(&mut self, at: u64) {
        self.claim_busy += 1;
        self.series.waste(at);
    }

    /// A turn that found nothing to do ended at `at`.
    pub(crate) fn empty(&mut self, at: u64) {
        self.empty += 1;
        self.series.waste(at);
    }
}

/// Nearest-rank percentile of sorted samples.
pub(crate) fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// `x` rounded to 3 decimals, so reports stay short and stable.
pub(crate) fn round3(x: f64) -> f64 {
    if x.is_finite() { (x * 1000.0).round() / 1000.0 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(round3(1.23456), 1.235);
        assert_eq!(round3(f64::NAN), 0.0);
    }

    #[test]
    fn series_buckets_cover_the_window() {
        let mut s = Series::new(600_000);
        assert_eq!((s.bucket_ms, s.wasted.len()), (10_000, 60));
        s.waste(0);
        s.waste(599_999);
        s.waste(600_000);
        s.latency(5, 30);
        s.latency(15_000, 40);
        assert_eq!((s.wasted[0], s.wasted[59]), (1, 1));
        assert_eq!(s.p99()[..3], [Some(30), Some(40), None]);
    }
}

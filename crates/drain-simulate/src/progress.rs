//! How far each job of a simulation has got in virtual time, for a progress bar. The jobs write, a display thread reads; nothing here changes what
//! is simulated.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::policy::Policy;
use super::scenario::Scenario;

/// One job's virtual time reached, and whether it finished.
#[derive(Debug, Default)]
pub(crate) struct Reached {
    ms: AtomicU64,
    done: AtomicBool,
}

impl Reached {
    /// The job's virtual clock is at `ms`.
    pub(crate) fn at(&self, ms: u64) {
        self.ms.store(ms, Ordering::Relaxed);
    }

    fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }
}

/// How far a simulation has got: every job of it (both tick runs, then each policy).
/// [`simulate`](crate::simulate) writes it from its threads; another thread may read
/// [`Progress::per_mille`] and [`Progress::jobs_done`] meanwhile, to show a bar.
#[derive(Debug)]
pub struct Progress {
    jobs: Vec<Reached>,
    window_ms: u64,
    all_done: AtomicBool,
}

impl Progress {
    /// The jobs [`simulate`](crate::simulate) runs for `policies` on `sc`.
    pub fn new(sc: &Scenario, policies: &[Policy]) -> Self {
        Progress {
            jobs: (0..policies.len() + 2).map(|_| Reached::default()).collect(),
            window_ms: sc.duration_ms().max(1),
            all_done: AtomicBool::new(false),
        }
    }

    /// Job `i`'s counters (0 and 1 are the tick runs).
    pub(crate) fn job(&self, i: usize) -> &Reached {
        &self.jobs[i]
    }

    /// Job `i` finished.
    pub(crate) fn finish_job(&self, i: usize) {
        self.jobs[i].finish();
    }

    /// The whole simulation finished: the caller says so once
    /// [`simulate`](crate::simulate) returned, to stop its display.
    pub fn finish(&self) {
        self.all_done.store(true, Ordering::Release);
    }

    /// Whether [`Progress::finish`] was called.
    pub fn finished(&self) -> bool {
        self.all_done.load(Ordering::Acquire)
    }

    /// Per mille of the work done: each job counts up to the end of the arrival
    /// window (draining after it counts as the window's end), a finished job fully.
    pub fn per_mille(&self) -> u64 {
        let w = self.window_ms;
        let sum: u64 = self
            .jobs
            .iter()
            .map(|j| if j.done.load(Ordering::Acquire) { w } else { j.ms.load(Ordering::Relaxed).min(w) })
            .sum();
        sum.saturating_mul(1000) / (w * self.jobs.len() as u64).max(1)
    }

    /// `(finished jobs, all jobs)`.
    pub fn jobs_done(&self) -> (usize, usize) {
        (self.jobs.iter().filter(|j| j.done.load(Ordering::Acquire)).count(), self.jobs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::REPORTED;
    use super::*;

    #[test]
    fn progress_counts_virtual_time_up_to_the_window_and_finished_jobs_fully() {
        let sc = Scenario::preset("default").expect("preset");
        let p = Progress::new(&sc, &REPORTED);
        let n = REPORTED.len() + 2;
        assert_eq!((p.per_mille(), p.jobs_done()), (0, (0, n)));
        p.job(2).at(sc.duration_ms() / 2);
        assert_eq!(p.per_mille(), 1000 / (2 * n as u64));
        p.job(2).at(sc.duration_ms() * 3);
        assert_eq!(p.per_mille(), 1000 / n as u64, "draining past the window counts as the window");
        for i in 0..n {
            p.finish_job(i);
        }
        assert_eq!((p.per_mille(), p.jobs_done()), (1000, (n, n)));
        assert!(!p.finished());
        p.finish();
        assert!(p.finished());
    }
}

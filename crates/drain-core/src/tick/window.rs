//! The in-flight window: how many messages a drain submits at once, and asks for per
//! receive. Sans-IO: it is told how each step went (its submits that succeeded and
//! failed, and how long they took, as the drain's clock measured them) and answers
//! its size.
//!
//! Adaptive (the default) it starts at the batch, so the first message waits for no
//! larger receive than before, and then, over samples of at least [`SAMPLE_STEPS`]
//! full steps and [`SAMPLE_TIME`]:
//! * it doubles to probe the target, and keeps doubling while each doubling raised
//!   the target's throughput by a tenth, up to its maximum;
//! * a doubling that did not pay is taken back, and the next probe waits
//!   [`HOLD_SAMPLES`] samples: a slow target, whose throughput does not rise with
//!   more in flight, is held near the smallest window that gave its rate;
//! * a step with a failed submit halves it (never below the floor) and holds it
//!   alike: a target that refuses or times out is given less to hold.
//!
//! A step smaller than the window (the source ran short) says nothing about the
//! target and is left out of the samples. What the window holds at most bounds the
//! messages a drain keeps in memory: three batches of it (one received and claimed,
//! one in its step, one being settled at the source).

use std::time::Duration;

/// Full steps a sample spans at least.
pub(crate) const SAMPLE_STEPS: u32 = 2;
/// Time a sample spans at least: long enough that the clock's milliseconds do not
/// decide the rate.
pub(crate) const SAMPLE_TIME: Duration = Duration::from_millis(20);

/// Samples a window waits after a probe that did not pay, or a failure, before it
/// probes again.
pub(crate) const HOLD_SAMPLES: u32 = 8;

/// How many messages a tick keeps in flight to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InFlight {
    /// `concurrency` submits at once, receives of `batch`: the window never moves.
    Fixed,
    /// A window that starts at `batch` and adapts to the target (grows while its
    /// throughput rises, halves when a submit fails), never below `concurrency` nor
    /// above `max`; each receive asks for the window and each step submits all of it
    /// at once.
    Adaptive {
        /// The most messages in flight, and per receive.
        max: usize,
    },
}

/// The window's state (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    adaptive: bool,
    /// Fixed: submits at once. Adaptive: the window.
    size: usize,
    /// Fixed: messages per receive. Adaptive: unused.
    batch: usize,
    floor: usize,
    max: usize,
    /// Submitted and time taken by the full steps since the size last changed.
    sample: Sample,
    /// A probe is on: the rate before the window doubled.
    probing: Option<u64>,
    /// Samples to wait before the next probe.
    hold: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sample {
    steps: u32,
    submitted: u64,
    took: Duration,
}

impl Window {
    /// A window per `in_flight`, `concurrency` (the floor) and `batch` (the start).
    pub(crate) fn new(in_flight: InFlight, concurrency: usize, batch: usize) -> Self {
        let (concurrency, batch) = (concurrency.max(1), batch.max(1));
        let (adaptive, size, max) = match in_flight {
            InFlight::Fixed => (false, concurrency, concurrency),
            InFlight::Adaptive { max } => {
                let max = max.max(concurrency);
                (true, batch.clamp(concurrency, max), max)
            }
        };
        let sample = Sample::default();
        Window { adaptive, size, batch, floor: concurrency, max, sample, probing: None, hold: 0 }
    }

    /// Submits at once.
    pub(crate) fn in_flight(&self) -> usize {
        self.size
    }

    /// Messages asked for per receive.
    pub(crate) fn batch(&self) -> usize {
        if self.adaptive { self.size } else { self.batch }
    }

    /// A step ended: `submitted` submits succeeded and `failed` failed, of `jobs`,
    /// in `took`.
    pub(crate) fn handle_step(&mut self, jobs: usize, submitted: u64, failed: u64, took: Duration) {
        if !self.adaptive {
            return;
        }
        if failed > 0 {
            self.back_off();
            return;
        }
        if jobs < self.size || submitted == 0 {
            return;
        }
        let s = &mut self.sample;
        s.steps += 1;
        s.submitted += submitted;
        s.took += took;
        if s.steps < SAMPLE_STEPS || s.took < SAMPLE_TIME {
            return;
        }
        let millis = u64::try_from(s.took.as_millis()).unwrap_or(u64::MAX).max(1);
        let rate = s.submitted.saturating_mul(1_000) / millis;
        self.sample = Sample::default();
        match self.probing.take() {
            // Not a tenth faster for twice as many in flight: take it back.
            Some(before) if rate.saturating_mul(10) < before.saturating_mul(11) => self.back_off(),
            Some(_) => self.probe(rate),
            None if self.hold > 0 => self.hold -= 1,
            None => self.probe(rate),
        }
    }

    /// Double the window, remembering the rate it has to beat.
    fn probe(&mut self, rate: u64) {
        if self.size < self.max {
            self.size = self.size.saturating_mul(2).min(self.max);
            self.probing = Some(rate);
        }
    }

    /// Halve the window and hold it there a while.
    fn back_off(&mut self) {
        self.size = (self.size / 2).clamp(self.floor, self.max);
        self.sample = Sample::default();
        self.probing = None;
        self.hold = HOLD_SAMPLES;
    }
}

#[cfg(test)]
mod tests;

//! The event queue of the simulations: a timing wheel of one-millisecond slots for
//! the near future and a binary heap for the far one.
//!
//! Order is exactly (time, insertion order), as a heap of `(time, sequence, event)`
//! would give, at O(1) per event instead of O(log n): far events move onto the wheel
//! the moment their slot enters the window, before anything else can be added to it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// The wheel spans this many milliseconds (about 65 s: every turn, peek, delivery
/// and 5–15 s backoff of the scenarios lands on it).
const SPAN: u64 = 1 << 16;

/// Events of type `E` ordered by time, then by insertion.
#[derive(Debug)]
pub(crate) struct Agenda<E> {
    now: u64,
    slots: Vec<VecDeque<E>>,
    far: BinaryHeap<Reverse<(u64, u64, E)>>,
    seq: u64,
    len: usize,
}

impl<E: Ord> Agenda<E> {
    /// Empty, at time zero.
    pub(crate) fn new() -> Self {
        Agenda { now: 0, slots: (0..SPAN).map(|_| VecDeque::new()).collect(), far: BinaryHeap::new(), seq: 0, len: 0 }
    }

    /// Schedule `ev` at `at` (never before the current time).
    pub(crate) fn push(&mut self, at: u64, ev: E) {
        let at = at.max(self.now);
        self.len += 1;
        if at - self.now < SPAN {
            self.slots[(at % SPAN) as usize].push_back(ev);
        } else {
            self.seq += 1;
            self.far.push(Reverse((at, self.seq, ev)));
        }
    }

    /// The earliest event and its time, or `None` when nothing is left or the next
    /// event is after `until`.
    pub(crate) fn pop(&mut self, until: u64) -> Option<(u64, E)> {
        if self.len == 0 {
            return None;
        }
        loop {
            if let Some(ev) = self.slots[(self.now % SPAN) as usize].pop_front() {
                self.len -= 1;
                return Some((self.now, ev));
            }
            if self.now >= until {
                return None;
            }
            // Nothing on the wheel this millisecond: jump straight to the far heap's
            // first event when the wheel is empty.
            self.now += 1;
            if self.len == self.far.len()
                && let Some(Reverse((at, _, _))) = self.far.peek()
            {
                self.now = self.now.max(*at).min(until);
            }
            while let Some(Reverse((at, _, _))) = self.far.peek() {
                if *at >= self.now + SPAN {
                    break;
                }
                let Some(Reverse((at, _, ev))) = self.far.pop() else { break };
                self.slots[(at % SPAN) as usize].push_back(ev);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain heap of (time, sequence): the same order, for near, far and
    /// same-millisecond events pushed while popping.
    #[test]
    fn same_order_as_a_heap() {
        let mut a = Agenda::new();
        let mut h = BinaryHeap::new();
        let mut seq = 0u64;
        let mut x = 12345u64;
        let mut push = |a: &mut Agenda<u64>, h: &mut BinaryHeap<Reverse<(u64, u64)>>, at: u64| {
            seq += 1;
            a.push(at, seq);
            h.push(Reverse((at, seq)));
        };
        for _ in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            push(&mut a, &mut h, (x >> 33) % 500_000);
        }
        let mut popped = 0;
        while let Some(Reverse((at, s))) = h.pop() {
            assert_eq!(a.pop(u64::MAX), Some((at, s)));
            popped += 1;
            if popped % 3 == 0 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let delay = [0, 1, 15_000, SPAN - 1, SPAN, 3 * SPAN][(x >> 40) as usize % 6];
                push(&mut a, &mut h, at + delay);
            }
        }
        assert_eq!(a.pop(u64::MAX), None);
    }

    #[test]
    fn pop_stops_at_the_horizon() {
        let mut a = Agenda::new();
        a.push(10, 'a');
        a.push(100_000, 'b');
        assert_eq!(a.pop(50), Some((10, 'a')));
        assert_eq!(a.pop(50), None);
        assert_eq!(a.pop(200_000), Some((100_000, 'b')));
    }
}

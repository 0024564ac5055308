//! The owner-claim store of the simulated fleet: `SET NX PX` / compare-and-delete /
//! `GET`+`PTTL` semantics on virtual time, plus the waiter lists a release
//! notification pops.
//!
//! Why not drain-core's `MemoryStore`: it implements the same semantics (a test below
//! checks them side by side), but every call locks a mutex, sweeps every key for
//! expiry and boxes a future; the owner side of the `large` scenario makes tens of
//! millions of claim operations, and a plain vector indexed by owner keeps it in
//! seconds. The tick side, which makes a few thousand calls, does use `MemoryStore`
//! through drain-core's real `run_tick`.

use std::collections::VecDeque;

/// One held claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    /// The instance holding it.
    pub(crate) holder: u16,
    /// When it was acquired (ms).
    pub(crate) since: u64,
    /// Its TTL (ms); with `renewed`, renewed every TTL/3 while held.
    pub(crate) ttl: u64,
    /// Whether the holder renews it (a tight TTL kept alive by renewal).
    pub(crate) renewed: bool,
}

impl Hold {
    /// Remaining TTL at `now` (what `PTTL` answers), in milliseconds; zero once expired.
    pub(crate) fn remaining(&self, now: u64) -> u64 {
        let age = now.saturating_sub(self.since);
        if self.renewed {
            let period = (self.ttl / 3).max(1);
            self.ttl - (age % period)
        } else {
            self.ttl.saturating_sub(age)
        }
    }
}

/// Claims, release waiters and drain stamps, by owner index.
#[derive(Debug, Clone)]
pub(crate) struct Claims {
    holds: Vec<Option<Hold>>,
    waiters: Vec<VecDeque<u16>>,
    /// When the latest drained turn took the claim (ms): the drain stamp, published by
    /// [`Claims::release_drained`] as drain-core's `DrainStamps` does.
    marks: Vec<Option<u64>>,
}

impl Claims {
    /// No claim held, nobody waiting.
    pub(crate) fn new(owners: usize) -> Claims {
        Claims { holds: vec![None; owners], waiters: vec![VecDeque::new(); owners], marks: vec![None; owners] }
    }

    /// The live claim of `owner` at `now` (expired claims are gone, as with `PX`).
    pub(crate) fn peek(&self, owner: usize, now: u64) -> Option<Hold> {
        self.holds[owner].filter(|h| h.remaining(now) > 0)
    }

    /// `SET NX PX`: take the claim if nobody holds it.
    pub(crate) fn acquire(&mut self, owner: usize, holder: u16, now: u64, ttl: u64, renewed: bool) -> bool {
        if self.peek(owner, now).is_some() {
            return false;
        }
        self.holds[owner] = Some(Hold { holder, since: now, ttl: ttl.max(1), renewed });
        true
    }

    /// Compare-and-delete: release only a claim `holder` still holds.
    pub(crate) fn release(&mut self, owner: usize, holder: u16, now: u64) -> bool {
        match self.peek(owner, now) {
            Some(h) if h.holder == holder => {
                self.holds[owner] = None;
                true
            }
            _ => false,
        }
    }

    /// [`Claims::release`], and when it released and `drained`, publish the drain
    /// mark: the time the released claim was taken.
    pub(crate) fn release_drained(&mut self, owner: usize, holder: u16, now: u64, drained: bool) -> bool {
        let since = self.peek(owner, now).map(|h| h.since);
        let released = self.release(owner, holder, now);
        if let (true, true, Some(since)) = (released, drained, since) {
            self.marks[owner] = Some(self.marks[owner].map_or(since, |m| m.max(since)));
        }
        released
    }

    /// How long before `now` the owner's latest drained turn took the claim.
    pub(crate) fn drained_ago(&self, owner: usize, now: u64) -> Option<u64> {
        self.marks[owner].map(|m| now.saturating_sub(m))
    }

    /// Register `instance` as waiting for `owner`'s release (at most once).
    pub(crate) fn wait(&mut self, owner: usize, instance: u16) {
        let list = &mut self.waiters[owner];
        if !list.contains(&instance) {
            list.push_back(instance);
        }
    }

    /// Take the oldest waiter of `owner` for which `still_waiting` holds; the others
    /// (stale: their timer fired already) are dropped on the way.
    pub(crate) fn pop_waiter(&mut self, owner: usize, mut still_waiting: impl FnMut(u16) -> bool) -> Option<u16> {
        let list = &mut self.waiters[owner];
        while let Some(i) = list.pop_front() {
            if still_waiting(i) {
                return Some(i);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use drain_core::memory::{ManualClock, MemoryStore};
    use drain_core::ports::{Acquire, Clock, LeaseName, LeaseStore, Release};
    use drain_core::{LeaseToken, Time};
    use futures::FutureExt;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    /// The same script of acquires, releases and peeks on this map and on drain-core's
    /// `MemoryStore` (always-ready futures, polled once) gives the same answers.
    #[test]
    fn same_semantics_as_the_memory_store() {
        let clock = Arc::new(ManualClock::new());
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let store = MemoryStore::new(dyn_clock);
        let key = LeaseName::owner("o0");
        let mut rng = StdRng::seed_from_u64(1);
        let tokens = [LeaseToken::generate("i0", &mut rng), LeaseToken::generate("i1", &mut rng)];
        let mut claims = Claims::new(1);
        // (advance to ms, instance, op): 0 acquire, 1 release, 2 peek.
        let script = [
            (0, 0, 0),
            (1, 1, 0),
            (2, 1, 1),
            (3, 1, 2),
            (500, 0, 2),
            (1000, 1, 0),
            (1001, 1, 2),
            (1002, 0, 1),
            (1003, 1, 1),
            (1004, 0, 0),
        ];
        for (at, who, op) in script {
            clock.advance_to(Time::from_millis(at));
            let ttl = Duration::from_millis(1000);
            let (mine, theirs) = match op {
                0 => {
                    let r = store.acquire(&key, &tokens[who], ttl).now_or_never().expect("ready").expect("ok");
                    (claims.acquire(0, who as u16, at, 1000, false), matches!(r, Acquire::Acquired { .. }))
                }
                1 => {
                    let r = store.release(&key, &tokens[who]).now_or_never().expect("ready").expect("ok");
                    (claims.release(0, who as u16, at), r == Release::Released)
                }
                _ => {
                    let r = store.peek(&key).now_or_never().expect("ready").expect("ok");
                    let remaining = r.map(|h| h.remaining.as_millis() as u64);
                    assert_eq!(claims.peek(0, at).map(|h| h.remaining(at)), remaining, "remaining at {at}");
                    (claims.peek(0, at).is_some(), remaining.is_some())
                }
            };
            assert_eq!(mine, theirs, "op {op} by {who} at {at}");
        }
    }

    #[test]
    fn renewed_claims_report_a_tight_remaining_ttl() {
        let h = Hold { holder: 0, since: 1000, ttl: 3000, renewed: true };
        assert_eq!(h.remaining(1000), 3000);
        assert_eq!(h.remaining(1999), 2001);
        assert_eq!(h.remaining(2000), 3000, "renewed at TTL/3");
        let h = Hold { renewed: false, ..h };
        assert_eq!(h.remaining(3999), 1);
        assert_eq!(h.remaining(4000), 0);
    }

    #[test]
    fn waiters_are_popped_oldest_first_skipping_stale_ones() {
        let mut c = Claims::new(2);
        for i in [3, 1, 3, 2] {
            c.wait(0, i);
        }
        assert_eq!(c.pop_waiter(0, |i| i != 3), Some(1));
        assert_eq!(c.pop_waiter(0, |_| true), Some(2));
        assert_eq!(c.pop_waiter(0, |_| true), None);
        assert_eq!(c.pop_waiter(1, |_| true), None);
    }
}

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::admission::{Entry, OwnerId, OwnerWork, TurnOutcome};
use crate::ports::{Acquire, Clock, LeaseName, LeaseStore, Waiter};
use crate::token::LeaseToken;

/// Clock time a turn that lost the claim race costs.
pub(crate) const LOST_RACE_COST: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct State {
    backlog: HashMap<OwnerId, u64>,
    done: HashMap<OwnerId, u64>,
    turns: u64,
    claim_busy: u64,
    handed_off: Vec<OwnerId>,
    seq: u64,
}

/// Owner work over a per-owner backlog: each turn takes the owner's claim
/// ([`LeaseName::owner`], so admission peeks see it), works up to `per_turn`
/// items at `item_time` each on the clock, releases the claim, and reports
/// `Productive{more}`; a held claim is `ClaimBusy`, a store error `Failed`.
pub struct BacklogWork {
    instance: String,
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    per_turn: u64,
    item_time: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for BacklogWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BacklogWork").field("instance", &self.instance).finish()
    }
}

impl BacklogWork {
    /// Work for `instance` on `store`.
    #[must_use]
    pub fn new(
        instance: &str,
        store: Arc<dyn LeaseStore>,
        clock: Arc<dyn Clock>,
        per_turn: u64,
        item_time: Duration,
    ) -> Self {
        BacklogWork {
            instance: instance.to_owned(),
            store,
            clock,
            per_turn: per_turn.max(1),
            item_time,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Add `items` to `owner`'s backlog.
    pub fn add(&self, owner: &OwnerId, items: u64) {
        *self.lock().backlog.entry(owner.clone()).or_default() += items;
    }

    /// Items left for `owner`.
    #[must_use]
    pub fn backlog(&self, owner: &OwnerId) -> u64 {
        self.lock().backlog.get(owner).copied().unwrap_or(0)
    }

    /// Items this instance worked for `owner`.
    #[must_use]
    pub fn done(&self, owner: &OwnerId) -> u64 {
        self.lock().done.get(owner).copied().unwrap_or(0)
    }

    /// Turns run, and how many of them lost the claim race.
    #[must_use]
    pub fn turns(&self) -> (u64, u64) {
        let s = self.lock();
        (s.turns, s.claim_busy)
    }

    /// Owners handed back by the scheduler.
    #[must_use]
    pub fn handed_off(&self) -> Vec<OwnerId> {
        self.lock().handed_off.clone()
    }
}

#[async_trait]
impl OwnerWork for BacklogWork {
    async fn turn(&self, owner: &OwnerId, _entry: Entry, _waiter: Option<&Waiter>) -> TurnOutcome {
        let seq = {
            let mut s = self.lock();
            s.turns += 1;
            s.seq += 1;
            s.seq
        };
        let key = LeaseName::owner(owner.as_str());
        let token = LeaseToken::generate(&self.instance, &mut super::TestRng::new(seq));
        let lease_ttl = self.item_time * u32::try_from(self.per_turn).unwrap_or(u32::MAX) + Duration::from_secs(30);
        match self.store.acquire(&key, &token, lease_ttl).await {
            Ok(Acquire::Acquired { .. }) => {}
            Ok(Acquire::Busy { .. }) => {
                self.lock().claim_busy += 1;
                // A lost race is not free: a round trip, a log line, a wasted slot.
                let until = self.clock.now() + LOST_RACE_COST;
                self.clock.sleep_until(until).await;
                return TurnOutcome::ClaimBusy;
            }
            Err(_) => return TurnOutcome::Failed,
        }
        let take = {
            let mut s = self.lock();
            let left = s.backlog.entry(owner.clone()).or_default();
            let take = (*left).min(self.per_turn);
            *left -= take;
            *s.done.entry(owner.clone()).or_default() += take;
            take
        };
        if take > 0 {
            let until = self.clock.now() + self.item_time * u32::try_from(take).unwrap_or(u32::MAX);
            self.clock.sleep_until(until).await;
        }
        let _ = self.store.release(&key, &token).await;
        let more = self.backlog(owner) > 0;
        if take == 0 { TurnOutcome::Done } else { TurnOutcome::Productive { more } }
    }

    fn hand_off(&self, owner: OwnerId) {
        self.lock().handed_off.push(owner);
    }
}

//! What every connection of one broker shares: the queues (behind one mutex), the
//! broker's clock, the policy key, counters, and the wake-ups between connections
//! (a message became available) and the lock-expiry sweeper.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::rand::{SecureRandom, SystemRandom};
use tokio::sync::{Notify, watch};

use crate::message::StoredMessage;
use crate::queue::{Delivery, LockLost, LockToken, Queue, QueueConfig, Sent, Settlement, SubQueue};

/// The broker's time: the system clock plus an offset tests can move forward.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset_ms: AtomicI64,
}

impl Clock {
    /// Unix milliseconds, as the broker sees them.
    pub(crate) fn now_ms(&self) -> i64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        real.saturating_add(self.offset_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms.fetch_add(by, Ordering::Relaxed);
    }
}

/// Counts of what the broker did outside the queues.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) tokens_accepted: AtomicU64,
    pub(crate) tokens_refused: AtomicU64,
    pub(crate) links_refused: AtomicU64,
    pub(crate) links_expired: AtomicU64,
    pub(crate) renew_lock_requests: AtomicU64,
    pub(crate) unsupported_requests: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A queue or sub-queue a link addresses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntityRef {
    /// The queue's key (its name in lower case).
    pub(crate) queue: String,
    pub(crate) sub: SubQueue,
}

/// The queues and who waits for them.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) queues: HashMap<String, Queue>,
    /// Connections to wake when a (sub-)queue gets a message to hand out.
    waiters: HashMap<EntityRef, Vec<Arc<Notify>>>,
}

impl State {
    pub(crate) fn create(&mut self, name: &str, config: QueueConfig) -> bool {
        let key = name.to_ascii_lowercase();
        if self.queues.contains_key(&key) {
            return false;
        }
        self.queues.insert(key, Queue::new(name, config));
        true
    }

    pub(crate) fn queue(&self, key: &str) -> Option<&Queue> {
        self.queues.get(key)
    }

    /// Wake whoever waits for `entity`.
    fn wake(&mut self, entity: &EntityRef) {
        if let Some(list) = self.waiters.remove(entity) {
            for w in list {
                w.notify_one();
            }
        }
    }

    /// Wake `notify` when `entity` gets a message.
    pub(crate) fn wait_for(&mut self, entity: &EntityRef, notify: &Arc<Notify>) {
        let list = self.waiters.entry(entity.clone()).or_default();
        if !list.iter().any(|w| Arc::ptr_eq(w, notify)) {
            list.push(notify.clone());
        }
    }

    pub(crate) fn send(&mut self, queue: &str, message: StoredMessage, now: i64) -> Option<Sent> {
        let sent = self.queues.get_mut(queue)?.send(message, now);
        if matches!(sent, Sent::Enqueued(_)) {
            self.wake(&EntityRef { queue: queue.to_owned(), sub: SubQueue::Main });
        }
        Some(sent)
    }

    pub(crate) fn lock_next(&mut self, entity: &EntityRef, now: i64) -> Option<Delivery> {
        let queue = self.queues.get_mut(&entity.queue)?;
        if !queue.has_available(entity.sub) {
            return None;
        }
        queue.lock_next(entity.sub, now, new_lock_token())
    }

    pub(crate) fn take_next(&mut self, entity: &EntityRef) -> Option<Vec<u8>> {
        self.queues.get_mut(&entity.queue)?.take_next(entity.sub)
    }

    pub(crate) fn settle(
        &mut self,
        entity: &EntityRef,
        token: &LockToken,
        settlement: Settlement,
        now: i64,
    ) -> Result<(), LockLost> {
        let queue = self.queues.get_mut(&entity.queue).ok_or(LockLost)?;
        let result = queue.settle(entity.sub, token, settlement, now);
        let woke: Vec<SubQueue> =
            [SubQueue::Main, SubQueue::DeadLetter].into_iter().filter(|s| queue.has_available(*s)).collect();
        for sub in woke {
            self.wake(&EntityRef { queue: entity.queue.clone(), sub });
        }
        result
    }

    pub(crate) fn renew(&mut self, entity: &EntityRef, token: &LockToken, now: i64) -> Result<i64, LockLost> {
        let queue = self.queues.get_mut(&entity.queue).ok_or(LockLost)?;
        let result = queue.renew(entity.sub, token, now);
        if result.is_err() && queue.has_available(entity.sub) {
            self.wake(entity);
        }
        result
    }

    /// Expire the locks that ran out by `now`, waking who waits for their messages.
    pub(crate) fn expire(&mut self, now: i64) {
        let mut woke = Vec::new();
        for (key, queue) in &mut self.queues {
            for sub in queue.expire(now) {
                woke.push(EntityRef { queue: key.clone(), sub });
            }
        }
        for entity in woke {
            self.wake(&entity);
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<i64> {
        self.queues.values().filter_map(Queue::next_deadline).min()
    }
}

/// A fresh lock token: a random (version 4) GUID.
fn new_lock_token() -> LockToken {
    let mut token = [0u8; 16];
    if SystemRandom::new().fill(&mut token).is_err() {
        // No system randomness: unique is all a lock token must be.
        static N: AtomicU64 = AtomicU64::new(1);
        token[..8].copy_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    }
    token[6] = (token[6] & 0x0f) | 0x40;
    token[8] = (token[8] & 0x3f) | 0x80;
    token
}

/// Everything one broker's connections share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) clock: Clock,
    pub(crate) key_name: String,
    pub(crate) key: String,
    pub(crate) counters: Counters,
    /// Wakes the lock-expiry sweeper (a lock may now expire sooner than it planned).
    pub(crate) sweeper: Notify,
    /// The sweeper's next planned wake-up (broker ms); `i64::MAX` when idle.
    pub(crate) sweep_at: AtomicI64,
    /// Bumped when the clock jumps, so connections re-check their tokens.
    pub(crate) clock_moved: watch::Sender<u64>,
}

impl Shared {
    pub(crate) fn new(key_name: String, key: String) -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            clock: Clock::default(),
            key_name,
            key,
            counters: Counters::default(),
            sweeper: Notify::new(),
            sweep_at: AtomicI64::new(i64::MAX),
            clock_moved: watch::Sender::new(0),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A lock that expires at `until` was taken: wake the sweeper if it plans later.
    pub(crate) fn locked_until(&self, until: i64) {
        if until < self.sweep_at.load(Ordering::Relaxed) {
            self.sweeper.notify_one();
        }
    }

    /// Move the broker's clock forward.
    pub(crate) fn advance(&self, by: Duration) {
        self.clock.advance(by);
        self.sweeper.notify_one();
        self.clock_moved.send_modify(|n| *n += 1);
    }
}

/// Expire locks on time, for as long as the broker runs.
pub(crate) async fn sweep(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let now = shared.clock.now_ms();
        let next = {
            let mut state = shared.state();
            state.expire(now);
            state.next_deadline()
        };
        shared.sweep_at.store(next.unwrap_or(i64::MAX), Ordering::Relaxed);
        let wait = next.map(|at| Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0)));
        tokio::select! {
            _ = stop.changed() => return,
            () = shared.sweeper.notified() => {}
            () = sleep_or_forever(wait) => {}
        }
    }
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_tokens_are_version_4_guids_and_differ() {
        let a = new_lock_token();
        let b = new_lock_token();
        assert_ne!(a, b);
        assert_eq!(a[6] >> 4, 4);
        assert_eq!(a[8] >> 6, 2);
    }

    #[test]
    fn the_clock_moves_forward_on_request() {
        let clock = Clock::default();
        let before = clock.now_ms();
        clock.advance(Duration::from_secs(3600));
        assert!(clock.now_ms() >= before + 3_600_000);
    }
}

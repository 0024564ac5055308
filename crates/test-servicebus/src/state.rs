//! What every connection of one broker shares: the queues and topics (behind one
//! mutex), the broker's clock, the policy key, counters, and the wake-ups between
//! connections (a message became available, a session lock ran out) and the sweeper
//! (locks, scheduled messages, time to live, session locks).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::rand::{SecureRandom, SystemRandom};
use tokio::sync::{Notify, watch};

use crate::message::StoredMessage;
use crate::queue::{Delivery, LockLost, LockToken, Queue, QueueConfig, Sent, Settlement, SubQueue};
use crate::rules::Topic;

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
    pub(crate) transfers_received: AtomicU64,
    pub(crate) batches_received: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A queue or sub-queue a link addresses (a subscription is a queue here, keyed
/// `<topic>/subscriptions/<name>`; a topic only takes sends and schedules).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntityRef {
    /// The queue's key (its name in lower case).
    pub(crate) queue: String,
    pub(crate) sub: SubQueue,
}

/// The queues, topics, and who waits for them.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) queues: HashMap<String, Queue>,
    pub(crate) topics: HashMap<String, Topic>,
    /// Connections to wake when a (sub-)queue gets a message to hand out.
    waiters: HashMap<EntityRef, Vec<Arc<Notify>>>,
    /// Connections to wake when a session lock of theirs ran out, by link id.
    holders: HashMap<u64, Arc<Notify>>,
}

/// What a send did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Routed {
    /// Kept (by a queue, or by the subscriptions that matched; none may have).
    Kept(Vec<i64>),
    /// Dropped by duplicate detection.
    Duplicate,
    /// Refused, and why.
    Refused(String),
    /// No such queue or topic.
    Missing,
}

impl State {
    pub(crate) fn create(&mut self, name: &str, config: QueueConfig) -> bool {
        let key = name.to_ascii_lowercase();
        if self.queues.contains_key(&key) || self.topics.contains_key(&key) {
            return false;
        }
        self.queues.insert(key, Queue::new(name, config));
        true
    }

    /// Create a topic and its subscriptions' queues; `false` when a name is taken.
    pub(crate) fn create_topic(&mut self, config: &crate::rules::TopicConfig) -> bool {
        let key = config.name.to_ascii_lowercase();
        let keys: Vec<String> =
            config.subscriptions.iter().map(|s| crate::rules::subscription_key(&config.name, &s.name)).collect();
        if self.topics.contains_key(&key)
            || self.queues.contains_key(&key)
            || keys.iter().any(|k| self.queues.contains_key(k))
        {
            return false;
        }
        let mut subscriptions = Vec::new();
        for (sub, k) in config.subscriptions.iter().zip(keys) {
            let shown = format!("{}/Subscriptions/{}", config.name, sub.name);
            self.queues.insert(k.clone(), Queue::new(&shown, sub.queue.clone()));
            let rules = if sub.rules.is_empty() { vec![crate::rules::Rule::default_rule()] } else { sub.rules.clone() };
            subscriptions.push((k, rules));
        }
        self.topics.insert(
            key,
            Topic {
                name: config.name.clone(),
                dedup: config.duplicate_detection.map(crate::queue::Dedup::new),
                subscriptions,
                scheduled: HashMap::new(),
                next_sequence: 1,
            },
        );
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

    /// Send to a queue, or to a topic (a copy to each subscription whose rules match;
    /// refused as a whole when a matching one refuses it).
    pub(crate) fn route(&mut self, entity: &str, message: StoredMessage, now: i64) -> Routed {
        let Some(topic) = self.topics.get_mut(entity) else {
            return match self.send(entity, message, now) {
                Some(Sent::Enqueued(seq)) => Routed::Kept(vec![seq]),
                Some(Sent::Duplicate) => Routed::Duplicate,
                Some(Sent::Refused(why)) => Routed::Refused(why.to_owned()),
                None => Routed::Missing,
            };
        };
        if let Some(dedup) = &mut topic.dedup
            && dedup.is_duplicate(&message, now)
        {
            return Routed::Duplicate;
        }
        let targets = topic.routes(&message);
        for key in &targets {
            if let Some(q) = self.queues.get(key)
                && q.config.requires_session
                && message.session_id().is_none()
            {
                return Routed::Refused(crate::queue::NO_SESSION_ID.to_owned());
            }
        }
        let mut kept = Vec::new();
        for key in targets {
            if let Some(Sent::Enqueued(seq)) = self.send(&key, message.clone(), now) {
                kept.push(seq);
            }
        }
        Routed::Kept(kept)
    }

    pub(crate) fn lock_next(&mut self, entity: &EntityRef, session: Option<&str>, now: i64) -> Option<Delivery> {
        let queue = self.queues.get_mut(&entity.queue)?;
        if !queue.has_available_in(entity.sub, session) {
            return None;
        }
        queue.lock_next_in(entity.sub, session, now, new_lock_token())
    }

    pub(crate) fn take_next(&mut self, entity: &EntityRef, session: Option<&str>, now: i64) -> Option<Vec<u8>> {
        self.queues.get_mut(&entity.queue)?.take_next(entity.sub, session, now)
    }

    /// Lock deferred messages by sequence number.
    pub(crate) fn lock_deferred(
        &mut self,
        entity: &EntityRef,
        sequences: &[i64],
        session: Option<&str>,
        now: i64,
    ) -> Option<Result<Vec<Delivery>, crate::queue::NotDeferred>> {
        let queue = self.queues.get_mut(&entity.queue)?;
        Some(queue.lock_deferred(entity.sub, sequences, session, now, new_lock_token))
    }

    /// Schedule `message` on a queue, or on each subscription of a topic it matches
    /// (the topic's sequence number names every copy); the sequence number.
    pub(crate) fn schedule(&mut self, entity: &str, message: StoredMessage, due: i64, now: i64) -> Result<i64, String> {
        let Some(topic) = self.topics.get_mut(entity) else {
            let queue = self.queues.get_mut(entity).ok_or("no such entity")?;
            return queue.schedule(message, due, now).map_err(str::to_owned);
        };
        let seq = topic.next_sequence;
        topic.next_sequence += 1;
        let targets = topic.routes(&message);
        let mut copies = Vec::new();
        for key in targets {
            if let Some(q) = self.queues.get_mut(&key) {
                copies.push((key, q.schedule(message.clone(), due, now).map_err(str::to_owned)?));
            }
        }
        if let Some(topic) = self.topics.get_mut(entity) {
            topic.scheduled.insert(seq, copies);
        }
        Ok(seq)
    }

    /// Cancel scheduled messages; the first sequence number that names none.
    pub(crate) fn cancel_scheduled(&mut self, entity: &str, sequences: &[i64]) -> Result<(), i64> {
        for seq in sequences {
            let copies = match self.topics.get_mut(entity) {
                Some(topic) => topic.scheduled.remove(seq).ok_or(*seq)?,
                None => vec![(entity.to_owned(), *seq)],
            };
            for (key, s) in copies {
                let cancelled = self.queues.get_mut(&key).is_some_and(|q| q.cancel_scheduled(s));
                if !cancelled && !self.topics.contains_key(entity) {
                    return Err(*seq);
                }
            }
        }
        Ok(())
    }

    /// Wake `notify` when the session lock that link `holder` took runs out.
    pub(crate) fn hold(&mut self, holder: u64, notify: &Arc<Notify>) {
        self.holders.insert(holder, notify.clone());
    }

    /// Link `holder` is gone: it lets its session go.
    pub(crate) fn let_go(&mut self, entity: &EntityRef, session: &str, holder: u64) {
        self.holders.remove(&holder);
        if let Some(queue) = self.queues.get_mut(&entity.queue) {
            queue.release_session(session, holder);
            if queue.has_available(entity.sub) {
                self.wake(entity);
            }
        }
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

    /// Expire the locks that ran out by `now`, waking who waits for their messages
    /// and the holders of session locks that ran out.
    pub(crate) fn expire(&mut self, now: i64) {
        let mut woke = Vec::new();
        let mut lost = Vec::new();
        for (key, queue) in &mut self.queues {
            for info in queue.sessions.values() {
                if let Some((holder, until)) = info.lock
                    && until <= now
                {
                    lost.push(holder);
                }
            }
            for sub in queue.expire(now) {
                woke.push(EntityRef { queue: key.clone(), sub });
            }
        }
        for entity in woke {
            self.wake(&entity);
        }
        for holder in lost {
            if let Some(n) = self.holders.remove(&holder) {
                n.notify_one();
            }
        }
    }

    pub(crate) fn next_deadline(&self) -> Option<i64> {
        self.queues.values().filter_map(Queue::next_deadline).min()
    }
}

/// A fresh lock token: a random (version 4) GUID.
pub(crate) fn new_lock_token() -> LockToken {
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
    /// The next link id (session locks name their holder by it).
    next_link: AtomicU64,
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
            next_link: AtomicU64::new(1),
        }
    }

    /// A link id no other link of this broker has.
    pub(crate) fn link_id(&self) -> u64 {
        self.next_link.fetch_add(1, Ordering::Relaxed)
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

    fn topic_state() -> State {
        use crate::rules::{Filter, Rule, SubscriptionConfig, TopicConfig};
        let sub = |name: &str, session: bool, rules: Vec<Rule>| SubscriptionConfig {
            name: name.into(),
            queue: QueueConfig { requires_session: session, ..QueueConfig::default() },
            rules,
        };
        let mut state = State::default();
        let topic = TopicConfig {
            name: "T".into(),
            duplicate_detection: Some(Duration::from_secs(60)),
            subscriptions: vec![
                sub("a", false, vec![]),
                sub("b", false, vec![]),
                sub("off", true, vec![Rule { name: "off".into(), filter: Filter::False }]),
            ],
        };
        assert!(state.create_topic(&topic));
        assert!(!state.create_topic(&topic), "a name is taken once");
        assert!(!state.create("t", QueueConfig::default()), "a queue cannot take a topic's name");
        state
    }

    #[test]
    fn a_topic_copies_schedules_cancels_and_drops_duplicates_for_all_its_subscriptions() {
        let mut state = topic_state();
        let count =
            |s: &State, sub: &str| s.queue(&format!("t/subscriptions/{sub}")).map(|q| q.counts(SubQueue::Main).0);
        assert_eq!(state.route("t", StoredMessage::simple(b"x", Some("m-1")), 0), Routed::Kept(vec![1, 1]));
        assert_eq!(state.route("t", StoredMessage::simple(b"x", Some("m-1")), 1), Routed::Duplicate);
        assert_eq!((count(&state, "a"), count(&state, "b"), count(&state, "off")), (Some(1), Some(1), Some(0)));
        // A session subscription no rule of which matches does not need a session id.
        let seq = state.schedule("t", StoredMessage::simple(b"y", Some("m-2")), 500, 0).unwrap();
        let seq2 = state.schedule("t", StoredMessage::simple(b"z", Some("m-3")), 500, 0).unwrap();
        assert_ne!(seq, seq2);
        assert_eq!(state.cancel_scheduled("t", &[seq2]), Ok(()));
        assert_eq!(state.cancel_scheduled("t", &[seq2]), Err(seq2), "cancelled once");
        state.expire(500);
        assert_eq!((count(&state, "a"), count(&state, "b")), (Some(2), Some(2)), "only the one not cancelled came");
        assert_eq!(state.route("nope", StoredMessage::simple(b"x", None), 0), Routed::Missing);
    }
}

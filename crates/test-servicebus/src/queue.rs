//! One Service Bus queue and its dead-letter sub-queue, as a state machine fed the
//! time (`now`, Unix milliseconds on the broker's clock): no I/O, no clock, no
//! tasks. The connection code and the lock-expiry sweeper drive it under one mutex.
//!
//! * Peek-lock: [`Queue::lock_next`] hands out the oldest available message (by
//!   sequence number) under a lock token until `now + lock duration`.
//! * Settlement by lock token: complete removes it; abandon puts it back with its
//!   delivery count + 1; release puts it back as it was; dead-letter moves it to the
//!   sub-queue with `DeadLetterReason` / `DeadLetterErrorDescription`. A token whose
//!   lock ran out is [`LockLost`], and the message is back in the queue with its
//!   delivery count + 1.
//! * A message whose delivery count reaches the queue's maximum is dead-lettered
//!   with reason `MaxDeliveryCountExceeded` instead of coming back.
//! * Duplicate detection: a message whose id was accepted within the window is
//!   accepted and dropped.
//! * Sessions, scheduled messages, time to live, deferral and peek live in
//!   `sessions` and `later`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use fe2o3_amqp_types::primitives::{Symbol, Value};

use crate::message::{StoredMessage, id_string, timestamp, uuid};

/// A lock token: a GUID in RFC 4122 byte order (as an AMQP `uuid`).
pub type LockToken = [u8; 16];

/// The dead-letter reason Service Bus gives a message that ran out of deliveries.
pub const MAX_DELIVERY_COUNT_EXCEEDED: &str = "MaxDeliveryCountExceeded";
/// Application property with the dead-letter reason.
pub const DEAD_LETTER_REASON: &str = "DeadLetterReason";
/// Application property with the dead-letter description.
pub const DEAD_LETTER_DESCRIPTION: &str = "DeadLetterErrorDescription";
/// The dead-letter reason Service Bus gives a message whose time to live ran out.
pub const TTL_EXPIRED: &str = "TTLExpiredException";
/// Why a session entity refuses a message without a session id, as Service Bus words it.
pub(crate) const NO_SESSION_ID: &str = "The SessionId was not set on a message, and it cannot be sent to the entity. Entities that have session support enabled can only receive messages that have the SessionId set to a valid value.";

/// How a queue behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// How long a peek-lock lasts (Service Bus: 1 minute by default).
    pub lock_duration: Duration,
    /// Deliveries before a message is dead-lettered (Service Bus: 10 by default).
    pub max_delivery_count: u32,
    /// Duplicate detection window; `None`: off (the Service Bus default).
    pub duplicate_detection: Option<Duration>,
    /// Every message carries a session id and is received under a session lock.
    pub requires_session: bool,
    /// The time to live of a message that sets none or a longer one; `None`: forever.
    pub default_ttl: Option<Duration>,
    /// An expired message goes to the dead-letter sub-queue instead of being dropped.
    pub dead_letter_on_expiry: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            lock_duration: Duration::from_secs(60),
            max_delivery_count: 10,
            duplicate_detection: None,
            requires_session: false,
            default_ttl: None,
            dead_letter_on_expiry: false,
        }
    }
}

/// The queue itself or its dead-letter sub-queue (`<queue>/$DeadLetterQueue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SubQueue {
    /// The queue.
    Main,
    /// Its dead-letter sub-queue.
    DeadLetter,
}

/// A message in a queue.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) message: StoredMessage,
    pub(crate) sequence: i64,
    pub(crate) enqueued_ms: i64,
    /// Deliveries that failed (abandoned or lock expired): the header's delivery-count.
    pub(crate) delivery_count: u32,
    /// The session id: the properties' group-id.
    pub(crate) session: Option<String>,
    /// When its time to live runs out (broker ms); `None`: never.
    pub(crate) expires_ms: Option<i64>,
    /// Deferred: it comes back only by its sequence number.
    pub(crate) deferred: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Locked {
    pub(crate) entry: Entry,
    pub(crate) token: LockToken,
    pub(crate) until_ms: i64,
}

/// A message handed out under a lock.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub(crate) token: LockToken,
    pub(crate) until_ms: i64,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) sequence: i64,
    /// The encoded message, with the header and broker annotations of this delivery.
    pub(crate) payload: Vec<u8>,
}

/// How a delivery is settled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Settlement {
    /// `accepted`: the message is gone.
    Complete,
    /// `modified`: back to the queue; `failed` counts a delivery (Service Bus's
    /// abandon), `annotations` are merged into the message's.
    Abandon { failed: bool, annotations: Vec<(Symbol, Value)> },
    /// `released`: back to the queue as it was.
    Release,
    /// `rejected`: to the dead-letter sub-queue.
    DeadLetter { reason: Option<String>, description: Option<String> },
    /// `modified` with undeliverable-here: set aside until asked for by sequence number.
    Defer,
}

/// The lock is not held: it expired, or the message was settled already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockLost;

/// Whether a sent message was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Enqueued with this sequence number.
    Enqueued(i64),
    /// Its id was accepted within the duplicate detection window: dropped.
    Duplicate,
    /// Not accepted, and why (a session entity and no session id).
    Refused(&'static str),
}

/// Counts since the queue was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Messages accepted and kept.
    pub enqueued: u64,
    /// Messages accepted and dropped by duplicate detection.
    pub duplicates_dropped: u64,
    /// Deliveries made (each lock, and each receive-and-delete).
    pub deliveries: u64,
    /// Completed messages (queue and dead-letter queue).
    pub completed: u64,
    /// Abandoned deliveries.
    pub abandoned: u64,
    /// Locks that ran out before the delivery was settled.
    pub locks_expired: u64,
    /// Successful lock renewals.
    pub renewals: u64,
    /// Settlements and renewals refused because the lock was lost.
    pub lock_lost: u64,
    /// Messages whose time to live ran out (dead-lettered or dropped).
    pub expired: u64,
    /// Deferred deliveries.
    pub deferred: u64,
    /// Messages scheduled for later (by annotation or `schedule-message`).
    pub scheduled: u64,
}

/// A lock that lasts as long as its session's lock (it does not expire by itself).
pub(crate) const SESSION_HELD: i64 = i64::MAX;

#[derive(Debug, Default)]
pub(crate) struct Part {
    pub(crate) available: BTreeMap<i64, Entry>,
    /// Deferred messages not locked now.
    pub(crate) deferred: BTreeMap<i64, Entry>,
    pub(crate) locked: HashMap<i64, Locked>,
    by_token: HashMap<LockToken, i64>,
    expiry: BTreeSet<(i64, i64)>,
    /// (expires, sequence) of messages put back with a time to live; entries whose
    /// message has moved on since are skipped when they come up.
    pub(crate) ttl: BTreeSet<(i64, i64)>,
}

impl Part {
    pub(crate) fn lock(&mut self, entry: Entry, token: LockToken, until_ms: i64) {
        self.by_token.insert(token, entry.sequence);
        if until_ms != SESSION_HELD {
            self.expiry.insert((until_ms, entry.sequence));
        }
        self.locked.insert(entry.sequence, Locked { entry, token, until_ms });
    }

    /// Back where it waits: with the deferred ones, or available.
    pub(crate) fn put(&mut self, entry: Entry) {
        if let Some(at) = entry.expires_ms {
            self.ttl.insert((at, entry.sequence));
        }
        if entry.deferred {
            self.deferred.insert(entry.sequence, entry);
        } else {
            self.available.insert(entry.sequence, entry);
        }
    }

    pub(crate) fn unlock(&mut self, token: &LockToken) -> Option<Locked> {
        let seq = self.by_token.remove(token)?;
        let locked = self.locked.remove(&seq)?;
        self.expiry.remove(&(locked.until_ms, seq));
        Some(locked)
    }
}

/// One queue and its dead-letter sub-queue.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) name: String,
    pub(crate) config: QueueConfig,
    pub(crate) main: Part,
    pub(crate) dead: Part,
    next_sequence: i64,
    dedup: Option<Dedup>,
    /// Scheduled messages by sequence number, and (due, sequence) in due order.
    pub(crate) scheduled: BTreeMap<i64, Entry>,
    pub(crate) due: BTreeSet<(i64, i64)>,
    /// Sessions seen or accepted: their state and lock.
    pub(crate) sessions: BTreeMap<String, sessions::SessionInfo>,
    pub(crate) counters: QueueCounters,
}

/// Ids accepted within the duplicate detection window, and when.
#[derive(Debug)]
pub(crate) struct Dedup {
    window: i64,
    seen: HashMap<String, i64>,
    order: VecDeque<(i64, String)>,
}

impl Dedup {
    pub(crate) fn new(window: Duration) -> Dedup {
        Dedup { window: ms(window), seen: HashMap::new(), order: VecDeque::new() }
    }

    /// Whether `message`'s id was accepted within the window; remembers it when not.
    pub(crate) fn is_duplicate(&mut self, message: &StoredMessage, now: i64) -> bool {
        while self.order.front().is_some_and(|(at, _)| now - at >= self.window) {
            if let Some((at, id)) = self.order.pop_front()
                && self.seen.get(&id) == Some(&at)
            {
                self.seen.remove(&id);
            }
        }
        let Some(id) = message.message_id().map(id_string) else { return false };
        if self.seen.contains_key(&id) {
            return true;
        }
        self.seen.insert(id.clone(), now);
        self.order.push_back((now, id));
        false
    }
}

pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Queue {
    pub(crate) fn new(name: &str, config: QueueConfig) -> Queue {
        Queue {
            name: name.to_owned(),
            main: Part::default(),
            dead: Part::default(),
            next_sequence: 1,
            dedup: config.duplicate_detection.map(Dedup::new),
            scheduled: BTreeMap::new(),
            due: BTreeSet::new(),
            sessions: BTreeMap::new(),
            counters: QueueCounters::default(),
            config,
        }
    }

    pub(crate) fn part(&mut self, sub: SubQueue) -> &mut Part {
        match sub {
            SubQueue::Main => &mut self.main,
            SubQueue::DeadLetter => &mut self.dead,
        }
    }

    pub(crate) fn part_ref(&self, sub: SubQueue) -> &Part {
        match sub {
            SubQueue::Main => &self.main,
            SubQueue::DeadLetter => &self.dead,
        }
    }

    /// Accept a message sent to the queue (not dropped as a duplicate by a topic):
    /// enqueued now, or scheduled when it names a later enqueue time.
    pub(crate) fn send(&mut self, message: StoredMessage, now: i64) -> Sent {
        let session = message.session_id().map(str::to_owned);
        if self.config.requires_session && session.is_none() {
            return Sent::Refused(NO_SESSION_ID);
        }
        if let Some(dedup) = &mut self.dedup
            && dedup.is_duplicate(&message, now)
        {
            self.counters.duplicates_dropped += 1;
            return Sent::Duplicate;
        }
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let entry = Entry {
            message,
            sequence,
            enqueued_ms: now,
            delivery_count: 0,
            session,
            expires_ms: None,
            deferred: false,
        };
        match entry.message.scheduled_enqueue_ms().filter(|due| *due > now) {
            Some(due) => self.schedule_entry(entry, due),
            None => self.enqueue(entry, now),
        }
        Sent::Enqueued(sequence)
    }

    /// Make `entry` available as enqueued at `now`, with its time to live.
    pub(crate) fn enqueue(&mut self, mut entry: Entry, now: i64) {
        self.counters.enqueued += 1;
        entry.enqueued_ms = now;
        let own = entry.message.header.ttl.map(i64::from);
        let ttl = match (own, self.config.default_ttl.map(ms)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        entry.expires_ms = ttl.map(|t| now.saturating_add(t));
        if let Some(s) = &entry.session {
            self.sessions.entry(s.clone()).or_default();
        }
        self.main.put(entry);
    }

    /// Whether `sub` has a message to hand out.
    pub(crate) fn has_available(&self, sub: SubQueue) -> bool {
        !self.part_ref(sub).available.is_empty()
    }

    /// Lock the oldest available message of `sub` under `token`.
    #[cfg(test)]
    pub(crate) fn lock_next(&mut self, sub: SubQueue, now: i64, token: LockToken) -> Option<Delivery> {
        self.lock_next_in(sub, None, now, token)
    }

    /// Lock the oldest available message of `sub` (of `session` when given: under
    /// the session's lock) under `token`.
    pub(crate) fn lock_next_in(
        &mut self,
        sub: SubQueue,
        session: Option<&str>,
        now: i64,
        token: LockToken,
    ) -> Option<Delivery> {
        let entry = self.pop_next(sub, session, now)?;
        let (until_ms, held) = match session.and_then(|s| self.session_until(s)) {
            Some(until) => (until, SESSION_HELD),
            None => {
                let until = now.saturating_add(ms(self.config.lock_duration));
                (until, until)
            }
        };
        let payload = encode(&entry, Some((token, until_ms)));
        let sequence = entry.sequence;
        self.part(sub).lock(entry, token, held);
        self.counters.deliveries += 1;
        Some(Delivery { token, until_ms, sequence, payload })
    }

    /// Remove and return the oldest available message of `sub` (of `session` when
    /// given) for receive-and-delete.
    pub(crate) fn take_next(&mut self, sub: SubQueue, session: Option<&str>, now: i64) -> Option<Vec<u8>> {
        let entry = self.pop_next(sub, session, now)?;
        self.counters.deliveries += 1;
        self.counters.completed += 1;
        Some(encode(&entry, None))
    }

    /// The oldest available message of `sub` (of `session`), taken out; what expired
    /// on the way is expired.
    fn pop_next(&mut self, sub: SubQueue, session: Option<&str>, now: i64) -> Option<Entry> {
        loop {
            let part = self.part(sub);
            let seq = match session {
                None => *part.available.keys().next()?,
                Some(s) => *part.available.iter().find(|(_, e)| e.session.as_deref() == Some(s))?.0,
            };
            let entry = part.available.remove(&seq)?;
            if entry.expires_ms.is_some_and(|at| at <= now) && sub == SubQueue::Main {
                self.expire_entry(entry);
                continue;
            }
            return Some(entry);
        }
    }

    /// Settle the delivery locked under `token`.
    pub(crate) fn settle(
        &mut self,
        sub: SubQueue,
        token: &LockToken,
        settlement: Settlement,
        now: i64,
    ) -> Result<(), LockLost> {
        let locked = self.valid_lock(sub, token, now)?;
        let mut entry = locked.entry;
        match settlement {
            Settlement::Complete => self.counters.completed += 1,
            Settlement::Release => self.put_back(sub, entry, now),
            Settlement::Defer => {
                self.counters.deferred += 1;
                entry.deferred = true;
                self.put_back(sub, entry, now);
            }
            Settlement::Abandon { failed, annotations } => {
                self.counters.abandoned += 1;
                entry.message.annotate(annotations);
                if failed {
                    self.requeue_failed(sub, entry);
                } else {
                    self.put_back(sub, entry, now);
                }
            }
            Settlement::DeadLetter { reason, description } => {
                if sub == SubQueue::DeadLetter {
                    // Service Bus cannot dead-letter a dead letter; it stays where it is.
                    self.dead.put(entry);
                } else {
                    self.dead_letter(entry, reason.as_deref(), description.as_deref());
                }
            }
        }
        Ok(())
    }

    /// Extend the lock under `token` by the lock duration from now.
    pub(crate) fn renew(&mut self, sub: SubQueue, token: &LockToken, now: i64) -> Result<i64, LockLost> {
        let locked = self.valid_lock(sub, token, now)?;
        if locked.until_ms == SESSION_HELD {
            // A message lock in a session is the session's lock: renewing it is
            // renew-session-lock's job, so it stays as it is.
            let until = locked.entry.session.as_deref().and_then(|s| self.session_until(s)).unwrap_or(now);
            self.part(sub).lock(locked.entry, *token, SESSION_HELD);
            return Ok(until);
        }
        let until = now.saturating_add(ms(self.config.lock_duration));
        self.part(sub).lock(locked.entry, *token, until);
        self.counters.renewals += 1;
        Ok(until)
    }

    /// The lock under `token`, taken out of the locked set; `LockLost` when there is
    /// none or it ran out (then the message goes back, counted as a failed delivery).
    fn valid_lock(&mut self, sub: SubQueue, token: &LockToken, now: i64) -> Result<Locked, LockLost> {
        // A lock held through a session lasts as long as the session's lock.
        let part = self.part_ref(sub);
        let session = part
            .by_token
            .get(token)
            .and_then(|seq| part.locked.get(seq))
            .and_then(|l| (l.until_ms == SESSION_HELD).then(|| l.entry.session.clone()).flatten());
        if let Some(s) = session
            && self.session_until(&s).is_none_or(|until| until <= now)
        {
            self.counters.lock_lost += 1;
            self.end_session_lock(&s);
            return Err(LockLost);
        }
        let Some(locked) = self.part(sub).unlock(token) else {
            self.counters.lock_lost += 1;
            return Err(LockLost);
        };
        if locked.until_ms <= now {
            self.counters.lock_lost += 1;
            self.counters.locks_expired += 1;
            self.requeue_failed(sub, locked.entry);
            return Err(LockLost);
        }
        Ok(locked)
    }

    /// A failed delivery: back to `sub` with the count + 1, or dead-lettered when the
    /// queue's maximum is reached.
    fn requeue_failed(&mut self, sub: SubQueue, mut entry: Entry) {
        entry.delivery_count = entry.delivery_count.saturating_add(1);
        if sub == SubQueue::Main && entry.delivery_count >= self.config.max_delivery_count {
            let description =
                format!("Message could not be consumed after {} delivery attempts.", self.config.max_delivery_count);
            self.dead_letter(entry, Some(MAX_DELIVERY_COUNT_EXCEEDED), Some(&description));
        } else {
            self.part(sub).put(entry);
        }
    }

    /// Back to `sub` as it is (released, or abandoned without counting).
    fn put_back(&mut self, sub: SubQueue, entry: Entry, now: i64) {
        if sub == SubQueue::Main && entry.expires_ms.is_some_and(|at| at <= now) {
            self.expire_entry(entry);
        } else {
            self.part(sub).put(entry);
        }
    }

    pub(crate) fn dead_letter(&mut self, mut entry: Entry, reason: Option<&str>, description: Option<&str>) {
        if let Some(r) = reason {
            entry.message.set_property(DEAD_LETTER_REASON, r);
        }
        if let Some(d) = description {
            entry.message.set_property(DEAD_LETTER_DESCRIPTION, d);
        }
        // A dead letter does not expire and is no longer deferred.
        entry.expires_ms = None;
        entry.deferred = false;
        self.dead.put(entry);
    }

    /// Put every message whose lock ran out by `now` back (count + 1), enqueue the
    /// scheduled messages that are due, expire those whose time to live ran out, and
    /// end the session locks that ran out. Returns the sub-queues that got messages.
    pub(crate) fn expire(&mut self, now: i64) -> Vec<SubQueue> {
        let mut woke = Vec::new();
        if self.enqueue_due(now) {
            woke.push(SubQueue::Main);
        }
        if self.expire_ttl(now) {
            woke.push(SubQueue::DeadLetter);
        }
        if self.expire_sessions(now) {
            woke.push(SubQueue::Main);
            woke.push(SubQueue::DeadLetter);
        }
        for sub in [SubQueue::Main, SubQueue::DeadLetter] {
            loop {
                let part = self.part(sub);
                let Some(&(until, seq)) = part.expiry.first() else { break };
                if until > now {
                    break;
                }
                let Some(token) = part.locked.get(&seq).map(|l| l.token) else {
                    part.expiry.pop_first();
                    continue;
                };
                let Some(locked) = part.unlock(&token) else { break };
                self.counters.locks_expired += 1;
                self.requeue_failed(sub, locked.entry);
                woke.push(sub);
                woke.push(SubQueue::DeadLetter);
            }
        }
        woke.sort_unstable();
        woke.dedup();
        woke.retain(|s| self.has_available(*s));
        woke
    }

    /// The earliest lock expiry, due scheduled message, time to live or session lock.
    pub(crate) fn next_deadline(&self) -> Option<i64> {
        let locks = [&self.main, &self.dead].into_iter().filter_map(|p| p.expiry.first().map(|(t, _)| *t));
        let due = self.due.first().map(|(t, _)| *t);
        let ttl = self.main.ttl.first().map(|(t, _)| *t);
        locks.chain(due).chain(ttl).chain(self.next_session_deadline()).min()
    }

    /// (available, locked) in `sub`.
    pub(crate) fn counts(&self, sub: SubQueue) -> (usize, usize) {
        let p = self.part_ref(sub);
        (p.available.len(), p.locked.len())
    }

    /// Every message of `sub` by sequence number (deferred ones too, scheduled ones
    /// not), with its lock if it has one.
    pub(crate) fn entries(&self, sub: SubQueue) -> Vec<(&Entry, Option<(&LockToken, i64)>)> {
        let p = self.part_ref(sub);
        let mut out: Vec<_> = p.available.values().chain(p.deferred.values()).map(|e| (e, None)).collect();
        out.extend(p.locked.values().map(|l| (&l.entry, Some((&l.token, l.until_ms)))));
        out.sort_by_key(|(e, _)| e.sequence);
        out
    }

    /// Whether `token` locks a message of `sub` now (without settling anything).
    #[cfg(test)]
    pub(crate) fn holds(&self, sub: SubQueue, token: &LockToken) -> bool {
        self.part_ref(sub).by_token.contains_key(token)
    }
}

/// The bytes of a delivery of `entry`, with its lock when peek-locked.
pub(crate) fn encode(entry: &Entry, lock: Option<(LockToken, i64)>) -> Vec<u8> {
    let mut extra = vec![
        ("x-opt-sequence-number", Value::Long(entry.sequence)),
        ("x-opt-enqueued-time", timestamp(entry.enqueued_ms)),
    ];
    if let Some((token, until)) = lock {
        extra.push(("x-opt-lock-token", uuid(token)));
        extra.push(("x-opt-locked-until", timestamp(until)));
    }
    entry.message.encode(entry.delivery_count, &extra)
}

mod later;
pub(crate) use later::NotDeferred;
#[cfg(test)]
mod later_tests;
#[cfg(test)]
mod session_tests;
pub(crate) mod sessions;
#[cfg(test)]
mod tests;

//! What a queue does with time and with messages set aside: scheduled messages
//! (enqueued when due, cancellable by sequence number), time to live (an expired
//! message is dead-lettered with `TTLExpiredException` when the queue says so, else
//! dropped), deferred messages (locked again only by sequence number), and peek.

use super::{Delivery, Entry, LockToken, Queue, SubQueue, TTL_EXPIRED, encode, ms};
use crate::message::StoredMessage;

/// Why deferred messages could not be locked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotDeferred(pub(crate) i64);

impl Queue {
    /// Keep `entry` until `due` (its sequence number is already given).
    pub(crate) fn schedule_entry(&mut self, entry: Entry, due: i64) {
        self.counters.scheduled += 1;
        self.due.insert((due, entry.sequence));
        self.scheduled.insert(entry.sequence, entry);
    }

    /// Schedule `message` for `due` (the `schedule-message` operation); its sequence
    /// number, or why it is refused.
    pub(crate) fn schedule(&mut self, mut message: StoredMessage, due: i64, now: i64) -> Result<i64, &'static str> {
        message.set_scheduled_enqueue_ms(due);
        match self.send(message, now) {
            super::Sent::Enqueued(seq) => Ok(seq),
            super::Sent::Duplicate => Err("the message id was sent within the duplicate detection window"),
            super::Sent::Refused(why) => Err(why),
        }
    }

    /// Cancel a scheduled message; `false` when none has that sequence number.
    pub(crate) fn cancel_scheduled(&mut self, sequence: i64) -> bool {
        let Some(entry) = self.scheduled.remove(&sequence) else { return false };
        self.due.retain(|(_, s)| *s != entry.sequence);
        true
    }

    /// Enqueue the scheduled messages due by `now`; whether there were any.
    pub(crate) fn enqueue_due(&mut self, now: i64) -> bool {
        let mut any = false;
        while let Some(&(due, seq)) = self.due.first() {
            if due > now {
                break;
            }
            self.due.pop_first();
            if let Some(entry) = self.scheduled.remove(&seq) {
                // Enqueued at its due time, as Service Bus shows it.
                self.enqueue(entry, due);
                any = true;
            }
        }
        any
    }

    /// Expire the waiting messages whose time to live ran out by `now`; whether one
    /// was dead-lettered.
    pub(crate) fn expire_ttl(&mut self, now: i64) -> bool {
        let mut dead = false;
        while let Some(&(at, seq)) = self.main.ttl.first() {
            if at > now {
                break;
            }
            self.main.ttl.pop_first();
            let still = |e: &Entry| e.expires_ms == Some(at);
            let entry = if self.main.available.get(&seq).is_some_and(still) {
                self.main.available.remove(&seq)
            } else if self.main.deferred.get(&seq).is_some_and(still) {
                self.main.deferred.remove(&seq)
            } else {
                None // locked, settled or moved since: its lock decides
            };
            if let Some(entry) = entry {
                dead |= self.expire_entry(entry);
            }
        }
        dead
    }

    /// A message whose time to live ran out: dead-lettered or dropped. Whether it was
    /// dead-lettered.
    pub(crate) fn expire_entry(&mut self, entry: Entry) -> bool {
        self.counters.expired += 1;
        if self.config.dead_letter_on_expiry {
            self.dead_letter(entry, Some(TTL_EXPIRED), Some("The message expired and was dead lettered."));
            true
        } else {
            false
        }
    }

    /// Lock the deferred messages of `sub` with these sequence numbers (of `session`
    /// when given), each under the next token of `tokens`.
    pub(crate) fn lock_deferred(
        &mut self,
        sub: SubQueue,
        sequences: &[i64],
        session: Option<&str>,
        now: i64,
        mut tokens: impl FnMut() -> LockToken,
    ) -> Result<Vec<Delivery>, NotDeferred> {
        let part = self.part_ref(sub);
        if let Some(missing) = sequences
            .iter()
            .find(|s| part.deferred.get(s).is_none_or(|e| session.is_some_and(|id| e.session.as_deref() != Some(id))))
        {
            return Err(NotDeferred(*missing));
        }
        let until = now.saturating_add(ms(self.config.lock_duration));
        let mut out = Vec::with_capacity(sequences.len());
        for seq in sequences {
            let part = self.part(sub);
            let Some(entry) = part.deferred.remove(seq) else { continue }; // asked twice
            let token = tokens();
            let payload = encode(&entry, Some((token, until)));
            part.lock(entry, token, until);
            self.counters.deliveries += 1;
            out.push(Delivery { token, until_ms: until, sequence: *seq, payload });
        }
        Ok(out)
    }

    /// Up to `count` messages of `sub` from sequence number `from` on (of `session`
    /// when given), without locking: waiting, locked, deferred and scheduled alike.
    pub(crate) fn peek(&self, sub: SubQueue, from: i64, count: usize, session: Option<&str>) -> Vec<(i64, Vec<u8>)> {
        let part = self.part_ref(sub);
        let scheduled = (sub == SubQueue::Main).then_some(&self.scheduled);
        let mut all: Vec<&Entry> = part
            .available
            .range(from..)
            .chain(part.deferred.range(from..))
            .chain(scheduled.into_iter().flat_map(|s| s.range(from..)))
            .map(|(_, e)| e)
            .chain(part.locked.values().map(|l| &l.entry).filter(|e| e.sequence >= from))
            .filter(|e| session.is_none_or(|id| e.session.as_deref() == Some(id)))
            .collect();
        all.sort_by_key(|e| e.sequence);
        all.into_iter().take(count).map(|e| (e.sequence, encode(e, None))).collect()
    }
}

//! Sessions of a session-enabled queue or subscription: one holder (a receiver link)
//! at a time under a session lock that runs out unless renewed; the messages a
//! holder locks last as long as the session lock; session state kept per session.
//! A named session can be accepted with no messages; the next available one is the
//! unlocked session with the oldest waiting message.

use super::{Queue, SESSION_HELD, SubQueue, ms};

/// One session's lock and state.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionInfo {
    pub(crate) state: Option<Vec<u8>>,
    /// The holder (a link id) and until when (broker ms).
    pub(crate) lock: Option<(u64, i64)>,
}

/// Why a session receiver cannot have a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// That session is locked by another receiver.
    Locked(String),
    /// No unlocked session has a message.
    NoneAvailable,
}

/// The session lock is not held by the asker (expired, released, or never taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionLost;

impl Queue {
    /// Lock `want` (or the next available session) for `holder`; the session id
    /// and until when its lock holds.
    pub(crate) fn accept_session(
        &mut self,
        want: Option<&str>,
        holder: u64,
        now: i64,
    ) -> Result<(String, i64), Refusal> {
        let free = |info: Option<&SessionInfo>| info.and_then(|i| i.lock).is_none_or(|(_, until)| until <= now);
        let id = match want {
            Some(id) => {
                if !free(self.sessions.get(id)) {
                    return Err(Refusal::Locked(id.to_owned()));
                }
                id.to_owned()
            }
            None => self
                .main
                .available
                .values()
                .filter_map(|e| e.session.as_deref())
                .find(|s| free(self.sessions.get(*s)))
                .map(str::to_owned)
                .ok_or(Refusal::NoneAvailable)?,
        };
        // A lock that ran out but was not swept yet gives its messages back first.
        self.end_session_lock(&id);
        let until = now.saturating_add(ms(self.config.lock_duration));
        self.sessions.entry(id.clone()).or_default().lock = Some((holder, until));
        Ok((id, until))
    }

    /// Until when `session`'s lock holds, if it is held.
    pub(crate) fn session_until(&self, session: &str) -> Option<i64> {
        self.sessions.get(session)?.lock.map(|(_, until)| until)
    }

    /// Whether `holder` holds `session` at `now`.
    pub(crate) fn holds_session(&self, session: &str, holder: u64, now: i64) -> bool {
        self.sessions.get(session).and_then(|i| i.lock).is_some_and(|(h, until)| h == holder && until > now)
    }

    /// Extend `holder`'s lock on `session` by the lock duration from `now`.
    pub(crate) fn renew_session(&mut self, session: &str, holder: u64, now: i64) -> Result<i64, SessionLost> {
        if !self.holds_session(session, holder, now) {
            return Err(SessionLost);
        }
        let until = now.saturating_add(ms(self.config.lock_duration));
        self.sessions.entry(session.to_owned()).or_default().lock = Some((holder, until));
        Ok(until)
    }

    /// `session`'s state, when `holder` holds it.
    pub(crate) fn session_state(&self, session: &str, holder: u64, now: i64) -> Result<Option<Vec<u8>>, SessionLost> {
        if !self.holds_session(session, holder, now) {
            return Err(SessionLost);
        }
        Ok(self.sessions.get(session).and_then(|i| i.state.clone()))
    }

    /// Set (or clear) `session`'s state, when `holder` holds it.
    pub(crate) fn set_session_state(
        &mut self,
        session: &str,
        holder: u64,
        state: Option<Vec<u8>>,
        now: i64,
    ) -> Result<(), SessionLost> {
        if !self.holds_session(session, holder, now) {
            return Err(SessionLost);
        }
        self.sessions.entry(session.to_owned()).or_default().state = state;
        Ok(())
    }

    /// `holder` lets `session` go (its link detached): the messages it held locked
    /// come back with their delivery count + 1, as when a lock runs out.
    pub(crate) fn release_session(&mut self, session: &str, holder: u64) {
        if self.sessions.get(session).and_then(|i| i.lock).is_some_and(|(h, _)| h == holder) {
            self.end_session_lock(session);
        }
    }

    /// End `session`'s lock and put back what it held.
    pub(super) fn end_session_lock(&mut self, session: &str) {
        if let Some(info) = self.sessions.get_mut(session) {
            info.lock = None;
        }
        let tokens: Vec<_> = self
            .main
            .locked
            .values()
            .filter(|l| l.until_ms == SESSION_HELD && l.entry.session.as_deref() == Some(session))
            .map(|l| l.token)
            .collect();
        for token in tokens {
            if let Some(locked) = self.main.unlock(&token) {
                self.counters.locks_expired += 1;
                self.requeue_failed(SubQueue::Main, locked.entry);
            }
        }
    }

    /// End the session locks that ran out by `now`; whether any did.
    pub(crate) fn expire_sessions(&mut self, now: i64) -> bool {
        let ended: Vec<String> = self
            .sessions
            .iter()
            .filter(|(_, i)| i.lock.is_some_and(|(_, until)| until <= now))
            .map(|(s, _)| s.clone())
            .collect();
        for s in &ended {
            self.end_session_lock(s);
        }
        !ended.is_empty()
    }

    /// The earliest session lock expiry.
    pub(crate) fn next_session_deadline(&self) -> Option<i64> {
        self.sessions.values().filter_map(|i| i.lock.map(|(_, until)| until)).min()
    }

    /// Whether `session` (any, when `None`) has a message waiting in the queue.
    pub(crate) fn has_available_in(&self, sub: SubQueue, session: Option<&str>) -> bool {
        match session {
            None => self.has_available(sub),
            Some(s) => self.part_ref(sub).available.values().any(|e| e.session.as_deref() == Some(s)),
        }
    }
}

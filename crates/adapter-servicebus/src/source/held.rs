//! The deliveries a source holds, shared by the link task and the callers.
//!
//! One mutex, held only for map operations, never across an `.await`. It lets
//! `complete` (accepted) and, on RabbitMQ, `abandon` (released) settle straight from
//! the caller's task through fe2o3's [`ReceiverDisposer`], without a round trip to
//! the link task and without waiting for a pending receive.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fe2o3_amqp::ReceiverDisposer;
use fe2o3_amqp::link::delivery::DeliveryInfo;

use crate::renewal::{LockToken, expired, unix_now_ms};
use crate::session::filter::SessionLock;

/// A delivery handed out (or buffered) and not settled yet.
pub(super) struct Tracked {
    /// The link it came on.
    pub(super) generation: u64,
    pub(super) info: DeliveryInfo,
    pub(super) token: Option<LockToken>,
    pub(super) locked_until_ms: Option<i64>,
}

/// What lock renewal needs to know about a delivery.
pub(super) struct LockInfo {
    pub(super) generation: u64,
    pub(super) token: Option<LockToken>,
    pub(super) link_name: String,
    pub(super) locked_until_ms: Option<i64>,
}

/// Why a delivery cannot be settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gone {
    /// Unknown, settled already, or its link was lost.
    LockLost,
    /// The source was closed.
    Closed,
    /// Its Service Bus lock ran out (`x-opt-locked-until` passed): settling it now
    /// would be lost, as Microsoft's SDKs know without asking.
    Expired,
}

struct Live {
    generation: u64,
    disposer: ReceiverDisposer,
    link_name: String,
}

#[derive(Default)]
struct Inner {
    deliveries: HashMap<u64, Tracked>,
    live: Option<Live>,
    closed: bool,
    /// The session the live link holds (a session receiver only).
    session: Option<SessionLock>,
    /// Why the session receiver's link, and with it the session, was lost.
    session_lost: Option<drain_core::PortError>,
}

#[derive(Default)]
pub(super) struct Deliveries {
    inner: Mutex<Inner>,
    /// Deliveries whose lock ran out before a receive took them (never handed out).
    expired_waiting: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Deliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("Deliveries")
            .field("deliveries", &inner.deliveries.len())
            .field("closed", &inner.closed)
            .finish()
    }
}

impl Deliveries {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new link is up.
    pub(super) fn attach(&self, generation: u64, disposer: ReceiverDisposer, link_name: String) {
        self.lock().live = Some(Live { generation, disposer, link_name });
    }

    /// The link is gone: so is every delivery it handed out (the broker redelivers).
    pub(super) fn detach(&self) {
        let mut inner = self.lock();
        inner.live = None;
        inner.deliveries.clear();
    }

    /// The source is closed for good: settling fails with `Closed` from now on. The
    /// deliveries stay for the link task, which gives them back ([`Deliveries::take_all`]).
    pub(super) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.live = None;
    }

    /// Every delivery of link `generation` not settled yet, taken out (the rest are
    /// forgotten): what a closing source gives back to the queue.
    pub(super) fn take_all(&self, generation: u64) -> Vec<DeliveryInfo> {
        let mut inner = self.lock();
        inner.deliveries.drain().filter(|(_, t)| t.generation == generation).map(|(_, t)| t.info).collect()
    }

    /// Deliveries held now: handed out or buffered, not settled.
    pub(super) fn len(&self) -> usize {
        self.lock().deliveries.len()
    }

    pub(super) fn insert(&self, handle: u64, tracked: Tracked) {
        self.lock().deliveries.insert(handle, tracked);
    }

    /// Forget a delivery that will never be handed out.
    pub(super) fn forget(&self, handle: u64) {
        self.lock().deliveries.remove(&handle);
    }

    /// Forget a delivery whose lock ran out while it waited, and count it.
    pub(super) fn expired_waiting(&self, handle: u64) {
        self.forget(handle);
        self.expired_waiting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many deliveries lost their lock while they waited.
    pub(super) fn expired_waiting_count(&self) -> u64 {
        self.expired_waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Take a delivery for settlement, with the disposer of its link when that link
    /// is still the live one and its lock (if it has one) has not run out.
    pub(super) fn take(&self, handle: u64) -> Result<(Tracked, ReceiverDisposer), Gone> {
        let mut inner = self.lock();
        if inner.closed {
            return Err(Gone::Closed);
        }
        let tracked = inner.deliveries.remove(&handle).ok_or(Gone::LockLost)?;
        // Settled with `rcv-settle-mode first`, an outcome for an expired lock is never
        // answered: the broker drops it and redelivers the message. Say so instead.
        if expired(tracked.locked_until_ms, unix_now_ms()) {
            return Err(Gone::Expired);
        }
        match &inner.live {
            Some(live) if live.generation == tracked.generation => Ok((tracked, live.disposer.clone())),
            _ => Err(Gone::LockLost),
        }
    }

    /// The session the live link holds, if any.
    pub(super) fn set_session(&self, session: Option<SessionLock>) {
        self.lock().session = session;
    }

    /// The session receiver lost its link, and the session with it.
    pub(super) fn lose_session(&self, why: drain_core::PortError) {
        self.lock().session_lost = Some(why);
    }

    /// Why the session was lost, if it was.
    pub(super) fn session_lost(&self) -> Option<drain_core::PortError> {
        self.lock().session_lost.clone()
    }

    /// The session held and the live link's generation and name.
    pub(super) fn session(&self) -> Option<(SessionLock, u64, String)> {
        let inner = self.lock();
        let live = inner.live.as_ref()?;
        inner.session.clone().map(|s| (s, live.generation, live.link_name.clone()))
    }

    /// The session lock now lasts until `until_ms`, and with it the lock of every
    /// delivery the session's link holds (Service Bus locks a session's messages
    /// through the session).
    pub(super) fn session_renewed(&self, until_ms: i64) {
        let mut inner = self.lock();
        if let Some(s) = inner.session.as_mut() {
            s.locked_until_ms = Some(until_ms);
        }
        for t in inner.deliveries.values_mut() {
            t.locked_until_ms = Some(until_ms);
        }
    }

    /// A renewal moved the delivery's lock to `until_ms`.
    pub(super) fn renewed(&self, handle: u64, until_ms: i64) {
        if let Some(t) = self.lock().deliveries.get_mut(&handle) {
            t.locked_until_ms = Some(until_ms);
        }
    }

    pub(super) fn lock_info(&self, handle: u64) -> Result<LockInfo, Gone> {
        let inner = self.lock();
        if inner.closed {
            return Err(Gone::Closed);
        }
        let t = inner.deliveries.get(&handle).ok_or(Gone::LockLost)?;
        match &inner.live {
            Some(live) if live.generation == t.generation => Ok(LockInfo {
                generation: t.generation,
                token: t.token,
                link_name: live.link_name.clone(),
                locked_until_ms: t.locked_until_ms,
            }),
            _ => Err(Gone::LockLost),
        }
    }
}

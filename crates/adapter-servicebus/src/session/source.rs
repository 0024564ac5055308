//! [`SessionSource`]: drain-core's [`MessageSource`] over the sessions of a
//! session-enabled queue or subscription, each held through a session receiver of
//! its own ([`AmqpSource`] with [`SourceOptions::session`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use drain_core::ports::{Capabilities, Delivery, DeliveryHandle, MessageSource};
use drain_core::{ErrorKind, PortError};
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;

use super::filter::SessionFilter;
use crate::endpoint::Endpoint;
use crate::renewal::{RenewEvent, RenewSchedule, renew_until};
use crate::source::{AmqpSource, SourceOptions};

/// Settings of a [`SessionSource`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionOptions {
    /// The sessions to drain, by id; empty: whichever sessions the broker offers
    /// (next available, one with messages that no other receiver holds).
    pub sessions: Vec<String>,
    /// How many sessions are held at once (at least 1).
    pub max_sessions: usize,
    /// A next-available session whose receives came back empty for this long, with
    /// none of its messages outstanding, is closed (its lock given back) and the next one
    /// taken. Named sessions are kept.
    pub idle_timeout: Duration,
    /// Settings of each session's receiver. Its `session` is set per session, and its
    /// `max_lock_renewal` is not used: a session's messages are locked through the
    /// session, whose lock this source renews for as long as it holds the session.
    pub source: SourceOptions,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            sessions: Vec::new(),
            max_sessions: 1,
            idle_timeout: Duration::from_secs(30),
            source: SourceOptions::default(),
        }
    }
}

/// What happened to a session a [`SessionSource`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEvent {
    /// The session's id.
    pub session: String,
    /// What happened.
    pub kind: SessionEventKind,
}

/// See [`SessionEvent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEventKind {
    /// The session was locked for this source.
    Accepted {
        /// When its lock expires, when the broker said.
        locked_until: Option<SystemTime>,
    },
    /// The session lock was renewed.
    Renewed {
        /// How long it lasts now.
        lock: Duration,
    },
    /// The session lock could not be renewed and is lost (or about to be): its
    /// messages not settled go back to the session, and settling them fails with
    /// `LockLost`. The source closes the session at its next receive.
    Lost(PortError),
    /// The source gave the session back.
    Released(ReleaseReason),
}

/// Why a [`SessionSource`] gave a session back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// Nothing came from it for [`SessionOptions::idle_timeout`].
    Idle,
    /// Its lock was lost.
    Lost,
    /// The source was parked between ticks.
    Parked,
    /// The source was closed.
    Closed,
}

/// The longest session lock taken as it is: a broker's answer far in the future is
/// renewed within this anyway, and never overflows a timer.
const LONGEST_LOCK: Duration = Duration::from_secs(3_600);

/// How long to wait before looking for a free session again after none was.
const TOP_UP_PAUSE: Duration = Duration::from_secs(1);

/// The deliveries handed out: this source's handle -> the session's receiver, its
/// handle there, and the session's slot.
type Handles = HashMap<u64, (Arc<AmqpSource>, DeliveryHandle, u64)>;

/// One held session.
struct Slot {
    key: u64,
    session: String,
    source: Arc<AmqpSource>,
    /// Since when its receives come back empty (`None`: the last one had messages).
    empty_since: Option<Instant>,
    lost: Arc<AtomicBool>,
    _stop_renewal: oneshot::Sender<()>,
}

/// A session-aware peek-lock receiver, implementing drain-core's [`MessageSource`]:
/// up to [`SessionOptions::max_sessions`] sessions of one entity held at once, each
/// on its own receiver, its session lock renewed until the session is given back.
///
/// **Order.** Every receive returns messages of **one session only**, in the order
/// the broker sent them, and a session's later messages only come in later receives.
/// Each message's session id is its `group_id`. A caller that handles a batch one
/// message at a time, or that keeps at most one message per `group_id` in flight,
/// keeps each session's order; one that submits a batch's messages side by side does
/// not, and must serialise per `group_id` itself.
///
/// **Sessions.** Next-available sessions are taken while fewer than the maximum are
/// held, and given back after [`SessionOptions::idle_timeout`] without a message;
/// named sessions are taken when free and kept. A lost session lock is reported as
/// [`SessionEventKind::Lost`] and the session given back. [`MessageSource::park`]
/// and [`SessionSource::close`] give every session back, releasing their prefetched
/// and unsettled messages at once.
///
/// Message locks are the session's: `renew_lock` is `Unsupported`, and
/// `capabilities().lock_renewal` is false.
pub struct SessionSource {
    endpoint: Endpoint,
    what: String,
    options: SessionOptions,
    slots: tokio::sync::Mutex<Vec<Slot>>,
    handles: Mutex<Handles>,
    next_handle: AtomicU64,
    next_key: AtomicU64,
    cursor: AtomicUsize,
    events: broadcast::Sender<SessionEvent>,
    closed: AtomicBool,
    /// No session was free: do not look for one again before this.
    pause_top_up: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for SessionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSource").field("what", &self.what).finish_non_exhaustive()
    }
}

impl SessionSource {
    /// A source on `endpoint`'s session-enabled entity. Takes its first sessions now:
    /// a wrong address, credentials or entity (or an entity without sessions) fails
    /// here; no session with messages yet is not an error.
    ///
    /// # Errors
    /// As [`AmqpSource::connect`]; `Config` when `max_sessions` is 0.
    pub async fn connect(endpoint: Endpoint, options: SessionOptions) -> Result<Self, PortError> {
        if options.max_sessions == 0 {
            return Err(PortError::new(ErrorKind::Config, "a session source needs max_sessions of at least 1"));
        }
        let (events, _) = broadcast::channel(1024);
        let source = SessionSource {
            what: endpoint.to_string(),
            endpoint,
            options,
            slots: tokio::sync::Mutex::new(Vec::new()),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            next_key: AtomicU64::new(1),
            cursor: AtomicUsize::new(0),
            events,
            closed: AtomicBool::new(false),
            pause_top_up: Mutex::new(None),
        };
        {
            let mut slots = source.slots.lock().await;
            source.top_up(&mut slots, source.options.source.connect_timeout).await?;
        }
        Ok(source)
    }

    /// Events of the sessions from now on. A subscriber more than 1024 behind loses
    /// the oldest.
    #[must_use]
    pub fn session_events(&self) -> broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
    }

    /// The sessions held now.
    pub async fn sessions(&self) -> Vec<String> {
        self.slots.lock().await.iter().map(|s| s.session.clone()).collect()
    }

    /// The receiver of a held session, for its state
    /// ([`AmqpSource::session_state`], [`AmqpSource::set_session_state`]).
    pub async fn session(&self, id: &str) -> Option<Arc<AmqpSource>> {
        self.slots.lock().await.iter().find(|s| s.session == id).map(|s| s.source.clone())
    }

    /// Give every session back (releasing what they hold) and refuse later calls.
    ///
    /// # Errors
    /// Never fails today.
    pub async fn close(&self) -> Result<(), PortError> {
        self.closed.store(true, Ordering::SeqCst);
        let mut slots = self.slots.lock().await;
        for slot in slots.drain(..) {
            self.give_back(slot, ReleaseReason::Closed).await;
        }
        Ok(())
    }

    fn handles(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn emit(&self, session: &str, kind: SessionEventKind) {
        let _ = self.events.send(SessionEvent { session: session.to_owned(), kind });
    }

    fn outstanding(&self, key: u64) -> bool {
        self.handles().values().any(|(_, _, k)| *k == key)
    }

    /// Take sessions until `max_sessions` are held or none is free; each attempt is
    /// bounded by `limit`. Fails only when none is held and the failure is not a
    /// passing one.
    async fn top_up(&self, slots: &mut Vec<Slot>, limit: Duration) -> Result<(), PortError> {
        let paused = *self.pause_top_up.lock().unwrap_or_else(PoisonError::into_inner);
        if paused.is_some_and(|until| Instant::now() < until) {
            return Ok(());
        }
        let max = self.options.max_sessions;
        let wanted: Vec<SessionFilter> = if self.options.sessions.is_empty() {
            vec![SessionFilter::NextAvailable; max.saturating_sub(slots.len())]
        } else {
            let held: Vec<&str> = slots.iter().map(|s| s.session.as_str()).collect();
            let free = self.options.sessions.iter().filter(|n| !held.contains(&n.as_str()));
            free.take(max.saturating_sub(slots.len())).cloned().map(SessionFilter::Named).collect()
        };
        for filter in wanted {
            match self.accept(filter.clone(), limit).await {
                Ok(slot) => slots.push(slot),
                Err(e) if e.is_temporary() => {
                    tracing::debug!(source = %self.what, error = %e, "no session to take now");
                    // Each attempt is a connection: look again only after a pause.
                    *self.pause_top_up.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(Instant::now() + TOP_UP_PAUSE);
                    if filter == SessionFilter::NextAvailable {
                        break;
                    }
                }
                Err(e) if slots.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(source = %self.what, error = %e, "could not take a session");
                    break;
                }
            }
        }
        Ok(())
    }

    /// Lock a session and start renewing its lock.
    async fn accept(&self, filter: SessionFilter, limit: Duration) -> Result<Slot, PortError> {
        let mut options = self.options.source.clone();
        options.session = Some(filter);
        options.max_lock_renewal = Duration::ZERO;
        options.connect_timeout = limit;
        let source = Arc::new(AmqpSource::connect(self.endpoint.clone(), options).await?);
        let Some(session) = source.session_id() else {
            let _ = source.close().await;
            return Err(PortError::new(ErrorKind::Protocol, format!("{}: the broker named no session", self.what)));
        };
        let locked_until = source.session_locked_until();
        self.emit(&session, SessionEventKind::Accepted { locked_until });
        let lost = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = oneshot::channel();
        let remaining = locked_until
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .unwrap_or(self.options.source.operation_timeout)
            .min(LONGEST_LOCK);
        let (renewing, events, flag, id) = (source.clone(), self.events.clone(), lost.clone(), session.clone());
        let renew = move || {
            let s = renewing.clone();
            async move {
                let until = s.renew_session_lock().await?;
                Ok(until.duration_since(SystemTime::now()).unwrap_or_default().min(LONGEST_LOCK))
            }
        };
        let report = move |event: RenewEvent| {
            let kind = match event {
                RenewEvent::Renewed { lock } => SessionEventKind::Renewed { lock },
                RenewEvent::Failed(e) => {
                    tracing::warn!(session = %id, error = %e, "the session lock is lost");
                    flag.store(true, Ordering::SeqCst);
                    SessionEventKind::Lost(e)
                }
                RenewEvent::MaxDurationReached => return,
            };
            let _ = events.send(SessionEvent { session: id.clone(), kind });
        };
        let forever = RenewSchedule { max_duration: Duration::MAX };
        tokio::spawn(renew_until(renew, remaining, forever, stopped, report));
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(source = %self.what, session = %session, "session taken");
        Ok(Slot { key, session, source, empty_since: None, lost, _stop_renewal: stop })
    }

    /// Give a session back: stop renewing it and close its receiver, which releases
    /// what it holds.
    async fn give_back(&self, slot: Slot, reason: ReleaseReason) {
        self.handles().retain(|_, (_, _, k)| *k != slot.key);
        let _ = slot.source.close().await;
        tracing::debug!(source = %self.what, session = %slot.session, ?reason, "session given back");
        self.emit(&slot.session, SessionEventKind::Released(reason));
    }

    /// Give back the sessions whose lock is lost, and the next-available ones idle for
    /// longer than the idle timeout with nothing outstanding.
    async fn retire(&self, slots: &mut Vec<Slot>, now: Instant) {
        let named = !self.options.sessions.is_empty();
        let mut i = 0;
        while i < slots.len() {
            let s = &slots[i];
            let reason = if s.lost.load(Ordering::SeqCst) {
                Some(ReleaseReason::Lost)
            } else if let Some(e) = s.source.session_lost() {
                self.emit(&s.session, SessionEventKind::Lost(e));
                Some(ReleaseReason::Lost)
            } else if !named
                && s.empty_since.is_some_and(|t| now.saturating_duration_since(t) >= self.options.idle_timeout)
                && !self.outstanding(s.key)
            {
                Some(ReleaseReason::Idle)
            } else {
                None
            };
            match reason {
                Some(reason) => {
                    let slot = slots.remove(i);
                    self.give_back(slot, reason).await;
                }
                None => i += 1,
            }
        }
    }

    fn take(&self, handle: DeliveryHandle) -> Result<(Arc<AmqpSource>, DeliveryHandle), PortError> {
        match self.handles().remove(&handle.0) {
            Some((source, inner, _)) => Ok((source, inner)),
            None if self.closed.load(Ordering::SeqCst) => {
                Err(PortError::new(ErrorKind::Closed, format!("{}: the source was closed", self.what)))
            }
            None => Err(PortError::new(
                ErrorKind::LockLost,
                format!(
                    "{}: delivery {} is not held (settled already, or its session was given back)",
                    self.what, handle.0
                ),
            )),
        }
    }
}

#[async_trait]
impl MessageSource for SessionSource {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: false, release: true }
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(PortError::new(ErrorKind::Closed, format!("{}: the source was closed", self.what)));
        }
        if max == 0 {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + max_wait;
        let mut slots = self.slots.lock().await;
        self.retire(&mut slots, Instant::now()).await;
        // With sessions held, looking for more must not hold up their receive long.
        let limit = if slots.is_empty() {
            self.options.source.connect_timeout
        } else {
            max_wait.clamp(Duration::from_millis(100), self.options.source.connect_timeout)
        };
        self.top_up(&mut slots, limit).await?;
        if slots.is_empty() {
            // Nothing to receive from: wait as a receive on an empty queue would, so a
            // caller's loop does not spin.
            drop(slots);
            tokio::time::sleep_until(deadline).await;
            return Ok(Vec::new());
        }
        let n = slots.len();
        let mut last_error = None;
        let start = self.cursor.load(Ordering::Relaxed);
        for i in 0..n {
            let idx = (start + i) % n;
            let wait = deadline.saturating_duration_since(Instant::now()) / u32::try_from(n - i).unwrap_or(1);
            match slots[idx].source.receive(max, wait).await {
                Ok(got) if !got.is_empty() => {
                    let slot = &mut slots[idx];
                    slot.empty_since = None;
                    // Stay on this session while it has messages: it is drained first.
                    self.cursor.store(idx, Ordering::Relaxed);
                    let mut handles = self.handles();
                    let out = got
                        .into_iter()
                        .map(|mut d| {
                            let outer = self.next_handle.fetch_add(1, Ordering::Relaxed);
                            handles.insert(outer, (slot.source.clone(), d.handle, slot.key));
                            d.handle = DeliveryHandle(outer);
                            d
                        })
                        .collect();
                    return Ok(out);
                }
                Ok(_) => {
                    slots[idx].empty_since.get_or_insert_with(Instant::now);
                }
                // A session lost while its receive waited is given back at the next one.
                Err(_) if slots[idx].source.session_lost().is_some() => {}
                Err(e) => {
                    tracing::debug!(source = %self.what, session = %slots[idx].session, error = %e, "session receive failed");
                    last_error = Some(e);
                }
            }
        }
        self.cursor.store(start.wrapping_add(1), Ordering::Relaxed);
        match last_error {
            Some(e) if n > 0 && e.kind != ErrorKind::LockLost => Err(e),
            _ => Ok(Vec::new()),
        }
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (source, inner) = self.take(handle)?;
        source.complete(inner).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (source, inner) = self.take(handle)?;
        source.abandon(inner).await
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (source, inner) = self.take(handle)?;
        source.release(inner).await
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        let (source, inner) = self.take(handle)?;
        source.dead_letter(inner, reason, description).await
    }

    async fn renew_lock(&self, _handle: DeliveryHandle) -> Result<Duration, PortError> {
        Err(PortError::new(
            ErrorKind::Unsupported,
            format!("{}: a session's messages are locked through the session, whose lock the source renews", self.what),
        ))
    }

    /// Give every session back between ticks (nothing outstanding only), so this
    /// process holds no session while it does not drain.
    async fn park(&self) {
        if !self.handles().is_empty() {
            return;
        }
        let mut slots = self.slots.lock().await;
        for slot in slots.drain(..) {
            self.give_back(slot, ReleaseReason::Parked).await;
        }
    }
}

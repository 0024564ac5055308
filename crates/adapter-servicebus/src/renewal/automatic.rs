//! Automatic lock renewal: [`AutoRenew`] wraps a source and renews the lock of
//! every delivery it hands out, until the delivery is settled, the maximum duration
//! passed, or a renewal failed.
//!
//! Renewal starts in `receive`, only when the source reports
//! `capabilities().lock_renewal` (Service Bus; never on the generic profile) and the
//! maximum is not zero. `complete`, `abandon` and `dead_letter` stop it before they
//! settle. Every outcome is logged (a failure as a warning with the message id and
//! lock token) and sent as a [`LockEvent`] to whoever subscribed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{Capabilities, Delivery, DeliveryHandle, MessageSource};
use drain_core::{ErrorKind, PortError};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use super::lock_token::LockToken;
use super::renew_loop::{RenewEvent, renew_until};
use super::schedule::RenewSchedule;

/// Lock events kept for a subscriber that reads slower than they happen.
const EVENT_BUFFER: usize = 1024;

/// What happened to the lock of a delivery the source renews on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEvent {
    /// The delivery.
    pub handle: DeliveryHandle,
    /// Its message id, when the sender set one.
    pub message_id: Option<String>,
    /// Its lock token, when the broker sent one.
    pub lock_token: Option<LockToken>,
    /// What happened.
    pub event: RenewEvent,
}

/// What a source knows about a delivery's lock when it hands the delivery out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DeliveryLock {
    pub(crate) token: Option<LockToken>,
    /// How long the lock lasts from now; `None` when the broker did not say (then the
    /// first renewal runs at once).
    pub(crate) remaining: Option<Duration>,
}

/// A source that can tell about the locks of the deliveries it handed out.
pub(crate) trait LockLookup: MessageSource + 'static {
    /// The lock of `handle`.
    fn held_lock(&self, handle: DeliveryHandle) -> DeliveryLock;
}

struct Running {
    /// Dropping it stops the renewal.
    _stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A source whose deliveries' locks are renewed automatically.
pub(crate) struct AutoRenew<S> {
    source: Arc<S>,
    max_duration: Duration,
    /// Names the source in logs.
    what: String,
    running: Mutex<HashMap<DeliveryHandle, Running>>,
    events: broadcast::Sender<LockEvent>,
}

impl<S> std::fmt::Debug for AutoRenew<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoRenew")
            .field("max_duration", &self.max_duration)
            .field("renewing", &self.renewing())
            .finish_non_exhaustive()
    }
}

impl<S: LockLookup> AutoRenew<S> {
    /// Renew the locks of `source`'s deliveries for at most `max_duration` each
    /// (zero: never).
    pub(crate) fn new(source: S, max_duration: Duration, what: String) -> Self {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        AutoRenew { source: Arc::new(source), max_duration, what, running: Mutex::default(), events }
    }

    /// The wrapped source.
    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    /// Lock events from now on.
    pub(crate) fn events(&self) -> broadcast::Receiver<LockEvent> {
        self.events.subscribe()
    }

    /// Stop every renewal (the source is closing).
    pub(crate) fn stop_all(&self) {
        self.lock().clear();
    }

    /// Stop renewing `handle` (it is being settled).
    fn stop(&self, handle: DeliveryHandle) {
        if self.renews() {
            self.lock().remove(&handle);
        }
    }

    /// Whether `receive` starts renewals at all (else the map stays empty and
    /// settling needs no look at it).
    fn renews(&self) -> bool {
        !self.max_duration.is_zero() && self.source.capabilities().lock_renewal
    }

    /// Start renewing `delivery`'s lock.
    fn start(&self, delivery: &Delivery) {
        let handle = delivery.handle;
        let lock = self.source.held_lock(handle);
        // The task holds the source weakly: dropping the source ends its renewals.
        let source = Arc::downgrade(&self.source);
        let renew = move || {
            let source = source.upgrade();
            async move {
                match source {
                    Some(source) => source.renew_lock(handle).await,
                    None => Err(PortError::new(ErrorKind::Closed, "the source was dropped")),
                }
            }
        };
        let base = LockEvent {
            handle,
            message_id: delivery.message.message_id.as_ref().map(ToString::to_string),
            lock_token: lock.token,
            event: RenewEvent::MaxDurationReached,
        };
        let (what, events) = (self.what.clone(), self.events.clone());
        let report = move |event: RenewEvent| {
            let event = LockEvent { event, ..base.clone() };
            log(&what, &event);
            let _ = events.send(event);
        };
        let (stop, stopped) = oneshot::channel();
        let schedule = RenewSchedule { max_duration: self.max_duration };
        let remaining = lock.remaining.unwrap_or(Duration::ZERO);
        let task = tokio::spawn(renew_until(renew, remaining, schedule, stopped, report));
        self.lock().insert(handle, Running { _stop: stop, task });
    }

    /// Forget renewals that ended by themselves (the maximum reached, or a failure)
    /// while their delivery stayed unsettled.
    fn sweep(&self) {
        self.lock().retain(|_, r| !r.task.is_finished());
    }
}

impl<S> AutoRenew<S> {
    /// How many deliveries' locks are being renewed now.
    pub(crate) fn renewing(&self) -> usize {
        self.lock().values().filter(|r| !r.task.is_finished()).count()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<DeliveryHandle, Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn log(what: &str, e: &LockEvent) {
    let message_id = e.message_id.as_deref().unwrap_or("-");
    let lock_token = e.lock_token.map_or_else(|| "-".to_owned(), |t| t.to_string());
    let handle = e.handle.0;
    match &e.event {
        RenewEvent::Renewed { lock } => tracing::debug!(
            source = %what, handle, message_id, lock_token, lock_ms = u64::try_from(lock.as_millis()).unwrap_or(u64::MAX),
            "lock renewed"
        ),
        RenewEvent::Failed(error) => tracing::warn!(
            source = %what, handle, message_id, lock_token, error = %error,
            "lock renewal failed; renewal stopped and the message is redelivered once its lock expires"
        ),
        RenewEvent::MaxDurationReached => tracing::info!(
            source = %what, handle, message_id, lock_token,
            "lock renewal reached its maximum duration; the lock runs out unless the message is settled first"
        ),
    }
}

#[async_trait]
impl<S: LockLookup> MessageSource for AutoRenew<S> {
    fn capabilities(&self) -> Capabilities {
        self.source.capabilities()
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        let deliveries = self.source.receive(max, max_wait).await?;
        if self.renews() {
            self.sweep();
            for d in &deliveries {
                self.start(d);
            }
        }
        Ok(deliveries)
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.stop(handle);
        self.source.complete(handle).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.stop(handle);
        self.source.abandon(handle).await
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.stop(handle);
        self.source.release(handle).await
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.stop(handle);
        self.source.dead_letter(handle, reason, description).await
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        self.source.renew_lock(handle).await
    }
}

#[cfg(test)]
mod tests;

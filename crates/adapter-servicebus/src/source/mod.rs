//! [`AmqpSource`]: drain-core's [`MessageSource`] on an AMQP 1.0 receiver link.

mod actor;
mod held;
mod session_calls;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use drain_core::ports::{Capabilities, Delivery, DeliveryHandle, MessageSource};
use drain_core::{ErrorKind, PortError};
use tokio::sync::{Mutex, broadcast, mpsc, oneshot};
use tokio::time::{Instant, timeout};

use self::actor::{Actor, Command, Management, Settlement};
use self::held::{Deliveries, Gone, LockInfo};
use crate::endpoint::{Endpoint, Profile};
use crate::error;
use crate::renewal::{
    AutoRenew, DeliveryLock, LockEvent, LockLookup, RenewLockRequest, lock_duration, renew_error, unix_now_ms,
};
use crate::session::filter::SessionFilter;
use drain_core::Backoff;

/// Settings of an [`AmqpSource`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceOptions {
    /// Messages the broker may push ahead of a `receive`: the size of the credit
    /// window granted when the previous one is used up (at least what the `receive`
    /// asks for). With 0, credit is granted for what a `receive` asks for.
    ///
    /// Credit is never changed while some of it is outstanding (that races with
    /// transfers in flight), so when a receive returns early the rest of its window
    /// stays open: up to that many messages may arrive and wait, locked to this
    /// source, for the next `receive` (or go back to the queue on
    /// [`AmqpSource::close`], or [`AmqpSource::park`]). Service Bus deliveries whose
    /// lock ran out while waiting are dropped; the broker redelivers them.
    pub prefetch: u32,
    /// Once the first message of a `receive` arrived, how long to wait for more
    /// before returning fewer than `max` (bounded by `max_wait`).
    pub linger: Duration,
    /// Bound on opening the connection, the session and the link.
    pub connect_timeout: Duration,
    /// Bound on one management call, detach or close.
    pub operation_timeout: Duration,
    /// AMQP idle timeout announced to the broker; a silent connection is dead after it.
    pub idle_timeout: Duration,
    /// Delays between reconnect attempts.
    pub backoff: Backoff,
    /// How long, at most, the lock of each delivery `receive` hands out is renewed
    /// automatically, counted from the `receive`. Only on Service Bus: the generic
    /// profile has no lock to renew (`capabilities().lock_renewal` is false) and
    /// renews nothing. Renewal stops when the delivery is completed, abandoned or
    /// dead-lettered, when this much time passed, or when a renewal fails; a failure
    /// is logged as a warning with the message id and lock token, and every outcome
    /// is sent to [`AmqpSource::lock_events`]. `Duration::ZERO` turns automatic
    /// renewal off (renew by hand then, e.g. with [`crate::LockRenewal`]). Default:
    /// 5 minutes, as in the Azure SDKs.
    pub max_lock_renewal: Duration,
    /// Service Bus only: how long each SAS token put on the connection is valid
    /// (whole seconds, at least 1). It is replaced 5 minutes before it expires, or
    /// after a tenth of its life when it is shorter than that. Default: one hour, as
    /// Microsoft's SDKs.
    pub token_lifetime: Duration,
    /// Service Bus only: lock one session of a session-enabled queue or subscription
    /// and receive only its messages (in order). `None`: a plain receiver. After a
    /// lost link the source locks the same session again. Most callers want a
    /// [`crate::SessionSource`], which holds several sessions and moves on from idle
    /// ones.
    pub session: Option<SessionFilter>,
    /// Take Service Bus's dead-letter properties (`DeadLetterReason`,
    /// `DeadLetterErrorDescription`, `DeadLetterSource`) out of each message's
    /// application properties. Service Bus sets them on a dead-lettered message; a
    /// source on a `$DeadLetterQueue` that re-drives messages to their queue keeps
    /// them by default, so the re-driven copy still says why it was dead-lettered.
    pub drop_dead_letter_properties: bool,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            prefetch: 0,
            linger: Duration::from_millis(20),
            connect_timeout: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            backoff: Backoff::default(),
            max_lock_renewal: Duration::from_secs(300),
            token_lifetime: crate::sas::TOKEN_TTL,
            session: None,
            drop_dead_letter_properties: false,
        }
    }
}

/// A peek-lock receiver on one queue, implementing drain-core's [`MessageSource`].
///
/// On Service Bus, the lock of every delivery `receive` hands out is renewed
/// automatically until it is settled, up to [`SourceOptions::max_lock_renewal`];
/// see [`AmqpSource::lock_events`].
///
/// One task owns the connection and the link; receives talk to it over channels.
/// Settlements never wait for a pending `receive`: `complete` (and `abandon` on
/// RabbitMQ) go straight from the caller to the link through fe2o3's disposer,
/// under a mutex held only for a map lookup; dead-letters (and Service Bus
/// abandons) take a short trip through the task. The task reconnects with
/// jittered backoff after a broker restart or a dropped connection; deliveries of
/// the lost link come back from the broker, and settling one returns
/// [`ErrorKind::LockLost`]. Call [`AmqpSource::close`] to detach cleanly.
///
/// Must be created inside a Tokio runtime.
#[derive(Debug)]
pub struct AmqpSource {
    auto: AutoRenew<Inner>,
}

/// The receiver itself, without automatic lock renewal.
#[derive(Debug)]
struct Inner {
    what: String,
    profile: Profile,
    options: SourceOptions,
    commands: mpsc::Sender<Command>,
    held: Arc<Deliveries>,
    management: Mutex<Option<Management>>,
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management").field("generation", &self.generation).finish()
    }
}

impl AmqpSource {
    /// Connect to `endpoint`'s queue and attach the receiver. Fails fast on a wrong
    /// address, credentials or queue; later outages are retried in the background.
    ///
    /// # Errors
    /// As mapped in [`crate`]'s error table: `Config` without a queue, `Connection`/
    /// `Timeout` when unreachable, `Auth`, `Permission`, `NotFound`.
    pub async fn connect(endpoint: Endpoint, options: SourceOptions) -> Result<Self, PortError> {
        let link = actor::open_link(&endpoint, &options).await?;
        let (tx, rx) = mpsc::channel(256);
        let what = endpoint.to_string();
        let profile = endpoint.profile;
        let held = Arc::new(Deliveries::default());
        tokio::spawn(Actor::new(endpoint, options.clone(), rx, held.clone(), link).run());
        let max_lock_renewal = options.max_lock_renewal;
        let inner = Inner { what: what.clone(), profile, options, commands: tx, held, management: Mutex::new(None) };
        Ok(AmqpSource { auto: AutoRenew::new(inner, max_lock_renewal, what) })
    }

    /// The broker profile.
    #[must_use]
    pub fn profile(&self) -> Profile {
        self.auto.source().profile
    }

    /// Events of the automatic lock renewal from now on: each renewal, failure, and
    /// maximum duration reached, with the delivery's handle, message id and lock
    /// token. Nothing arrives on the generic profile. A subscriber that falls more
    /// than 1024 events behind loses the oldest (`RecvError::Lagged`).
    #[must_use]
    pub fn lock_events(&self) -> broadcast::Receiver<LockEvent> {
        self.auto.events()
    }

    /// How many prefetched deliveries lost their lock before a `receive` took them
    /// (Service Bus; each was logged as a warning and is redelivered by the broker).
    /// A growing count says `prefetch` is too large for the lock duration.
    #[must_use]
    pub fn locks_lost_waiting(&self) -> u64 {
        self.auto.source().held.expired_waiting_count()
    }

    /// How many deliveries' locks are being renewed automatically now (always 0 on
    /// the generic profile).
    #[must_use]
    pub fn renewing(&self) -> usize {
        self.auto.renewing()
    }

    /// When the delivery's lock expires, from Service Bus's `x-opt-locked-until` or
    /// the last renewal (`None` on brokers that do not say).
    ///
    /// # Errors
    /// `LockLost` when the handle is not held.
    pub async fn locked_until(&self, handle: DeliveryHandle) -> Result<Option<SystemTime>, PortError> {
        let info = self.auto.source().lock_info(handle)?;
        Ok(info.locked_until_ms.and_then(|ms| u64::try_from(ms).ok()).map(|ms| UNIX_EPOCH + Duration::from_millis(ms)))
    }

    /// Hold no credit and no message until the next `receive`: the messages that
    /// arrived on credit left open by the last receive and were not handed out are
    /// released, the receiver is detached and its connection closed, so every message
    /// on its way goes back to the queue; the next `receive` connects and attaches
    /// again (a connection set-up, milliseconds on a local broker). On Service Bus,
    /// which keeps the lock of a delivery its receiver went away with until the lock
    /// runs out, the open credit is drained first and what was in flight taken in
    /// before everything is released (up to 200 ms more when credit was open), so the
    /// messages come back at once with their delivery count unchanged. A process that
    /// drains only inside ticks under a single-flight lease calls it after each tick,
    /// so that between its ticks it sits on nothing that the lease holder could drain.
    ///
    /// Does nothing while a `receive` waits or a delivery it handed out is not
    /// settled: the source is still in use. Returns whether the source is parked.
    pub async fn park(&self) -> bool {
        self.auto.source().park().await
    }

    /// Give back what the source holds, detach the receiver, end the session and close
    /// the connection. Deliveries not settled yet (prefetched and never handed out, or
    /// handed out and not finished) go back to the queue at once: on Service Bus the
    /// open credit is drained and each of them released (their delivery count
    /// unchanged), so another receiver, or Microsoft's SDK, gets them immediately
    /// instead of after their locks run out. Later calls fail with
    /// [`ErrorKind::Closed`].
    ///
    /// # Errors
    /// Never fails today; the `Result` leaves room for reporting a dirty close.
    pub async fn close(&self) -> Result<(), PortError> {
        self.auto.stop_all();
        self.auto.source().close().await
    }
}

#[async_trait]
impl MessageSource for AmqpSource {
    async fn park(&self) {
        AmqpSource::park(self).await;
    }

    fn capabilities(&self) -> Capabilities {
        self.auto.capabilities()
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        self.auto.receive(max, max_wait).await
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.auto.complete(handle).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.auto.abandon(handle).await
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.auto.release(handle).await
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.auto.dead_letter(handle, reason, description).await
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        self.auto.renew_lock(handle).await
    }
}

impl Inner {
    async fn park(&self) -> bool {
        let (reply, rx) = oneshot::channel();
        if self.commands.send(Command::Park { reply }).await.is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    async fn close(&self) -> Result<(), PortError> {
        *self.management.lock().await = None;
        self.held.close();
        let (reply, rx) = oneshot::channel();
        if self.commands.send(Command::Close { reply }).await.is_ok() {
            let _ = rx.await;
        }
        Ok(())
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, PortError>>) -> Command,
    ) -> Result<T, PortError> {
        let (reply, rx) = oneshot::channel();
        self.commands.send(make(reply)).await.map_err(|_| self.closed())?;
        rx.await.map_err(|_| self.closed())?
    }

    fn closed(&self) -> PortError {
        actor::closed(&self.what)
    }

    fn gone(&self, gone: Gone, handle: DeliveryHandle) -> PortError {
        match gone {
            Gone::LockLost => actor::lock_lost(&self.what, handle.0),
            Gone::Expired => actor::lock_expired(&self.what, handle.0),
            Gone::Closed => self.closed(),
        }
    }

    fn lock_info(&self, handle: DeliveryHandle) -> Result<LockInfo, PortError> {
        self.held.lock_info(handle.0).map_err(|g| self.gone(g, handle))
    }

    /// Settle through the link task (outcomes the disposer cannot send).
    async fn settle(&self, handle: DeliveryHandle, settlement: Settlement) -> Result<(), PortError> {
        self.ask(|reply| Command::Settle { handle: handle.0, settlement, reply }).await
    }

    /// Settle `accepted` or `released` from the caller's task.
    async fn dispose(&self, handle: DeliveryHandle, accept: bool) -> Result<(), PortError> {
        let (tracked, disposer) = self.held.take(handle.0).map_err(|g| self.gone(g, handle))?;
        let sent = if accept { disposer.accept(tracked.info).await } else { disposer.release(tracked.info).await };
        // A failure means the session is gone; the link task notices it on its own.
        sent.map_err(|e| {
            let err = error::disposition_error(&self.what, &e);
            tracing::warn!(source = %self.what, error = %err, "settlement failed; the link is gone");
            actor::lock_lost(&self.what, handle.0)
        })
    }

    async fn renew(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        let info = self.lock_info(handle)?;
        let Some(token) = info.token else {
            return Err(PortError::new(
                ErrorKind::Protocol,
                format!("{}: delivery {} carries no lock token", self.what, handle.0),
            ));
        };
        let op = self.options.operation_timeout;
        let mut slot = self.management.lock().await;
        if slot.as_ref().is_none_or(|m| m.generation != info.generation) {
            *slot = Some(self.ask(|reply| Command::Management { reply }).await?);
        }
        let Some(mgmt) = slot.as_mut() else { return Err(self.closed()) };
        if mgmt.generation != info.generation {
            return Err(actor::lock_lost(&self.what, handle.0));
        }
        let request = RenewLockRequest { tokens: vec![token], link_name: Some(info.link_name), server_timeout: op };
        let result = timeout(op, mgmt.client.call(request)).await;
        let now_ms = unix_now_ms();
        match result {
            Ok(Ok(response)) => match response.expirations_ms.first() {
                Some(expires) => {
                    self.held.renewed(handle.0, *expires);
                    Ok(lock_duration(now_ms, *expires))
                }
                None => Err(PortError::new(
                    ErrorKind::Protocol,
                    format!("{}: renew-lock returned no expiration", self.what),
                )),
            },
            Ok(Err(e)) => {
                let err = renew_error(&e);
                if err.kind != ErrorKind::LockLost && err.kind != ErrorKind::Other {
                    // The request/response pair may be out of step now: start over next time.
                    *slot = None;
                }
                Err(err)
            }
            Err(_) => {
                *slot = None;
                Err(error::timeout(&self.what, "renew-lock", op))
            }
        }
    }
}

impl LockLookup for Inner {
    fn held_lock(&self, handle: DeliveryHandle) -> DeliveryLock {
        let Ok(info) = self.held.lock_info(handle.0) else { return DeliveryLock::default() };
        let now_ms = unix_now_ms();
        DeliveryLock { token: info.token, remaining: info.locked_until_ms.map(|until| lock_duration(now_ms, until)) }
    }
}

#[async_trait]
impl MessageSource for Inner {
    fn capabilities(&self) -> Capabilities {
        self.profile.capabilities()
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        let deadline = Instant::now() + max_wait;
        self.ask(|reply| Command::Receive { max, deadline, reply }).await
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.dispose(handle, true).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        match self.profile {
            Profile::Generic => self.dispose(handle, false).await,
            Profile::ServiceBus => self.settle(handle, Settlement::Abandon).await,
        }
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        match self.profile {
            Profile::ServiceBus => self.dispose(handle, false).await,
            Profile::Generic => Err(PortError::new(
                ErrorKind::Unsupported,
                format!("{}: this broker counts a released message as a delivery; abandon it instead", self.what),
            )),
        }
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        let settlement = Settlement::DeadLetter { reason: reason.to_owned(), description: description.to_owned() };
        self.settle(handle, settlement).await
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        if !self.profile.capabilities().lock_renewal {
            return Err(PortError::new(
                ErrorKind::Unsupported,
                format!("{}: this broker holds a delivery until its link ends; there is no lock to renew", self.what),
            ));
        }
        self.renew(handle).await
    }
}

//! Lock renewal up to a maximum duration (Service Bus): when to renew and the loop
//! that does it.
//!
//! [`RenewSchedule`] decides when to renew (pure, tested on its own); `renew_until`
//! is the one renewal loop, generic over the renew call. [`crate::AmqpSource`] runs
//! it for every delivery it hands out (see `auto_renew`); [`LockRenewal`] runs it by
//! hand for one delivery of any [`MessageSource`] and reports [`RenewEvent`]s. Stop
//! it (or drop it) when the delivery is settled.

use std::sync::Arc;
use std::time::Duration;

use drain_core::PortError;
use drain_core::ports::{DeliveryHandle, MessageSource};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// How long before a lock expires it is renewed, at most.
pub(crate) const RENEW_AHEAD: Duration = Duration::from_secs(10);

/// When to renew: `min(10 s, half the remaining lock)` before it expires, and never
/// so late that the renewal would start at or after `max_duration` since the
/// delivery was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewSchedule {
    /// Stop renewing once this much time has passed since the delivery was received.
    pub max_duration: Duration,
}

impl RenewSchedule {
    /// How long to wait before the next renewal, given the time `elapsed` since the
    /// delivery was received and the lock's `remaining` life; `None` when the next
    /// renewal would fall at or past the maximum duration (let the lock run out).
    #[must_use]
    pub fn next(&self, elapsed: Duration, remaining: Duration) -> Option<Duration> {
        let ahead = (remaining / 2).min(RENEW_AHEAD);
        let wait = remaining - ahead;
        (elapsed + wait < self.max_duration).then_some(wait)
    }
}

/// What happened to a renewed lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewEvent {
    /// The lock was renewed and now lasts `lock` more.
    Renewed {
        /// The new remaining lock duration.
        lock: Duration,
    },
    /// Renewing failed; the renewer stopped. The message is redelivered when its lock
    /// expires, and settling it will likely fail with `LockLost`.
    Failed(PortError),
    /// The maximum duration was reached; the renewer stopped and the lock runs out.
    MaxDurationReached,
}

/// Renew a lock with `renew`, whose current lock lasts `remaining` more, on
/// `schedule` (measured from now), telling `report` what happened, until the maximum
/// duration is reached, a renewal fails, or `stop` fires (its sender sent or was
/// dropped). `stop` is checked while waiting and again after each renewal: a renewal
/// in flight is never cancelled halfway (that would leave a request/response link
/// out of step), but once stopped nothing more is reported.
pub(crate) async fn renew_until<F, Fut>(
    mut renew: F,
    remaining: Duration,
    schedule: RenewSchedule,
    mut stop: oneshot::Receiver<()>,
    mut report: impl FnMut(RenewEvent),
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Duration, PortError>>,
{
    let start = Instant::now();
    let mut remaining = remaining;
    let mut at = start;
    loop {
        let Some(wait) = schedule.next(at - start, remaining) else {
            report(RenewEvent::MaxDurationReached);
            return;
        };
        tokio::select! {
            biased;
            _ = &mut stop => return,
            () = tokio::time::sleep_until(at + wait) => {}
        }
        let result = renew().await;
        if !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
            return;
        }
        match result {
            Ok(lock) => {
                at = Instant::now();
                remaining = lock;
                report(RenewEvent::Renewed { lock });
            }
            Err(e) => {
                report(RenewEvent::Failed(e));
                return;
            }
        }
    }
}

/// A running renewal of one delivery's lock, started by hand. Dropping it stops the
/// renewal. [`crate::AmqpSource`] renews the deliveries it hands out on its own
/// (see [`crate::SourceOptions::max_lock_renewal`]); use this only with that turned off,
/// or with another [`MessageSource`].
#[derive(Debug)]
pub struct LockRenewal {
    _stop: oneshot::Sender<()>,
    events: mpsc::UnboundedReceiver<RenewEvent>,
}

impl LockRenewal {
    /// Renew `handle`'s lock on `source`, whose current lock lasts `remaining` more,
    /// until `max_duration` has passed since now. Use [`crate::AmqpSource::locked_until`]
    /// for `remaining`, or the queue's lock duration right after receiving.
    /// Must be called inside a Tokio runtime.
    pub fn start<S>(source: Arc<S>, handle: DeliveryHandle, remaining: Duration, max_duration: Duration) -> Self
    where
        S: MessageSource + ?Sized + 'static,
    {
        let (tx, events) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel();
        let renew = move || {
            let source = source.clone();
            async move { source.renew_lock(handle).await }
        };
        let report = move |event| drop(tx.send(event));
        tokio::spawn(renew_until(renew, remaining, RenewSchedule { max_duration }, stopped, report));
        LockRenewal { _stop: stop, events }
    }

    /// The next event; `None` once the renewer stopped and every event was read.
    pub async fn next_event(&mut self) -> Option<RenewEvent> {
        self.events.recv().await
    }

    /// Stop renewing (the delivery was settled).
    pub fn stop(self) {}
}

#[cfg(test)]
mod tests;

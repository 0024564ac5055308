//! Automatic lock renewal up to a maximum duration (Service Bus), opt-in per delivery.
//!
//! [`RenewSchedule`] decides when to renew (pure, tested on its own); [`LockRenewal`]
//! runs it for one delivery on any [`MessageSource`] and reports [`RenewEvent`]s.
//! Stop it (or drop it) when the delivery is settled.

use std::sync::Arc;
use std::time::Duration;

use drain_core::PortError;
use drain_core::ports::{DeliveryHandle, MessageSource};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
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

/// A running renewal of one delivery's lock. Dropping it stops the renewal.
#[derive(Debug)]
pub struct LockRenewal {
    task: JoinHandle<()>,
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
        let schedule = RenewSchedule { max_duration };
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let mut remaining = remaining;
            let mut at = start;
            loop {
                let Some(wait) = schedule.next(at - start, remaining) else {
                    let _ = tx.send(RenewEvent::MaxDurationReached);
                    return;
                };
                tokio::time::sleep_until(at + wait).await;
                match source.renew_lock(handle).await {
                    Ok(lock) => {
                        at = Instant::now();
                        remaining = lock;
                        let _ = tx.send(RenewEvent::Renewed { lock });
                    }
                    Err(e) => {
                        let _ = tx.send(RenewEvent::Failed(e));
                        return;
                    }
                }
            }
        });
        LockRenewal { task, events }
    }

    /// The next event; `None` once the renewer stopped and every event was read.
    pub async fn next_event(&mut self) -> Option<RenewEvent> {
        self.events.recv().await
    }

    /// Stop renewing (the delivery was settled).
    pub fn stop(self) {}
}

impl Drop for LockRenewal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests;

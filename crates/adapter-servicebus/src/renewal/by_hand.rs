//! Renewal started by hand: [`LockRenewal`] renews one delivery's lock on any
//! [`MessageSource`] up to a maximum duration and reports [`RenewEvent`]s. Stop it
//! (or drop it) when the delivery is settled.

use std::sync::Arc;
use std::time::Duration;

use drain_core::ports::{DeliveryHandle, MessageSource};
use tokio::sync::{mpsc, oneshot};

use super::renew_loop::{RenewEvent, renew_until};
use super::schedule::RenewSchedule;

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

//! Parking: hold no credit and no message between receives, so a process that
//! drains only inside ticks sits on nothing the lease holder could drain.

use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use tokio::time::{Instant, timeout};

use super::Actor;
use super::reconnect::Link;
use crate::endpoint::Profile;

/// How long a park waits for one more delivery after draining the credit (Service
/// Bus), when not all of it came: the broker's answer to the drain is not visible.
const DRAIN_QUIET: std::time::Duration = std::time::Duration::from_millis(200);

impl Actor {
    /// Hold nothing until the next receive: on Service Bus drain the open credit
    /// first ([`Actor::drain_credit`]), then release the deliveries that arrived and
    /// were not handed out, detach the receiver and close its connection (in the
    /// background, bounded), so no credit stays open and every message that was on
    /// its way comes back to the queue (RabbitMQ keeps a detached link's unsettled
    /// deliveries until its session ends). The next receive attaches again (one
    /// connection set-up). Nothing happens while a receive waits or a delivery it
    /// handed out is not settled yet: the source is in use. Says whether it parked.
    pub(super) async fn park(&mut self) -> bool {
        let handed_out = self.held.len().saturating_sub(self.ready.len());
        if self.parked || !self.pending.is_empty() || handed_out > 0 {
            return self.parked;
        }
        if let Some(c) = self.connecting.take() {
            c.abort();
        }
        self.retry_at = None;
        if let Some(mut link) = self.link.take() {
            if self.endpoint.profile == Profile::ServiceBus {
                self.drain_credit(&mut link).await;
            }
            for (d, _) in self.ready.drain(..) {
                if let Ok((tracked, _)) = self.held.take(d.handle.0) {
                    let _ = link.receiver.release(tracked.info).await;
                }
            }
            let op = self.opts.operation_timeout;
            tokio::spawn(async move {
                if let Ok(Err((_, e))) = timeout(op, link.receiver.detach()).await {
                    tracing::debug!(error = %e, "detach on park");
                }
                link.conn.close(op).await;
            });
        }
        self.held.detach();
        self.ready.clear();
        self.parked = true;
        tracing::debug!(source = %self.what, "receiver parked: no credit until the next receive");
        true
    }

    /// The next receive after a park attaches the receiver again.
    pub(super) fn unpark(&mut self) {
        if self.parked {
            self.parked = false;
            tracing::debug!(source = %self.what, "attaching the receiver again for a receive");
            self.start_connecting();
        }
    }

    /// Service Bus only, before a park releases what arrived: use up the credit left
    /// open and take in every delivery that was on its way. Service Bus keeps the lock
    /// of a delivery its link never settled until the lock runs out (also once the
    /// link is detached or its connection closed), and it sends a released message
    /// again at once on credit still open: so the credit goes first (`drain`), then
    /// what was in flight is taken in, and only then is everything released, as
    /// Microsoft's SDKs do when a receiver closes. The broker's answer to the drain
    /// is not visible through fe2o3, so the wait ends when all the credit came as
    /// deliveries, or after [`DRAIN_QUIET`] without one (bounded by the operation
    /// timeout). Generic brokers skip it: RabbitMQ gives a detached link's
    /// deliveries back when its session ends, and version 3.10 ends the session on a
    /// drain with credit outstanding on an empty queue.
    pub(super) async fn drain_credit(&mut self, link: &mut Link) {
        if link.receiver.credit() == 0 || link.receiver.drain().await.is_err() {
            return;
        }
        let deadline = Instant::now() + self.opts.operation_timeout;
        while link.receiver.credit() > 0 {
            let quiet = (Instant::now() + DRAIN_QUIET).min(deadline);
            match tokio::time::timeout_at(quiet, link.receiver.recv::<Body<Value>>()).await {
                Ok(Ok(d)) => self.on_delivery(d),
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }
}

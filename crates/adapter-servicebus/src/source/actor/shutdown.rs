//! Closing the source: what it holds given back, the link detached, the connection
//! closed, and every request still waiting answered `Closed`.

use tokio::time::timeout;

use super::{Actor, Command, closed};
use crate::endpoint::Profile;

impl Actor {
    /// Give back what is held, detach the receiver, end the session, close the
    /// connection; fail what waits.
    ///
    /// On Service Bus, which keeps the lock of a delivery its receiver went away with
    /// until the lock runs out, the open credit is drained first and then every
    /// delivery not settled (prefetched, or handed out and not finished) is released,
    /// so another receiver gets them at once with their delivery count unchanged.
    /// RabbitMQ gives a detached link's deliveries back when its session ends.
    pub(super) async fn shutdown(&mut self) {
        if let Some(c) = self.connecting.take() {
            c.abort();
        }
        for p in self.pending.drain(..) {
            let _ = p.reply.send(Err(closed(&self.what)));
        }
        self.held.close();
        if let Some(mut link) = self.link.take() {
            if self.endpoint.profile == Profile::ServiceBus {
                self.drain_credit(&mut link).await;
                let unsettled = self.held.take_all(self.generation);
                let released = unsettled.len();
                for info in unsettled {
                    if link.receiver.release(info).await.is_err() {
                        break;
                    }
                }
                if released > 0 {
                    tracing::debug!(source = %self.what, released, "released the deliveries not settled on close");
                }
            }
            let op = self.opts.operation_timeout;
            // `detach`, not `close`: RabbitMQ answers a closing detach with a non-closing one.
            if let Ok(Err((_, e))) = timeout(op, link.receiver.detach()).await {
                tracing::debug!(source = %self.what, error = %e, "detach on close");
            }
            link.conn.close(op).await;
        }
        self.held.take_all(0);
        self.ready.clear();
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            reject_closed(cmd, &self.what);
        }
    }
}

fn reject_closed(cmd: Command, what: &str) {
    let closed = || closed(what);
    match cmd {
        Command::Receive { reply, .. } => drop(reply.send(Err(closed()))),
        Command::Settle { reply, .. } => drop(reply.send(Err(closed()))),
        Command::Management { reply } => drop(reply.send(Err(closed()))),
        Command::Park { reply } => drop(reply.send(false)),
        Command::Close { reply } => drop(reply.send(())),
    }
}

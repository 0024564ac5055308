//! Closing the source: the link detached, the connection closed, and every request
//! still waiting answered `Closed`.

use tokio::time::timeout;

use super::{Actor, Command, closed};

impl Actor {
    /// Detach the receiver, end the session, close the connection; fail what waits.
    pub(super) async fn shutdown(&mut self) {
        if let Some(c) = self.connecting.take() {
            c.abort();
        }
        for p in self.pending.drain(..) {
            let _ = p.reply.send(Err(closed(&self.what)));
        }
        self.held.close();
        self.ready.clear();
        if let Some(link) = self.link.take() {
            let op = self.opts.operation_timeout;
            // `detach`, not `close`: RabbitMQ answers a closing detach with a non-closing one.
            if let Ok(Err((_, e))) = timeout(op, link.receiver.detach()).await {
                tracing::debug!(source = %self.what, error = %e, "detach on close");
            }
            link.conn.close(op).await;
        }
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

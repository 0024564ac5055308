//! Reconnects: opening the link, installing a new one, and losing it. A lost link
//! takes every delivery it handed out with it (the broker redelivers them; settling
//! one is `LockLost`), and the next attempt waits a jittered backoff step.

use drain_core::{ErrorKind, PortError};
use fe2o3_amqp::Receiver;
use fe2o3_amqp::link::{CreditMode, RecvError};
use fe2o3_amqp::types::definitions::{ReceiverSettleMode, SenderSettleMode};
use tokio::time::{Instant, timeout};

use super::Actor;
use crate::connect::{self, Conn};
use crate::endpoint::Endpoint;
use crate::error;
use crate::profile::Settle;
use crate::session::filter::{self, SessionFilter, SessionLock};
use crate::source::SourceOptions;
use fe2o3_amqp::types::primitives::Symbol;

/// An attached receiver on its own connection.
pub(in crate::source) struct Link {
    pub(super) conn: Conn,
    pub(super) receiver: Receiver,
    name: String,
    /// The session the broker locked for it (a session receiver only).
    session: Option<SessionLock>,
}

/// Open a connection and attach the receiver (manual credit, settle mode first).
pub(in crate::source) async fn open_link(endpoint: &Endpoint, opts: &SourceOptions) -> Result<Link, PortError> {
    let entity = endpoint.require_entity()?;
    let what = endpoint.to_string();
    let mut conn = connect::open(endpoint, opts.idle_timeout, opts.connect_timeout, opts.token_lifetime).await?;
    let name = connect::unique_name("drain-receiver");
    let attach = Receiver::builder()
        .name(name.clone())
        .source(filter::source(endpoint.profile.queue_address(entity), opts.session.as_ref()))
        .receiver_settle_mode(ReceiverSettleMode::First)
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .credit_mode(CreditMode::Manual)
        .auto_accept(false)
        .attach(&mut conn.session);
    let attach = timeout(opts.connect_timeout, attach).await;
    let limits = (opts.connect_timeout, opts.operation_timeout);
    let (conn, receiver) =
        connect::attached(conn, attach, (&what, "attaching the receiver"), limits, error::receiver_attach_error)
            .await?;
    let session = match &opts.session {
        None => None,
        Some(asked) => {
            let until = receiver
                .properties(|p| p.as_ref().and_then(|p| p.get(&Symbol::from(filter::LOCKED_UNTIL_UTC)).cloned()));
            let answered = filter::answered(receiver.source().as_ref(), until.as_ref());
            // A broker that named no session but took a named filter holds that one.
            match (answered, asked) {
                (Some(lock), _) => Some(lock),
                (None, SessionFilter::Named(id)) => Some(SessionLock { id: id.clone(), locked_until_ms: None }),
                (None, SessionFilter::NextAvailable) => {
                    let _ = timeout(opts.operation_timeout, receiver.detach()).await;
                    conn.close(opts.operation_timeout).await;
                    return Err(PortError::new(
                        ErrorKind::Protocol,
                        format!(
                            "{what}: the broker accepted a next-available session receiver without naming its session"
                        ),
                    ));
                }
            }
        }
    };
    Ok(Link { conn, receiver, name, session })
}

impl Actor {
    pub(super) fn install(&mut self, link: Link) {
        self.generation += 1;
        self.attempt = 0;
        self.retry_at = None;
        self.last_error = None;
        self.held.attach(self.generation, link.receiver.disposer(), link.name.clone());
        if let Some(session) = &link.session {
            // Reconnects lock this same session again, never another one.
            self.opts.session = Some(SessionFilter::Named(session.id.clone()));
            tracing::debug!(source = %self.what, session = %session.id, "session locked");
        }
        self.held.set_session(link.session.clone());
        self.link = Some(link);
        tracing::debug!(source = %self.what, generation = self.generation, "receiver attached");
    }

    pub(super) async fn on_recv_error(&mut self, e: RecvError) {
        let err = error::recv_error(&self.what, &e);
        if let RecvError::MessageDecode(decode) = &e {
            // A message nobody can read: dead-letter it rather than loop on it.
            if let Some(link) = &self.link {
                let outcome = self.endpoint.profile.outcome(Settle::DeadLetter {
                    reason: "UndecodableMessage",
                    description: "drain could not decode this AMQP message",
                });
                let _ = link.receiver.dispose(decode.info.clone(), outcome).await;
            }
            tracing::warn!(source = %self.what, error = %err, "dead-lettered an undecodable message");
            return;
        }
        if matches!(e, RecvError::TransferLimitExceeded) {
            // The broker sent beyond our credit and fe2o3 dropped the delivery: only a
            // new link gets it back.
            tracing::warn!(source = %self.what, error = %err, "delivery beyond credit; recycling the link");
            self.link_lost(err).await;
            return;
        }
        if e.recovery().link_is_usable() {
            tracing::warn!(source = %self.what, error = %err, "receive error; the link stays");
            return;
        }
        tracing::warn!(source = %self.what, error = %err, "the receiver link is gone; reconnecting");
        self.link_lost(err).await;
    }

    /// Forget the link and everything it handed out, and reconnect.
    pub(super) async fn link_lost(&mut self, err: PortError) {
        if let Some(link) = self.link.take() {
            // Best effort, bounded: the broker may be gone.
            let op = self.opts.operation_timeout.min(std::time::Duration::from_secs(1));
            drop(link.receiver);
            tokio::spawn(link.conn.close(op));
        }
        self.held.detach();
        self.ready.clear();
        for p in &mut self.pending {
            p.got.clear();
            p.linger_until = None;
        }
        if self.opts.session.is_some() {
            // A session receiver's link held the session's lock: losing it loses the
            // session, whose messages may go to another receiver now. Say so and stay
            // down; the owner gives the session back and takes another.
            tracing::warn!(source = %self.what, error = %err, "the session receiver's link is gone, and the session with it");
            self.held.lose_session(err.clone());
            self.last_error = Some(err);
            return;
        }
        self.last_error = Some(err);
        // Reconnect soon: the first attempt after a loss waits only the first backoff step.
        self.attempt = 0;
        self.retry_at = Some(Instant::now() + self.opts.backoff.delay(0, &mut rand::rng()));
    }

    pub(super) fn schedule_retry(&mut self, err: PortError) {
        self.attempt = self.attempt.saturating_add(1);
        let delay = self.opts.backoff.delay(self.attempt, &mut rand::rng());
        tracing::warn!(source = %self.what, error = %err, attempt = self.attempt, retry_in_ms = delay.as_millis() as u64, "reconnect failed");
        self.last_error = Some(err);
        self.retry_at = Some(Instant::now() + delay);
    }

    pub(super) fn start_connecting(&mut self) {
        self.retry_at = None;
        let endpoint = self.endpoint.clone();
        let opts = self.opts.clone();
        self.connecting = Some(tokio::spawn(async move { open_link(&endpoint, &opts).await }));
    }

    pub(super) fn not_connected(&self) -> PortError {
        let why = self.last_error.as_ref().map_or_else(|| "not connected".to_owned(), ToString::to_string);
        PortError::new(ErrorKind::Connection, format!("{}: the broker is unreachable; reconnecting ({why})", self.what))
    }
}

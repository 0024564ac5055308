//! [`AmqpSubmitter`]: drain-core's [`Submitter`] on an AMQP 1.0 sender link.
//!
//! One task owns the connection and the sender. A submit is queued to it; the task
//! puts the transfer on the link (unsettled: the broker must answer with an outcome)
//! and hands the outcome's future to a small waiter task, so many submits are in
//! flight at once. On Service Bus the submits queued together go out as batches
//! (`src/batch.rs`): one transfer and one outcome for up to 64 messages of one
//! session and partition; a batch the broker refuses is sent again one message at a
//! time, so a message's refusal fails only its own submit. `Ok` means the broker's
//! `accepted`; `rejected`, `released` and `modified` map to [`PortError`]s. After a lost link the task reconnects with
//! jittered backoff; submits wait for it up to [`SubmitterOptions::send_timeout`].
//!
//! On Service Bus the connection's CBS token is refreshed before it expires by the
//! same mechanism the source's connection uses ([`crate::token_refresh`], one task per
//! connection); when it cannot be kept valid the link is replaced like a detached one.
//!
//! RabbitMQ accepts and drops messages sent to `/amq/queue/<q>` when `<q>` does not
//! exist, so on the generic profile every (re)connect first checks that the queue
//! exists (a receiver attach without credit) and fails with `NotFound` otherwise.
//! A queue deleted while the link is up is not noticed.

use std::collections::VecDeque;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{Message, SubmitContext, Submitter};
use drain_core::{ErrorKind, PortError};
use fe2o3_amqp::link::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Data, Outcome};
use fe2o3_amqp::{Receiver, Sendable, Sender};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

use crate::batch;
use crate::connect::{self, Conn};
use crate::endpoint::{Endpoint, Profile};
use crate::{convert, error};
use drain_core::Backoff;

/// Settings of an [`AmqpSubmitter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitterOptions {
    /// Bound on one submit: waiting for a connection, link credit and the outcome.
    pub send_timeout: Duration,
    /// Bound on opening the connection, the session and the link.
    pub connect_timeout: Duration,
    /// Bound on detach and close.
    pub operation_timeout: Duration,
    /// AMQP idle timeout announced to the broker.
    pub idle_timeout: Duration,
    /// Delays between reconnect attempts.
    pub backoff: Backoff,
    /// When set, every submit made under a lease carries the lease's fencing number
    /// as this application property (an AMQP `long`), so a consumer of the target can
    /// reject writes from a holder older than one it has seen (docs/reliability.md). `None` (the
    /// default): the message goes out as it came in.
    pub fence_property: Option<String>,
    /// Service Bus only: how long each SAS token put on the connection is valid; see
    /// [`SourceOptions::token_lifetime`](crate::SourceOptions::token_lifetime).
    pub token_lifetime: Duration,
}

impl Default for SubmitterOptions {
    fn default() -> Self {
        SubmitterOptions {
            send_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            operation_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            backoff: Backoff::default(),
            fence_property: None,
            token_lifetime: crate::sas::TOKEN_TTL,
        }
    }
}

/// Sends drained messages to one queue, implementing drain-core's [`Submitter`].
///
/// Must be created inside a Tokio runtime. Call [`AmqpSubmitter::close`] to detach
/// cleanly.
#[derive(Debug)]
pub struct AmqpSubmitter {
    what: String,
    commands: mpsc::Sender<Command>,
    fence_property: Option<String>,
}

type Reply = oneshot::Sender<Result<(), PortError>>;

enum Command {
    Send { message: Box<Sendable<Data>>, reply: Reply },
    Close { reply: oneshot::Sender<()> },
}

struct Link {
    conn: Conn,
    sender: Sender,
}

async fn open_link(endpoint: &Endpoint, opts: &SubmitterOptions) -> Result<Link, PortError> {
    let entity = endpoint.require_entity()?;
    let what = endpoint.to_string();
    let mut conn = connect::open(endpoint, opts.idle_timeout, opts.connect_timeout, opts.token_lifetime).await?;
    let limits = (opts.connect_timeout, opts.operation_timeout);
    if endpoint.profile == Profile::Generic {
        // RabbitMQ accepts (and drops) messages sent to /amq/queue/<q> when <q> does not
        // exist. A receiver attach fails then, so probe with one (no credit) first.
        let probe = Receiver::builder()
            .name(connect::unique_name("drain-probe"))
            .source(endpoint.profile.queue_address(entity))
            .credit_mode(CreditMode::Manual)
            .attach(&mut conn.session);
        let probe = timeout(opts.connect_timeout, probe).await;
        let step = (what.as_str(), "checking that the queue exists");
        let (probed, receiver) = connect::attached(conn, probe, step, limits, error::receiver_attach_error).await?;
        conn = probed;
        let _ = timeout(opts.operation_timeout, receiver.detach()).await;
    }
    let attach = Sender::builder()
        .name(connect::unique_name("drain-sender"))
        .target(endpoint.profile.queue_address(entity))
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut conn.session);
    let attach = timeout(opts.connect_timeout, attach).await;
    let (conn, sender) =
        connect::attached(conn, attach, (&what, "attaching the sender"), limits, error::sender_attach_error).await?;
    Ok(Link { conn, sender })
}

impl AmqpSubmitter {
    /// Connect to `endpoint`'s queue and attach the sender. Fails fast on a wrong
    /// address, credentials or queue; later outages are retried in the background.
    ///
    /// # Errors
    /// `Config` without a queue, `Connection`/`Timeout` when unreachable, `Auth`,
    /// `Permission`, `NotFound`.
    pub async fn connect(endpoint: Endpoint, options: SubmitterOptions) -> Result<Self, PortError> {
        let link = open_link(&endpoint, &options).await?;
        let (tx, rx) = mpsc::channel(1024);
        let (refused_tx, refused_rx) = mpsc::unbounded_channel();
        let what = endpoint.to_string();
        let fence_property = options.fence_property.clone();
        let actor = Actor {
            what: what.clone(),
            endpoint,
            opts: options,
            commands: rx,
            link: Some(link),
            connecting: None,
            retry_at: None,
            attempt: 0,
            last_error: None,
            queue: VecDeque::new(),
            refused: refused_tx,
            refused_back: refused_rx,
        };
        tokio::spawn(actor.run());
        Ok(AmqpSubmitter { what, commands: tx, fence_property })
    }

    /// Detach the sender, end the session and close the connection. Submits still
    /// queued fail with [`ErrorKind::Closed`]; later calls too.
    ///
    /// # Errors
    /// Never fails today; the `Result` leaves room for reporting a dirty close.
    pub async fn close(&self) -> Result<(), PortError> {
        let (reply, rx) = oneshot::channel();
        if self.commands.send(Command::Close { reply }).await.is_ok() {
            let _ = rx.await;
        }
        Ok(())
    }

    fn closed(&self) -> PortError {
        PortError::new(ErrorKind::Closed, format!("{}: the submitter was closed", self.what))
    }
}

#[async_trait]
impl Submitter for AmqpSubmitter {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let mut amqp = convert::to_amqp(message);
        if let (Some(name), Some(fence)) = (&self.fence_property, ctx.fence) {
            convert::set_fence(&mut amqp, name, fence.number());
        }
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Send { message: Box::new(Sendable::from(amqp)), reply };
        // Queued at once where there is room: an awaited send can be made to wait by
        // Tokio's task budget, and then submits started in order reach the broker out
        // of it (messages of one session among them).
        match self.commands.try_send(cmd) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(cmd)) => self.commands.send(cmd).await.map_err(|_| self.closed())?,
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(self.closed()),
        }
        rx.await.map_err(|_| self.closed())?
    }
}

struct Queued {
    message: Box<Sendable<Data>>,
    deadline: Instant,
    reply: Reply,
    /// Sent in a batch the broker refused: now goes out on its own.
    alone: bool,
}

enum Event {
    Command(Option<Command>),
    Connected(Result<Box<Link>, PortError>),
    Retry,
    Expire,
    Detached(PortError),
    Alone(Option<Vec<Queued>>),
}

struct Actor {
    what: String,
    endpoint: Endpoint,
    opts: SubmitterOptions,
    commands: mpsc::Receiver<Command>,
    link: Option<Link>,
    connecting: Option<JoinHandle<Result<Link, PortError>>>,
    retry_at: Option<Instant>,
    attempt: u32,
    last_error: Option<PortError>,
    /// Submits waiting for a link.
    queue: VecDeque<Queued>,
    /// Where the waiter task of a refused batch sends its messages back, to go alone.
    refused: mpsc::UnboundedSender<Vec<Queued>>,
    refused_back: mpsc::UnboundedReceiver<Vec<Queued>>,
}

impl Actor {
    async fn run(mut self) {
        loop {
            self.flush().await;
            let expire_at = self.queue.front().map(|q| q.deadline);
            let event = tokio::select! {
                biased;
                group = self.refused_back.recv() => Event::Alone(group),
                cmd = self.commands.recv() => Event::Command(cmd),
                e = on_detach(&mut self.link), if self.link.is_some() => Event::Detached(e),
                r = connect::join(&mut self.connecting), if self.connecting.is_some() => Event::Connected(r.map(Box::new)),
                () = sleep_until(self.retry_at.unwrap_or_else(Instant::now)),
                    if self.retry_at.is_some() && self.connecting.is_none() && self.link.is_none() => Event::Retry,
                () = sleep_until(expire_at.unwrap_or_else(Instant::now)), if expire_at.is_some() => Event::Expire,
            };
            match event {
                Event::Command(None) => {
                    self.shutdown().await;
                    return;
                }
                Event::Command(Some(cmd)) => {
                    // This command, then every one already waiting: the submits queued
                    // together go out together.
                    let mut next = Some(cmd);
                    while let Some(cmd) = next {
                        match cmd {
                            Command::Send { message, reply } => self.enqueue(message, reply),
                            Command::Close { reply } => {
                                self.shutdown().await;
                                let _ = reply.send(());
                                return;
                            }
                        }
                        next = self.commands.try_recv().ok();
                    }
                    if self.link.is_none() && self.connecting.is_none() && self.retry_at.is_none() {
                        self.start_connecting();
                    }
                }
                Event::Connected(Ok(link)) => {
                    self.connecting = None;
                    self.attempt = 0;
                    self.last_error = None;
                    self.link = Some(*link);
                    tracing::debug!(target_queue = %self.what, "sender attached");
                }
                Event::Connected(Err(e)) => {
                    self.connecting = None;
                    self.attempt = self.attempt.saturating_add(1);
                    let delay = self.opts.backoff.delay(self.attempt, &mut rand::rng());
                    tracing::warn!(target_queue = %self.what, error = %e, attempt = self.attempt, "reconnect failed");
                    self.last_error = Some(e);
                    self.retry_at = Some(Instant::now() + delay);
                }
                Event::Retry => self.start_connecting(),
                Event::Expire => self.expire(),
                Event::Detached(e) => self.link_lost(e),
                Event::Alone(group) => {
                    for q in group.into_iter().flatten().rev() {
                        self.queue.push_front(q);
                    }
                }
            }
        }
    }

    fn enqueue(&mut self, message: Box<Sendable<Data>>, reply: Reply) {
        let deadline = Instant::now() + self.opts.send_timeout;
        self.queue.push_back(Queued { message, deadline, reply, alone: false });
    }

    /// Put queued messages on the link, in batches where they may share one; each
    /// outcome is awaited by a waiter task.
    async fn flush(&mut self) {
        while let Some(link) = &mut self.link {
            let Some(first) = self.queue.pop_front() else { return };
            let (group, encoded) = if self.endpoint.profile == Profile::ServiceBus {
                gather(first, &mut self.queue, link)
            } else {
                (vec![first], vec![])
            };
            let budget = group[0].deadline.saturating_duration_since(Instant::now());
            let sent = if encoded.is_empty() {
                timeout(budget, link.sender.send_batchable_ref(&group[0].message)).await
            } else {
                let sendable = batch::envelope(&group[0].message.message, encoded);
                timeout(budget, link.sender.send_batchable_ref(&sendable)).await
            };
            match sent {
                Ok(Ok(outcome)) => {
                    let (what, refused) = (self.what.clone(), self.refused.clone());
                    tokio::spawn(async move {
                        let result = match timeout(budget, outcome).await {
                            Ok(Ok(Outcome::Accepted(_))) => Ok(()),
                            Ok(Ok(other)) if group.len() > 1 => {
                                tracing::debug!(target_queue = %what, outcome = ?other, messages = group.len(),
                                    "the broker refused a batch; sending its messages one at a time");
                                let group = group.into_iter().map(|q| Queued { alone: true, ..q }).collect();
                                if let Err(back) = refused.send(group) {
                                    reply_all(back.0, &Err(error::outcome_error(&what, &other)));
                                }
                                return;
                            }
                            Ok(Ok(other)) => Err(error::outcome_error(&what, &other)),
                            Ok(Err(e)) => Err(error::send_error(&what, &e)),
                            Err(_) => Err(error::timeout(&what, "waiting for the broker's outcome", budget)),
                        };
                        reply_all(group, &result);
                    });
                }
                Ok(Err(e)) => {
                    let err = error::send_error(&self.what, &e);
                    if e.recovery().link_is_usable() {
                        reply_all(group, &Err(err));
                    } else {
                        // Not sent: keep them for the next link.
                        for q in group.into_iter().rev() {
                            self.queue.push_front(q);
                        }
                        self.link_lost(err);
                    }
                }
                Err(_) => reply_all(group, &Err(error::timeout(&self.what, "waiting for link credit", budget))),
            }
        }
    }

    fn link_lost(&mut self, err: PortError) {
        tracing::warn!(target_queue = %self.what, error = %err, "the sender link is gone; reconnecting");
        if let Some(link) = self.link.take() {
            let op = self.opts.operation_timeout.min(Duration::from_secs(1));
            drop(link.sender);
            tokio::spawn(link.conn.close(op));
        }
        self.last_error = Some(err);
        self.attempt = 0;
        self.retry_at = Some(Instant::now() + self.opts.backoff.delay(0, &mut rand::rng()));
    }

    fn start_connecting(&mut self) {
        self.retry_at = None;
        let endpoint = self.endpoint.clone();
        let opts = self.opts.clone();
        self.connecting = Some(tokio::spawn(async move { open_link(&endpoint, &opts).await }));
    }

    /// Fail the queued submits whose time is up.
    fn expire(&mut self) {
        let now = Instant::now();
        while self.queue.front().is_some_and(|q| q.deadline <= now) {
            if let Some(q) = self.queue.pop_front() {
                let why = self.last_error.as_ref().map_or_else(|| "not connected".to_owned(), ToString::to_string);
                let err = PortError::new(
                    ErrorKind::Connection,
                    format!(
                        "{}: not sent within {} ms; the broker is unreachable ({why})",
                        self.what,
                        self.opts.send_timeout.as_millis()
                    ),
                );
                let _ = q.reply.send(Err(err));
            }
        }
    }

    async fn shutdown(&mut self) {
        if let Some(c) = self.connecting.take() {
            c.abort();
        }
        let closed = || PortError::new(ErrorKind::Closed, format!("{}: the submitter was closed", self.what));
        for q in self.queue.drain(..) {
            let _ = q.reply.send(Err(closed()));
        }
        if let Some(link) = self.link.take() {
            let op = self.opts.operation_timeout;
            if let Ok(Err((_, e))) = timeout(op, link.sender.detach()).await {
                tracing::debug!(target_queue = %self.what, error = %e, "detach on close");
            }
            link.conn.close(op).await;
        }
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Send { reply, .. } => drop(reply.send(Err(closed()))),
                Command::Close { reply } => drop(reply.send(())),
            }
        }
    }
}

/// `first` and the queued messages behind it that may share its batch (see
/// `src/batch.rs`), with their encodings; no encodings when `first` goes alone.
fn gather(first: Queued, queue: &mut VecDeque<Queued>, link: &Link) -> (Vec<Queued>, Vec<Vec<u8>>) {
    let alike =
        |first: &Queued, next: &Queued| !next.alone && batch::alike(&first.message.message, &next.message.message);
    if first.alone || !queue.front().is_some_and(|next| alike(&first, next)) {
        return (vec![first], Vec::new());
    }
    let budget = batch::budget(link.sender.max_message_size());
    let head = batch::encode(&first.message.message);
    let mut used = batch::cost(&head);
    let mut encoded = vec![head];
    let mut group = vec![first];
    while group.len() < batch::MAX_MESSAGES
        && let Some(next) = queue.front()
        && alike(&group[0], next)
    {
        let e = batch::encode(&next.message.message);
        used += batch::cost(&e);
        if used > budget {
            break;
        }
        encoded.push(e);
        group.extend(queue.pop_front());
    }
    if group.len() == 1 {
        encoded.clear();
    }
    (group, encoded)
}

fn reply_all(group: Vec<Queued>, result: &Result<(), PortError>) {
    for q in group {
        let _ = q.reply.send(result.clone());
    }
}

/// Resolves when the broker detaches the sender, the session ends, or (Service Bus)
/// the CBS token could not be kept valid.
async fn on_detach(link: &mut Option<Link>) -> PortError {
    let Some(link) = link else { return std::future::pending().await };
    tokio::select! {
        e = link.sender.on_detach() => PortError::new(ErrorKind::Connection, format!("the sender link was detached: {e}")),
        e = link.conn.token_lost() => e,
    }
}

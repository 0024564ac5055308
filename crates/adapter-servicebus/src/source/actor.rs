//! The task that owns the connection, the session and the receiver link.
//!
//! Receives, and settlements that need the receiver itself (`rejected`, `modified`),
//! are [`Command`]s answered over oneshot channels; the task `select!`s between
//! commands, deliveries (fe2o3's `recv` is cancel-safe), the head receive's
//! deadline, and reconnect attempts, so a settlement never waits for a pending
//! receive. `accepted` and `released` skip the task (see [`super::held`]). When the
//! link dies, every delivery it handed out is forgotten (settling one is `LockLost`;
//! the broker redelivers those messages) and the task reconnects with jittered
//! backoff.

use std::collections::VecDeque;
use std::sync::Arc;

use drain_core::ports::{Delivery, DeliveryHandle};
use drain_core::{ErrorKind, PortError};
use fe2o3_amqp::Receiver;
use fe2o3_amqp::link::delivery::DeliveryInfo;
use fe2o3_amqp::link::{CreditMode, RecvError};
use fe2o3_amqp::types::definitions::{ReceiverSettleMode, SenderSettleMode};
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp_management::MgmtClient;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

use super::SourceOptions;
use super::held::{Gone, Held, Tracked};
use crate::connect::{self, Conn};
use crate::endpoint::{Endpoint, Profile};
use crate::lock::{self, LockToken};
use crate::profile::Settle;
use crate::{convert, error};

/// How long a park waits for one more delivery after draining the credit (Service
/// Bus), when not all of it came: the broker's answer to the drain is not visible.
const DRAIN_QUIET: std::time::Duration = std::time::Duration::from_millis(200);

/// A request to the link task.
pub(super) enum Command {
    Receive {
        max: usize,
        deadline: Instant,
        reply: oneshot::Sender<Result<Vec<Delivery>, PortError>>,
    },
    Settle {
        handle: u64,
        settlement: Settlement,
        reply: oneshot::Sender<Result<(), PortError>>,
    },
    Management {
        reply: oneshot::Sender<Result<Management, PortError>>,
    },
    /// Hold no credit and no message until the next receive (see [`Actor::park`]).
    Park {
        reply: oneshot::Sender<bool>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// An owned [`Settle`].
pub(super) enum Settlement {
    Abandon,
    DeadLetter { reason: String, description: String },
}

impl Settlement {
    fn as_settle(&self) -> Settle<'_> {
        match self {
            Settlement::Abandon => Settle::Abandon,
            Settlement::DeadLetter { reason, description } => Settle::DeadLetter { reason, description },
        }
    }
}

/// A management client attached on the link's session (Service Bus).
pub(super) struct Management {
    pub(super) generation: u64,
    pub(super) client: MgmtClient,
}

/// An attached receiver on its own connection.
pub(super) struct Link {
    conn: Conn,
    receiver: Receiver,
    name: String,
}

/// Open a connection and attach the receiver (manual credit, settle mode first).
pub(super) async fn open_link(endpoint: &Endpoint, opts: &SourceOptions) -> Result<Link, PortError> {
    let entity = endpoint.require_entity()?;
    let what = endpoint.to_string();
    let mut conn = connect::open(endpoint, opts.idle_timeout, opts.connect_timeout, opts.token_lifetime).await?;
    let name = connect::unique_name("drain-receiver");
    let attach = Receiver::builder()
        .name(name.clone())
        .source(endpoint.profile.queue_address(entity))
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
    Ok(Link { conn, receiver, name })
}

/// A receive call waiting for messages.
struct Pending {
    max: usize,
    deadline: Instant,
    /// Once the first message arrived: stop waiting for more at this time.
    linger_until: Option<Instant>,
    got: Vec<Delivery>,
    reply: oneshot::Sender<Result<Vec<Delivery>, PortError>>,
}

impl Pending {
    fn wake_at(&self) -> Instant {
        self.linger_until.map_or(self.deadline, |l| l.min(self.deadline))
    }
}

enum Event {
    Command(Option<Command>),
    Delivery(Box<Result<fe2o3_amqp::Delivery<Body<Value>>, RecvError>>),
    Connected(Result<Box<Link>, PortError>),
    Retry,
    HeadDue,
    /// The CBS token could not be kept valid: the connection must be replaced.
    TokenLost(PortError),
}

pub(super) struct Actor {
    endpoint: Endpoint,
    what: String,
    opts: SourceOptions,
    commands: mpsc::Receiver<Command>,
    link: Option<Link>,
    generation: u64,
    connecting: Option<JoinHandle<Result<Link, PortError>>>,
    retry_at: Option<Instant>,
    attempt: u32,
    last_error: Option<PortError>,
    pending: VecDeque<Pending>,
    /// Deliveries not handed out yet, with when their lock expires (Unix ms; Service
    /// Bus only), kept here so handing them out needs no lookup in `held`.
    ready: VecDeque<(Delivery, Option<i64>)>,
    held: Arc<Held>,
    next_handle: u64,
    /// Parked: no link on purpose; the next receive attaches one.
    parked: bool,
}

impl Actor {
    pub(super) fn new(
        endpoint: Endpoint,
        opts: SourceOptions,
        commands: mpsc::Receiver<Command>,
        held: Arc<Held>,
        link: Link,
    ) -> Self {
        let mut actor = Actor {
            what: endpoint.to_string(),
            endpoint,
            opts,
            commands,
            link: None,
            generation: 0,
            connecting: None,
            retry_at: None,
            attempt: 0,
            last_error: None,
            pending: VecDeque::new(),
            ready: VecDeque::new(),
            held,
            next_handle: 1,
            parked: false,
        };
        actor.install(link);
        actor
    }

    fn install(&mut self, link: Link) {
        self.generation += 1;
        self.attempt = 0;
        self.retry_at = None;
        self.last_error = None;
        self.held.attach(self.generation, link.receiver.disposer(), link.name.clone());
        self.link = Some(link);
        tracing::debug!(source = %self.what, generation = self.generation, "receiver attached");
    }

    pub(super) async fn run(mut self) {
        // One timer for the head receive, reset only when its deadline changes: a new
        // timer per loop turn would cost a timer-wheel insert and removal per delivery.
        let head_timer = tokio::time::sleep(std::time::Duration::ZERO);
        tokio::pin!(head_timer);
        let mut head_timer_at = None;
        loop {
            self.progress().await;
            let head_due = self.pending.front().map(Pending::wake_at);
            if let Some(due) = head_due
                && head_timer_at != Some(due)
            {
                head_timer.as_mut().reset(due);
                head_timer_at = Some(due);
            }
            let event = tokio::select! {
                biased;
                cmd = self.commands.recv() => Event::Command(cmd),
                e = on_link(&mut self.link), if self.link.is_some() => e,
                r = connect::join(&mut self.connecting), if self.connecting.is_some() => Event::Connected(r.map(Box::new)),
                () = sleep_until(self.retry_at.unwrap_or_else(Instant::now)),
                    if self.retry_at.is_some() && self.connecting.is_none() && self.link.is_none() => Event::Retry,
                () = &mut head_timer, if head_due.is_some() => Event::HeadDue,
            };
            match event {
                Event::Command(None) => {
                    self.shutdown().await;
                    return;
                }
                Event::Command(Some(Command::Close { reply })) => {
                    self.shutdown().await;
                    let _ = reply.send(());
                    return;
                }
                Event::Command(Some(cmd)) => self.on_command(cmd).await,
                Event::Delivery(d) => match *d {
                    Ok(d) => self.on_delivery(d),
                    Err(e) => self.on_recv_error(e).await,
                },
                Event::Connected(Ok(link)) => {
                    self.connecting = None;
                    self.install(*link);
                }
                Event::Connected(Err(e)) => {
                    self.connecting = None;
                    self.schedule_retry(e);
                }
                Event::Retry => self.start_connecting(),
                Event::HeadDue => self.finish_head(),
                Event::TokenLost(e) => self.link_lost(e).await,
            }
        }
    }

    async fn on_command(&mut self, cmd: Command) {
        match cmd {
            Command::Receive { max, deadline, reply } => {
                if max == 0 {
                    let _ = reply.send(Ok(Vec::new()));
                } else {
                    if self.parked {
                        self.parked = false;
                        tracing::debug!(source = %self.what, "attaching the receiver again for a receive");
                        self.start_connecting();
                    }
                    self.pending.push_back(Pending { max, deadline, linger_until: None, got: Vec::new(), reply });
                }
            }
            Command::Settle { handle, settlement, reply } => {
                let _ = reply.send(self.settle(handle, &settlement).await);
            }
            Command::Management { reply } => {
                let _ = reply.send(self.attach_management().await);
            }
            Command::Park { reply } => {
                let _ = reply.send(self.park().await);
            }
            Command::Close { .. } => {} // handled in run
        }
    }

    async fn settle(&mut self, handle: u64, settlement: &Settlement) -> Result<(), PortError> {
        let tracked = match self.held.take(handle) {
            Ok((tracked, _)) if tracked.generation == self.generation => tracked,
            Ok(_) | Err(Gone::LockLost) => return Err(lock_lost(&self.what, handle)),
            Err(Gone::Expired) => return Err(lock_expired(&self.what, handle)),
            Err(Gone::Closed) => return Err(closed(&self.what)),
        };
        let Some(link) = &self.link else {
            return Err(lock_lost(&self.what, handle));
        };
        let outcome = self.endpoint.profile.outcome(settlement.as_settle());
        match link.receiver.dispose(tracked.info, outcome).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let err = error::disposition_error(&self.what, &e);
                tracing::warn!(source = %self.what, error = %err, "{} failed; the link is gone", settlement.as_settle().name());
                self.link_lost(err).await;
                Err(lock_lost(&self.what, handle))
            }
        }
    }

    async fn attach_management(&mut self) -> Result<Management, PortError> {
        let entity = self.endpoint.require_entity()?.to_owned();
        let Some(link) = &mut self.link else {
            return Err(self.not_connected());
        };
        let attach = MgmtClient::builder()
            .management_node_address(Profile::management_address(&entity))
            .client_node_addr(connect::unique_name("drain-mgmt"))
            .attach(&mut link.conn.session);
        match timeout(self.opts.operation_timeout, attach).await {
            Ok(Ok(client)) => Ok(Management { generation: self.generation, client }),
            Ok(Err(e)) => Err(PortError::new(
                ErrorKind::Protocol,
                format!("{}: could not attach to {entity}/$management: {e}", self.what),
            )),
            Err(_) => Err(error::timeout(&self.what, "attaching $management", self.opts.operation_timeout)),
        }
    }

    fn on_delivery(&mut self, d: fe2o3_amqp::Delivery<Body<Value>>) {
        let info = DeliveryInfo::from(&d);
        let (token, locked_until_ms) = if self.endpoint.profile == Profile::ServiceBus {
            let message = d.message();
            let da = message.delivery_annotations.as_ref().map(|a| &a.0);
            let ma = message.message_annotations.as_ref().map(|a| &a.0);
            (LockToken::of_delivery(d.delivery_tag(), da, ma), lock::locked_until_ms(ma))
        } else {
            (None, None)
        };
        let (message, delivery_count) = convert::from_amqp(d.into_message());
        let handle = self.next_handle;
        self.next_handle += 1;
        self.held.insert(handle, Tracked { generation: self.generation, info, token, locked_until_ms });
        self.ready.push_back((Delivery { handle: DeliveryHandle(handle), message, delivery_count }, locked_until_ms));
    }

    async fn on_recv_error(&mut self, e: RecvError) {
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

    /// Hold nothing until the next receive: on Service Bus drain the open credit
    /// first ([`Actor::drain_credit`]), then release the deliveries that arrived and
    /// were not handed out, detach the receiver and close its connection (in the
    /// background, bounded), so no credit stays open and every message that was on
    /// its way comes back to the queue (RabbitMQ keeps a detached link's unsettled
    /// deliveries until its session ends). The next receive attaches again (one
    /// connection set-up). Nothing happens while a receive waits or a delivery it
    /// handed out is not settled yet: the source is in use. Says whether it parked.
    async fn park(&mut self) -> bool {
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
    async fn drain_credit(&mut self, link: &mut Link) {
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

    /// Forget the link and everything it handed out, and reconnect.
    async fn link_lost(&mut self, err: PortError) {
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
        self.last_error = Some(err);
        // Reconnect soon: the first attempt after a loss waits only the first backoff step.
        self.attempt = 0;
        self.retry_at = Some(Instant::now() + self.opts.backoff.delay(0, &mut rand::rng()));
    }

    fn schedule_retry(&mut self, err: PortError) {
        self.attempt = self.attempt.saturating_add(1);
        let delay = self.opts.backoff.delay(self.attempt, &mut rand::rng());
        tracing::warn!(source = %self.what, error = %err, attempt = self.attempt, retry_in_ms = delay.as_millis() as u64, "reconnect failed");
        self.last_error = Some(err);
        self.retry_at = Some(Instant::now() + delay);
    }

    fn start_connecting(&mut self) {
        self.retry_at = None;
        let endpoint = self.endpoint.clone();
        let opts = self.opts.clone();
        self.connecting = Some(tokio::spawn(async move { open_link(&endpoint, &opts).await }));
    }

    fn not_connected(&self) -> PortError {
        let why = self.last_error.as_ref().map_or_else(|| "not connected".to_owned(), ToString::to_string);
        PortError::new(ErrorKind::Connection, format!("{}: the broker is unreachable; reconnecting ({why})", self.what))
    }

    /// Hand buffered deliveries to the head receive, answer it when full, and set the
    /// link credit for what is wanted now.
    async fn progress(&mut self) {
        let now = Instant::now();
        let now_ms = unix_ms();
        while let Some(head) = self.pending.front_mut() {
            while head.got.len() < head.max {
                let Some((d, locked_until_ms)) = self.ready.pop_front() else { break };
                // A Service Bus lock that ran out while the delivery waited here: the
                // broker redelivers it; handing it out would only end in LockLost.
                let expired = locked_until_ms.is_some_and(|until| until <= now_ms);
                if expired {
                    self.held.forget(d.handle.0);
                    continue;
                }
                head.got.push(d);
            }
            if !head.got.is_empty() && head.linger_until.is_none() {
                head.linger_until = Some(now + self.opts.linger);
            }
            if head.got.len() < head.max {
                break;
            }
            if let Some(head) = self.pending.pop_front() {
                let _ = head.reply.send(Ok(head.got));
            }
        }
        let Some(link) = &mut self.link else { return };
        let prefetch = self.opts.prefetch;
        let want = match self.pending.front() {
            Some(head) => prefetch.max(u32::try_from(head.max - head.got.len()).unwrap_or(u32::MAX)),
            None => prefetch.saturating_sub(u32::try_from(self.ready.len()).unwrap_or(u32::MAX)),
        };
        // Credit is granted in windows, and only once the previous window is used up.
        // Changing it while transfers are in flight races: lowering it makes fe2o3
        // refuse them (transfer-limit-exceeded) and raising it lets RabbitMQ send
        // more than granted; either way deliveries stay unacknowledged until the link
        // ends. Credit left over when a receive returns early stays open; what
        // arrives on it waits in `ready` for the next receive.
        if want > 0
            && link.receiver.credit() == 0
            && let Err(e) = link.receiver.set_credit(want).await
        {
            let err = error::disposition_error(&self.what, &e);
            self.link_lost(err).await;
        }
    }

    /// The head receive's wait is over: answer with what arrived, or with the
    /// connection error when nothing could arrive.
    fn finish_head(&mut self) {
        let Some(head) = self.pending.pop_front() else { return };
        let result = if head.got.is_empty() && self.link.is_none() { Err(self.not_connected()) } else { Ok(head.got) };
        let _ = head.reply.send(result);
    }

    /// Detach the receiver, end the session, close the connection; fail what waits.
    async fn shutdown(&mut self) {
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

/// The next delivery of the link, or the loss of its CBS token (only polled while
/// there is a link). Both are cancel-safe.
async fn on_link(link: &mut Option<Link>) -> Event {
    let Some(link) = link else { return std::future::pending().await };
    tokio::select! {
        biased;
        d = link.receiver.recv::<Body<Value>>() => Event::Delivery(Box::new(d)),
        e = link.conn.token_lost() => Event::TokenLost(e),
    }
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(super) fn lock_lost(what: &str, handle: u64) -> PortError {
    PortError::new(
        ErrorKind::LockLost,
        format!(
            "{what}: delivery {handle} is not held (already settled, or its link was lost); the broker redelivers it"
        ),
    )
}

pub(super) fn lock_expired(what: &str, handle: u64) -> PortError {
    PortError::new(
        ErrorKind::LockLost,
        format!("{what}: the lock of delivery {handle} expired before it was settled; the broker redelivers it"),
    )
}

pub(super) fn closed(what: &str) -> PortError {
    PortError::new(ErrorKind::Closed, format!("{what}: the source was closed"))
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

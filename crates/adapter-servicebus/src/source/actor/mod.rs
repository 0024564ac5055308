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
//!
//! This file holds the commands and the loop; each concern has a file of its own:
//! `credit` (receives, the deliveries that wait for them, credit windows),
//! `lock_expiry` (lock tokens, and deliveries whose lock ran out while waiting),
//! `park` (no credit between receives), `reconnect` (the link, its loss, backoff),
//! `settle`, `management` (the renew-lock client) and `shutdown`.

mod credit;
mod lock_expiry;
mod management;
mod park;
mod reconnect;
mod settle;
mod shutdown;

use std::collections::VecDeque;
use std::sync::Arc;

use drain_core::ports::Delivery;
use drain_core::{ErrorKind, PortError};
use fe2o3_amqp::link::RecvError;
use fe2o3_amqp::types::messaging::Body;
use fe2o3_amqp::types::primitives::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use self::credit::Pending;
pub(super) use self::management::Management;
pub(super) use self::reconnect::{Link, open_link};
pub(super) use self::settle::Settlement;
use super::SourceOptions;
use super::held::Deliveries;
use crate::connect;
use crate::endpoint::Endpoint;

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
    held: Arc<Deliveries>,
    next_handle: u64,
    /// Parked: no link on purpose; the next receive attaches one.
    parked: bool,
}

impl Actor {
    pub(super) fn new(
        endpoint: Endpoint,
        opts: SourceOptions,
        commands: mpsc::Receiver<Command>,
        held: Arc<Deliveries>,
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
            Command::Receive { max, deadline, reply } => self.receive(max, deadline, reply),
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

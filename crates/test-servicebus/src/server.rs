//! [`Broker`]: the listener, its connections, and the lock-expiry sweeper, on a
//! runtime of the broker's own, so sync and async tests use it alike.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{BrokerConfig, check_queue_name};
use crate::inspect::{BrokerCounters, MessageInfo, QueueStats};
use crate::message::StoredMessage;
use crate::queue::{QueueConfig, SubQueue};
use crate::state::{Routed, Shared, sweep};
use crate::{conn, sas};

/// A Service Bus broker for tests: in memory, on a loopback port, until dropped.
///
/// Every method is synchronous and safe to call from async code (the broker runs on
/// a runtime of its own).
pub struct Broker {
    runtime: Option<Runtime>,
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// Ends the sweeper and the accept loop.
    stop: watch::Sender<bool>,
    /// Bumped to close every open connection (an outage); connections started
    /// later watch the new value.
    cut: Mutex<watch::Sender<bool>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Broker {
    /// Listen on `config.address:config.port` (0: a free port) with the queues of
    /// `config`.
    ///
    /// # Errors
    /// The port cannot be bound, the runtime cannot start, or a queue name is invalid.
    pub fn start(config: BrokerConfig) -> io::Result<Broker> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("test-servicebus")
            .enable_all()
            .build()?;
        let shared = Arc::new(Shared::new(config.key_name.clone(), config.key.clone()));
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        for (name, queue) in &config.queues {
            check_queue_name(name).map_err(invalid)?;
            if !shared.state().create(name, queue.clone()) {
                return Err(invalid(format!("the name {name} is used twice")));
            }
        }
        for topic in &config.topics {
            check_queue_name(&topic.name).map_err(invalid)?;
            for sub in &topic.subscriptions {
                check_queue_name(&sub.name).map_err(invalid)?;
            }
            if !shared.state().create_topic(topic) {
                return Err(invalid(format!("topic {}: a name is used twice", topic.name)));
            }
        }
        let std_listener = std::net::TcpListener::bind((config.address, config.port))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let (cut, _) = watch::channel(false);
        runtime.spawn(sweep(shared.clone(), stopped));
        let broker =
            Broker { runtime: Some(runtime), shared, addr, stop, cut: Mutex::new(cut), accept: Mutex::new(None) };
        broker.listen(std_listener)?;
        tracing::info!(%addr, "test-servicebus listening");
        Ok(broker)
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("the runtime lives as long as the broker")
    }

    fn listen(&self, std_listener: std::net::TcpListener) -> io::Result<()> {
        let listener = {
            let _guard = self.runtime().enter();
            TcpListener::from_std(std_listener)?
        };
        let shared = self.shared.clone();
        let mut stopped = self.stop.subscribe();
        let cut = self.cut.lock().unwrap_or_else(PoisonError::into_inner).subscribe();
        let task = self.runtime().spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = stopped.changed() => return,
                    a = listener.accept() => a,
                };
                match accepted {
                    Ok((stream, peer)) => {
                        tokio::spawn(conn::serve(stream, peer, shared.clone(), cut.clone()));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        *self.accept.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(())
    }

    /// Where it listens.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The namespace's connection string, in the form of Microsoft's emulator:
    /// `Endpoint=sb://127.0.0.1:P;SharedAccessKeyName=…;SharedAccessKey=…;UseDevelopmentEmulator=true`.
    #[must_use]
    pub fn connection_string(&self) -> String {
        format!(
            "Endpoint=sb://{};SharedAccessKeyName={};SharedAccessKey={};UseDevelopmentEmulator=true",
            self.addr, self.shared.key_name, self.shared.key
        )
    }

    /// [`Broker::connection_string`] with `EntityPath=<entity>`.
    #[must_use]
    pub fn entity_connection_string(&self, entity: &str) -> String {
        format!("{};EntityPath={entity}", self.connection_string())
    }

    /// A SAS token for `entity` signed with this broker's key, valid until
    /// `expiry_unix_secs` (for clients that take a token rather than a key).
    #[must_use]
    pub fn sas_token(&self, entity: &str, expiry_unix_secs: i64) -> String {
        sas::sign(&format!("sb://{}/{entity}", self.addr), &self.shared.key_name, &self.shared.key, expiry_unix_secs)
    }

    /// Create a queue.
    ///
    /// # Errors
    /// The name is invalid or taken.
    pub fn create_queue(&self, name: &str, config: QueueConfig) -> Result<(), String> {
        check_queue_name(name)?;
        if self.shared.state().create(name, config) { Ok(()) } else { Err(format!("queue {name} exists")) }
    }

    /// Enqueue a message with `body` (one Data section) and `message_id`, as a sender
    /// would; `false` when duplicate detection dropped it.
    ///
    /// A topic copies it to each subscription whose rules match.
    ///
    /// # Panics
    /// When the queue does not exist, or refuses the message (a session queue).
    pub fn send(&self, queue: &str, body: &[u8], message_id: Option<&str>) -> bool {
        self.send_in_session(queue, None, body, message_id)
    }

    /// [`Broker::send`] with the message in `session` (its group-id), for a
    /// session-enabled queue.
    ///
    /// # Panics
    /// As [`Broker::send`].
    pub fn send_in_session(&self, queue: &str, session: Option<&str>, body: &[u8], message_id: Option<&str>) -> bool {
        let message = StoredMessage::in_session(body, message_id, session);
        let now = self.shared.clock.now_ms();
        let routed = self.shared.state().route(&queue.to_ascii_lowercase(), message, now);
        match routed {
            Routed::Kept(_) => true,
            Routed::Duplicate => false,
            Routed::Refused(why) => panic!("test-servicebus: {queue} refused the message: {why}"),
            Routed::Missing => panic!("test-servicebus: no queue or topic {queue}"),
        }
    }

    /// The names of the queues (subscriptions as `<topic>/Subscriptions/<name>`).
    #[must_use]
    pub fn queues(&self) -> Vec<String> {
        let mut names: Vec<String> = self.shared.state().queues.values().map(|q| q.name.clone()).collect();
        names.sort();
        names
    }

    /// The names of the topics.
    #[must_use]
    pub fn topics(&self) -> Vec<String> {
        let mut names: Vec<String> = self.shared.state().topics.values().map(|t| t.name.clone()).collect();
        names.sort();
        names
    }

    /// The counts of `queue`.
    #[must_use]
    pub fn stats(&self, queue: &str) -> Option<QueueStats> {
        self.shared.state().queue(&queue.to_ascii_lowercase()).map(QueueStats::of)
    }

    /// The messages of `queue` (or of its dead-letter sub-queue), by sequence number.
    #[must_use]
    pub fn messages(&self, queue: &str, sub: SubQueue) -> Vec<MessageInfo> {
        let state = self.shared.state();
        let Some(q) = state.queue(&queue.to_ascii_lowercase()) else { return Vec::new() };
        q.entries(sub).into_iter().map(|(e, lock)| MessageInfo::of(e, lock)).collect()
    }

    /// Broker-wide counters.
    #[must_use]
    pub fn counters(&self) -> BrokerCounters {
        let c = &self.shared.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        BrokerCounters {
            connections: get(&c.connections),
            tokens_accepted: get(&c.tokens_accepted),
            tokens_refused: get(&c.tokens_refused),
            links_refused: get(&c.links_refused),
            links_expired: get(&c.links_expired),
            renew_lock_requests: get(&c.renew_lock_requests),
            unsupported_requests: get(&c.unsupported_requests),
            transfers_received: get(&c.transfers_received),
            batches_received: get(&c.batches_received),
        }
    }

    /// Move the broker's clock forward: locks and tokens that expire within `by`
    /// expire now (clients keep their own clocks, so use it for expiries only).
    pub fn advance(&self, by: Duration) {
        self.shared.advance(by);
    }

    /// An outage: close every connection and stop listening. Queues, their messages
    /// and locks stay (Service Bus is durable); locks held by the closed connections
    /// expire as they would. [`Broker::come_up`] ends it.
    pub fn go_down(&self) {
        if let Some(task) = self.accept.lock().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
        let mut cut = self.cut.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = cut.send(true);
        *cut = watch::channel(false).0;
        tracing::info!(addr = %self.addr, "test-servicebus down");
    }

    /// Listen again on the same address after [`Broker::go_down`].
    ///
    /// # Errors
    /// The port could not be bound again (retried for up to 5 s).
    pub fn come_up(&self) -> io::Result<()> {
        let mut last = None;
        for _ in 0..100 {
            match std::net::TcpListener::bind(self.addr) {
                Ok(l) => {
                    l.set_nonblocking(true)?;
                    self.listen(l)?;
                    tracing::info!(addr = %self.addr, "test-servicebus up");
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(last.unwrap_or_else(|| io::Error::other("could not bind")))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let _ = self.cut.lock().unwrap_or_else(PoisonError::into_inner).send(true);
        if let Some(rt) = self.runtime.take() {
            // Allowed inside an async context, unlike dropping the runtime.
            rt.shutdown_background();
        }
    }
}

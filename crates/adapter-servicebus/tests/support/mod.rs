//! Test harness for the real RabbitMQ: where it is, per-test queues (with a
//! dead-letter queue through a per-queue policy), private vhosts, a TCP proxy that
//! can cut every connection, and a real-time clock for drain-core.
//!
//! RabbitMQ is `DRAIN_TEST_AMQP_URL` (set by `cargo xtask test` to its private
//! node, with `DRAIN_TEST_AMQP_NODE` and `DRAIN_TEST_AMQP_HOME` for `rabbitmqctl`)
//! or `amqp://guest:guest@127.0.0.1:5672`. When it does not answer the test fails,
//! saying how to start one.
#![allow(dead_code, unreachable_pub)]
#![allow(clippy::disallowed_methods, reason = "a test harness reads its DRAIN_TEST_* and CI variables")]

use std::net::{SocketAddr, TcpStream as StdTcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use adapter_servicebus::Endpoint;
use fe2o3_amqp::types::messaging::{Body, Message as AmqpMessage};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672";

/// The run's RabbitMQ.
#[derive(Debug, Clone)]
pub struct Rabbit {
    /// `amqp://user:password@host:port`, no path.
    pub base: String,
    pub addr: SocketAddr,
}

/// RabbitMQ.
///
/// # Panics
/// When it does not answer, saying how to start one.
pub fn rabbit(test: &str) -> Rabbit {
    let base = std::env::var("DRAIN_TEST_AMQP_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let base = base.trim_end_matches('/').to_owned();
    let parsed = Endpoint::parse(&base).expect("DRAIN_TEST_AMQP_URL parses").endpoint;
    let addr = (parsed.host.as_str(), parsed.port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .expect("RabbitMQ address resolves");
    if StdTcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok() {
        return Rabbit { base, addr };
    }
    panic!(
        "{test}: RabbitMQ does not answer on {addr}, so this test cannot run: run the tests with `cargo xtask test` \
         (it starts a private node) or point DRAIN_TEST_AMQP_URL at a broker with the AMQP 1.0 plugin"
    );
}

impl Rabbit {
    /// The endpoint of `queue`, in `vhost` when given.
    pub fn endpoint(&self, queue: &str, vhost: Option<&str>) -> Endpoint {
        let url = match vhost {
            Some(v) => format!("{}/{queue}?vhost={v}", self.base),
            None => format!("{}/{queue}", self.base),
        };
        Endpoint::parse(&url).expect("test URL parses").endpoint
    }

    /// The endpoint of `queue` reached through `proxy`.
    pub fn endpoint_via(&self, proxy: &Proxy, queue: &str, vhost: Option<&str>) -> Endpoint {
        let mut e = self.endpoint(queue, vhost);
        e.host = proxy.addr.ip().to_string();
        e.port = proxy.addr.port();
        e
    }
}

/// `drain-test-<pid>-<n>`.
pub fn unique_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("drain-test-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// `rabbitmqctl` for the run's broker: `cargo xtask test`'s private node
/// (`DRAIN_TEST_AMQP_NODE`, its cookie in `DRAIN_TEST_AMQP_HOME`) through Debian's
/// real script, or else the machine's broker through the one on `PATH`.
fn rabbitmqctl_command() -> Command {
    if let (Ok(node), Some(home)) = (std::env::var("DRAIN_TEST_AMQP_NODE"), std::env::var_os("DRAIN_TEST_AMQP_HOME")) {
        let mut c = Command::new("/usr/lib/rabbitmq/bin/rabbitmqctl");
        c.args(["-n", &node]).env("HOME", home);
        return c;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let tool = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join("rabbitmqctl"))
        .find(|p| p.is_file())
        .expect("rabbitmqctl not found: the tests create queues, policies and vhosts with it");
    Command::new(tool)
}

/// Run `rabbitmqctl args…`; panics with its output when it fails.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let out = rabbitmqctl_command().arg("-q").args(args).stdin(Stdio::null()).output().expect("run rabbitmqctl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "rabbitmqctl {args:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

fn rabbitmqctl_quiet(args: &[&str]) {
    let _ = rabbitmqctl_command().arg("-q").args(args).stdin(Stdio::null()).output();
}

/// A queue of this test (and its dead-letter queue), deleted on drop.
#[derive(Debug)]
pub struct TestQueue {
    pub name: String,
    pub dlq: Option<String>,
    vhost: String,
    policy: Option<String>,
}

impl TestQueue {
    /// Declare a fresh queue in `vhost` (default `/`). With `dead_letters`, a
    /// per-queue policy dead-letters rejected messages to `<name>.dlq` through the
    /// default exchange. Queues are declared by attaching once to `/queue/<q>`; the
    /// adapter then uses `/amq/queue/<q>`.
    pub async fn declare(rabbit: &Rabbit, vhost: Option<&str>, dead_letters: bool) -> TestQueue {
        let name = unique_name();
        let vhost_name = vhost.unwrap_or("/").to_owned();
        let mut q = TestQueue { name: name.clone(), dlq: None, vhost: vhost_name.clone(), policy: None };
        if dead_letters {
            let dlq = format!("{name}.dlq");
            let definition = format!(r#"{{"dead-letter-exchange":"","dead-letter-routing-key":"{dlq}"}}"#);
            let pattern = format!("^{}$", name.replace('.', "\\."));
            rabbitmqctl(&["set_policy", "-p", &vhost_name, "--apply-to", "queues", &name, &pattern, &definition]);
            q.policy = Some(name.clone());
            declare_queue(rabbit, vhost, &dlq).await;
            q.dlq = Some(dlq);
        }
        declare_queue(rabbit, vhost, &name).await;
        q
    }

    /// `(ready, unacknowledged)` messages of `queue`, as RabbitMQ counts them.
    pub fn counts(&self, queue: &str) -> (u64, u64) {
        let out = rabbitmqctl(&["list_queues", "-p", &self.vhost, "name", "messages_ready", "messages_unacknowledged"]);
        let num = |f: Option<&str>| f.and_then(|n| n.parse().ok()).unwrap_or(0);
        out.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some(queue)).then(|| (num(f.next()), num(f.next())))
            })
            .unwrap_or_else(|| panic!("queue {queue} is not listed: {out}"))
    }

    /// Messages ready in the queue, as RabbitMQ counts them.
    pub fn ready(&self, queue: &str) -> u64 {
        let out = rabbitmqctl(&["list_queues", "-p", &self.vhost, "name", "messages_ready", "messages_unacknowledged"]);
        out.lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some(queue)).then(|| f.next().and_then(|n| n.parse().ok()).unwrap_or(0))
            })
            .next()
            .unwrap_or(0)
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        for q in std::iter::once(&self.name).chain(self.dlq.as_ref()) {
            rabbitmqctl_quiet(&["delete_queue", "-p", &self.vhost, q]);
        }
        if let Some(p) = &self.policy {
            rabbitmqctl_quiet(&["clear_policy", "-p", &self.vhost, p]);
        }
    }
}

async fn declare_queue(rabbit: &Rabbit, vhost: Option<&str>, queue: &str) {
    let host = match vhost {
        Some(v) => format!("vhost:{v}"),
        None => rabbit.addr.ip().to_string(),
    };
    let mut conn = Connection::builder()
        .container_id(unique_name())
        .hostname(host.as_str())
        .open(rabbit.base.as_str())
        .await
        .expect("connect to declare");
    let mut session = Session::begin(&mut conn).await.expect("session");
    let sender = Sender::attach(&mut session, unique_name(), format!("/queue/{queue}")).await.expect("declare queue");
    // The queue exists once the attach succeeded; the teardown is best effort, bounded.
    let close = Duration::from_secs(5);
    let _ = tokio::time::timeout(close, sender.detach()).await;
    let _ = tokio::time::timeout(close, session.end()).await;
    let _ = tokio::time::timeout(close, conn.close()).await;
}

/// A vhost of this test only, with full rights for the test user; deleted on drop.
#[derive(Debug)]
pub struct PrivateVhost {
    pub name: String,
}

impl PrivateVhost {
    pub fn create(rabbit: &Rabbit) -> PrivateVhost {
        let name = unique_name();
        let user = rabbit.endpoint("x", None);
        let user = match &user.credentials {
            adapter_servicebus::Credentials::Plain { username, .. } => username.clone(),
            _ => "guest".to_owned(),
        };
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, &user, ".*", ".*", ".*"]);
        PrivateVhost { name }
    }

    /// Close every connection of this vhost, and only of this vhost.
    pub fn close_connections(&self) {
        rabbitmqctl(&["close_all_connections", "-p", &self.name, "drain test: simulated outage"]);
    }
}

impl Drop for PrivateVhost {
    fn drop(&mut self) {
        rabbitmqctl_quiet(&["delete_vhost", &self.name]);
    }
}

/// A TCP proxy in front of the broker that can cut every connection and refuse new
/// ones (a broker outage as the client sees it), then let them through again.
pub struct Proxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let up = Arc::new(AtomicBool::new(true));
        let (cut, cut_rx) = watch::channel(0u64);
        let up2 = up.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                if !up2.load(Ordering::Acquire) {
                    drop(client); // the broker is "down": the handshake fails
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                cut_rx.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else { return };
                    let (mut c, mut s) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut c, &mut s) => {}
                        _ = cut_rx.changed() => {} // dropping both ends resets the connection
                    }
                });
            }
        });
        Proxy { addr, up, cut, task }
    }

    /// Drop every open connection and refuse new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::Release);
        self.cut.send_modify(|n| *n += 1);
    }

    /// Let connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A plain fe2o3 connection and session to the broker: a foreign client's.
async fn raw_session(
    r: &Rabbit,
) -> (fe2o3_amqp::connection::ConnectionHandle<()>, fe2o3_amqp::session::SessionHandle<()>) {
    let mut conn = Connection::builder()
        .container_id(unique_name())
        .hostname(r.addr.ip().to_string().as_str())
        .open(r.base.as_str())
        .await
        .expect("connect");
    let session = Session::begin(&mut conn).await.expect("session");
    (conn, session)
}

/// Send `messages` to `/amq/queue/<queue>` with fe2o3's raw sender, each accepted:
/// what a foreign producer puts on the queue.
pub async fn send_raw(r: &Rabbit, queue: &str, messages: Vec<AmqpMessage<Body<Value>>>) {
    let (mut conn, mut session) = raw_session(r).await;
    let mut sender = Sender::attach(&mut session, unique_name(), format!("/amq/queue/{queue}")).await.expect("attach");
    for m in messages {
        let outcome = sender.send(m).await.expect("send");
        assert!(outcome.is_accepted(), "the broker accepts the message: {outcome:?}");
    }
    // RabbitMQ answers a link close with a detach. The teardown is best effort and
    // bounded: the messages are already accepted.
    let close = Duration::from_secs(5);
    let _ = tokio::time::timeout(close, sender.detach()).await;
    let _ = tokio::time::timeout(close, session.end()).await;
    let _ = tokio::time::timeout(close, conn.close()).await;
}

/// Receive `n` messages from `/amq/queue/<queue>` with fe2o3's raw receiver,
/// accepting each: what a foreign consumer sees on the wire.
pub async fn receive_raw(r: &Rabbit, queue: &str, n: usize) -> Vec<AmqpMessage<Body<Value>>> {
    let (mut conn, mut session) = raw_session(r).await;
    let mut receiver =
        Receiver::attach(&mut session, unique_name(), format!("/amq/queue/{queue}")).await.expect("attach");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let delivery = tokio::time::timeout(Duration::from_secs(10), receiver.recv::<Body<Value>>())
            .await
            .expect("a message within 10 s")
            .expect("receive");
        receiver.accept(&delivery).await.expect("accept");
        out.push(delivery.into_message());
    }
    let close = Duration::from_secs(5);
    let _ = tokio::time::timeout(close, receiver.detach()).await;
    let _ = tokio::time::timeout(close, session.end()).await;
    let _ = tokio::time::timeout(close, conn.close()).await;
    out
}

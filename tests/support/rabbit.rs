//! RabbitMQ for the end-to-end tests: the run's broker (the private node `cargo
//! xtask test` starts, shared by every test of the run, so only uniquely named
//! queues, deleted on drop) or a private node of one test on free
//! loopback ports, which the test may stop and start. Queues are declared over AMQP
//! 1.0, fed and collected with adapter-servicebus, counted with `rabbitmqctl`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use drain_core::ports::{Message, MessageSource, SubmitContext, Submitter};
use drain_core::testkit::message;
use futures::stream::{self, StreamExt};
use test_servers::RabbitNode;

const SHARED_URL: &str = "amqp://guest:guest@127.0.0.1:5672";

/// What [`Broker::collect`] counts a message without a message id under.
pub const NO_ID: &str = "<no id>";

/// Run `fut` on a runtime shared by the tests of this process.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
    })
    .block_on(fut)
}

/// `<test>-<pid>-<n>`: unique on this machine.
pub fn unique(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{test}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Why a broker cannot be had, for a test's failure or a benchmark's skip.
fn missing<T>(test: &str, why: &str) -> Result<T, String> {
    Err(format!("{test}: {why}, so it cannot run"))
}

/// A RabbitMQ broker with the AMQP 1.0 plugin.
pub struct Broker {
    /// `amqp://user:password@host:port`, no path.
    pub base: String,
    /// `rabbitmqctl` with what reaches this broker's node (`-n`, `HOME`).
    ctl: Ctl,
    node: Option<RabbitNode>,
}

/// How to reach a broker with `rabbitmqctl`.
enum Ctl {
    /// A private node: `rabbitmqctl -n <node>` with `HOME=<dir>`.
    Node { name: String, home: PathBuf },
    /// The machine's broker, through the `rabbitmqctl` found on the machine.
    Machine(PathBuf),
}

impl Broker {
    /// The broker of this test run: `DRAIN_TEST_AMQP_URL` (`cargo xtask test` sets it
    /// to its private node, with `DRAIN_TEST_AMQP_NODE` and `DRAIN_TEST_AMQP_HOME` for
    /// `rabbitmqctl`), or else the machine's `amqp://guest:guest@127.0.0.1:5672`.
    ///
    /// # Panics
    /// When there is none, saying what to do ([`Broker::try_shared`] answers why).
    pub fn shared(test: &str) -> Broker {
        Broker::try_shared(test).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Broker::shared`], or why there is none (for a benchmark that reports
    /// itself skipped).
    pub fn try_shared(test: &str) -> Result<Broker, String> {
        let base = std::env::var("DRAIN_TEST_AMQP_URL").unwrap_or_else(|_| SHARED_URL.to_owned());
        let base = base.trim_end_matches('/').to_owned();
        let e = Endpoint::parse(&base).expect("DRAIN_TEST_AMQP_URL parses").endpoint;
        let addr: SocketAddr = format!("{}:{}", e.host, e.port).parse().expect("RabbitMQ on a literal IP");
        if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err() {
            let why = format!(
                "RabbitMQ does not answer on {addr}: run the tests with `cargo xtask test` (it starts a private node)"
            );
            return missing(test, &why);
        }
        if let (Ok(name), Some(home)) =
            (std::env::var("DRAIN_TEST_AMQP_NODE"), std::env::var_os("DRAIN_TEST_AMQP_HOME"))
        {
            return Ok(Broker { base, ctl: Ctl::Node { name, home: PathBuf::from(home) }, node: None });
        }
        let Some(ctl) = find("rabbitmqctl", &["/usr/sbin", "/usr/local/sbin", "/sbin"]) else {
            return missing(test, "rabbitmqctl is not installed: run `bash .ci/setup-services.sh`");
        };
        Ok(Broker { base, ctl: Ctl::Machine(ctl), node: None })
    }

    /// A private node `drain-test-…@localhost` of this test (test-servers'
    /// [`RabbitNode`], in a process group of its own), which it may stop and start.
    ///
    /// # Panics
    /// When `rabbitmq-server` is not installed, saying so, or the node does not start.
    pub fn private(test: &str) -> Broker {
        if !RabbitNode::installed() {
            panic!("{test}: rabbitmq-server is not installed, so it cannot run: run `bash .ci/setup-services.sh`");
        }
        let name = format!("{}@localhost", unique("drain-test"));
        let dir = std::env::temp_dir().join(unique("drain-e2e-rabbit"));
        let node = RabbitNode::start(&name, &dir, true).unwrap_or_else(|e| panic!("{test}: {e}"));
        let ctl = Ctl::Node { name: node.name().to_owned(), home: node.dir().to_path_buf() };
        Broker { base: node.url(), ctl, node: Some(node) }
    }

    /// Stop the broker application (every connection closes) for `down`, then start
    /// it again: durable queues and persistent messages survive.
    pub fn restart(&self, down: Duration) {
        let name = self.node.as_ref().expect("only a private node restarts").name().to_owned();
        self.ctl(&["stop_app"]);
        eprintln!("{name}: stopped");
        std::thread::sleep(down);
        self.ctl(&["start_app"]);
        self.ctl(&["await_startup", "--timeout", "60"]);
        eprintln!("{name}: started again");
    }

    /// Run `rabbitmqctl -q args…` against this broker; panics with its output when it fails.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.ctl_command(args).output().expect("run rabbitmqctl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "rabbitmqctl {args:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
        text
    }

    /// Run `rabbitmqctl -q args…`, quietly; whether it succeeded (for clean-ups).
    pub fn ctl_status(&self, args: &[&str]) -> bool {
        self.ctl_command(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    }

    fn ctl_command(&self, args: &[&str]) -> Command {
        let mut c = match &self.ctl {
            Ctl::Node { name, home } => test_servers::rabbitmqctl(name, home),
            Ctl::Machine(ctl) => {
                let mut c = Command::new(ctl);
                c.arg("-q").stdin(Stdio::null());
                c
            }
        };
        c.args(args);
        c
    }

    /// The `amqp://…/<queue>` URL the binary drains or submits to.
    pub fn url(&self, queue: &str) -> String {
        format!("{}/{queue}", self.base)
    }

    fn endpoint(&self, queue: &str) -> Endpoint {
        Endpoint::parse(&self.url(queue)).expect("queue URL parses").endpoint
    }

    /// `(ready, unacknowledged)` messages of `queue`.
    pub fn counts(&self, queue: &str) -> (u64, u64) {
        let out = self.ctl(&["list_queues", "name", "messages_ready", "messages_unacknowledged"]);
        out.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.first() == Some(&queue)).then(|| (num(f.get(1)), num(f.get(2))))
            })
            .unwrap_or_else(|| panic!("queue {queue} is not listed: {out}"))
    }

    /// Queues `<test>-source`, holding one message for each of `ids` and nothing
    /// else, and `<test>-target`, empty.
    pub fn source_and_target(&self, test: &str, ids: &[String]) -> (Queue<'_>, Queue<'_>) {
        let source = Queue::declare(self, &format!("{test}-source"));
        let target = Queue::declare(self, &format!("{test}-target"));
        self.feed(&source.name, ids);
        assert_eq!(self.counts(&source.name), (ids.len() as u64, 0), "{} fed", source.name);
        (source, target)
    }

    /// Put a persistent message with each id on `queue`, 64 submits in flight.
    pub fn feed(&self, queue: &str, ids: &[String]) {
        self.feed_messages(queue, &ids.iter().map(|id| message(id)).collect::<Vec<_>>());
    }

    /// Put each message on `queue` as it is (a message without an id, too), 64
    /// submits in flight, so their order on the queue is not guaranteed.
    pub fn feed_messages(&self, queue: &str, messages: &[Message]) {
        block_on(async {
            let feed = AmqpSubmitter::connect(self.endpoint(queue), SubmitterOptions::default()).await.expect("feed");
            let ctx = SubmitContext { queue: "feed", fence: None };
            stream::iter(messages)
                .map(|m| {
                    let (feed, ctx) = (&feed, &ctx);
                    async move { feed.submit(m, ctx).await.expect("feed submit") }
                })
                .buffer_unordered(64)
                .collect::<Vec<()>>()
                .await;
            feed.close().await.expect("close feed");
        });
    }

    /// Take everything off `queue`: message id -> times seen (`<no id>` for a
    /// message without one).
    pub fn collect(&self, queue: &str) -> BTreeMap<String, u32> {
        block_on(async {
            let options = SourceOptions { prefetch: 256, ..SourceOptions::default() };
            let source = AmqpSource::connect(self.endpoint(queue), options).await.expect("collector");
            let mut seen = BTreeMap::new();
            for _ in 0..10_000 {
                let got = source.receive(256, Duration::from_millis(500)).await.expect("collect");
                if got.is_empty() {
                    break;
                }
                for d in got {
                    let id = d.message.message_id.as_ref().map_or_else(|| NO_ID.to_owned(), ToString::to_string);
                    *seen.entry(id).or_insert(0) += 1;
                    source.complete(d.handle).await.expect("complete");
                }
            }
            source.close().await.expect("close collector");
            seen
        })
    }
}

/// A queue of one test, declared on creation and deleted on drop.
pub struct Queue<'a> {
    /// Its name.
    pub name: String,
    broker: &'a Broker,
}

impl<'a> Queue<'a> {
    /// Declare `<test>-<pid>-<n>`, durable, by attaching once to `/queue/<name>`.
    pub fn declare(broker: &'a Broker, test: &str) -> Queue<'a> {
        let name = unique(test);
        block_on(async {
            use fe2o3_amqp::types::messaging::{Target, TerminusDurability};
            use fe2o3_amqp::{Connection, Sender, Session};
            let mut conn = Connection::builder()
                .container_id(unique("declare"))
                .open(broker.base.as_str())
                .await
                .expect("connect to declare");
            let mut session = Session::begin(&mut conn).await.expect("session");
            // A durable terminus declares a durable queue (it survives a broker restart).
            let target = Target::builder().address(format!("/queue/{name}")).durable(TerminusDurability::Configuration);
            let sender = Sender::builder()
                .name(unique("declare"))
                .target(target.build())
                .attach(&mut session)
                .await
                .expect("declare");
            let bound = Duration::from_secs(5);
            let _ = tokio::time::timeout(bound, sender.detach()).await;
            let _ = tokio::time::timeout(bound, session.end()).await;
            let _ = tokio::time::timeout(bound, conn.close()).await;
        });
        Queue { name, broker }
    }
}

impl<'a> Queue<'a> {
    /// Declare `<test>-<pid>-<n>` as a durable quorum queue whose messages are
    /// dead-lettered to the queue `dead_letter` (through the default exchange) once
    /// they were delivered `delivery_limit` times: RabbitMQ's form of Service Bus'
    /// max delivery count. AMQP 1.0 cannot pass queue arguments, so this declares
    /// through `rabbitmqctl eval`.
    pub fn declare_quorum(broker: &'a Broker, test: &str, delivery_limit: u32, dead_letter: &str) -> Queue<'a> {
        let name = unique(test);
        let erlang = format!(
            "rabbit_amqqueue:declare(rabbit_misc:r(<<\"/\">>, queue, <<\"{name}\">>), true, false, \
             [{{<<\"x-queue-type\">>, longstr, <<\"quorum\">>}}, \
              {{<<\"x-delivery-limit\">>, long, {delivery_limit}}}, \
              {{<<\"x-dead-letter-exchange\">>, longstr, <<\"\">>}}, \
              {{<<\"x-dead-letter-routing-key\">>, longstr, <<\"{dead_letter}\">>}}], \
             none, <<\"drain-e2e\">>)."
        );
        let out = broker.ctl(&["eval", &erlang]);
        assert!(out.contains("quorum"), "declaring {name}: {out}");
        Queue { name, broker }
    }
}

impl Drop for Queue<'_> {
    /// Only the machine's broker is cleaned up: a private node's queues go with the
    /// node (`cargo xtask test`'s when the run ends), and each delete is a
    /// `rabbitmqctl` run, an Erlang VM booted for 0.7 s of CPU.
    fn drop(&mut self) {
        if matches!(self.broker.ctl, Ctl::Machine(_)) {
            let _ = self.broker.ctl_command(&["delete_queue", &self.name]).output();
        }
    }
}

fn num(field: Option<&&str>) -> u64 {
    field.and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// `program` in `dirs`, then in `PATH`.
fn find(program: &str, dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    dirs.iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .map(|d| d.join(program))
        .find(|p| Path::is_file(p))
}

/// `n` ids: `m-00000`, `m-00001`, …
#[must_use]
pub fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("m-{i:05}")).collect()
}

//! `test-servicebus`: the Service Bus test broker as a process, for people and for
//! checks from outside Rust (Microsoft's SDKs).
//!
//! ```text
//! test-servicebus --port P [--key KEY] [--config Config.json] [--queue NAME[:max-delivery=N,lock-secs=S,dedup-secs=D] …]
//! ```
//!
//! `--config` reads Microsoft's Service Bus emulator configuration file (queues,
//! topics, subscriptions and their rules); `--queue` adds queues to it.
//!
//! Prints exactly one line, `ready <connection string>`, on stdout once it listens
//! (port 0 picks a free one); logs go to stderr; SIGTERM or SIGINT stops it (exit 0).

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser;
use test_servicebus::{Broker, BrokerConfig, DEFAULT_KEY, parse_queue_spec, read_emulator_config};

/// An in-memory AMQP 1.0 broker that speaks Azure Service Bus, for tests.
#[derive(Debug, Parser)]
#[command(name = "test-servicebus", version)]
struct Args {
    /// TCP port on 127.0.0.1; 0 picks a free one.
    #[arg(long)]
    port: u16,
    /// The key of the policy RootManageSharedAccessKey (SAS tokens are signed with it).
    #[arg(long, default_value = DEFAULT_KEY)]
    key: String,
    /// A queue: NAME[:max-delivery=N,lock-secs=S,dedup-secs=D] (repeatable).
    /// Defaults: max-delivery=10, lock-secs=60, no duplicate detection.
    #[arg(long = "queue", required_unless_present = "config", value_parser = parse_queue_spec)]
    queues: Vec<(String, test_servicebus::QueueConfig)>,
    /// Microsoft's Service Bus emulator configuration file (Config.json).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .init();
    // Handlers first: a signal sent as soon as the ready line is read must stop us
    // cleanly, not kill us before they exist.
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|rt| rt.block_on(async { Signals::new() }).map(|s| (rt, s)));
    let (rt, mut signals) = match signals {
        Ok(s) => s,
        Err(e) => {
            eprintln!("test-servicebus: cannot listen for signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut config = BrokerConfig { port: args.port, key: args.key, queues: args.queues, ..BrokerConfig::default() };
    if let Some(path) = &args.config {
        let read = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|json| read_emulator_config(&json, config).map_err(|e| format!("{}: {e}", path.display())));
        config = match read {
            Ok(c) => c,
            Err(e) => {
                eprintln!("test-servicebus: {e}");
                return ExitCode::FAILURE;
            }
        };
    }
    let broker = match Broker::start(config) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("test-servicebus: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(queues = ?broker.queues(), topics = ?broker.topics(), "serving");
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "ready {}", broker.connection_string()).and_then(|()| stdout.flush()).is_err() {
        return ExitCode::SUCCESS; // nobody listens for the ready line: nothing to serve
    }
    drop(stdout);
    let name = rt.block_on(signals.next());
    tracing::info!("{name}: stopping");
    drop(broker);
    ExitCode::SUCCESS
}

/// SIGTERM and SIGINT, listened for from creation on.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

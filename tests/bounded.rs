//! Bounded waits through the `drain` binary (docs/reliability.md): a tick on a frozen
//! Redis pays one timeout and receives nothing it could not claim; a broker that is
//! down when `drain run` starts is retried, each attempt logged, until it answers;
//! only a permanent error (authentication, a port that is not AMQP) exits 2.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use drain_e2e::rabbit::{Broker, Queue};
use drain_e2e::{Running, drain, drain_bin, free_port, output, redis};

/// The longest one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `drain run --once` with the lease and the claim on, Redis frozen (SIGSTOP) before
/// it starts: the connect times out, the acquire fails open, and with the store known
/// down for the rest of the tick nothing is received (every message would only be
/// abandoned, a delivery each) and no further call waits out a timeout. Before, the
/// tick received the demo's burst, waited out a claim timeout and abandoned it all.
#[test]
fn a_tick_on_a_frozen_redis_receives_nothing() {
    let Some(mut server) = redis() else { return };
    drain_bin();
    server.pause();
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", server.url())
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "16");
    let started = Instant::now();
    let out = output(cmd, LIMIT);
    let took = started.elapsed();
    server.resume();
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    eprintln!("a tick on a frozen Redis took {:.1} s: {r}", took.as_secs_f64());
    assert_eq!(r["lease"], "fail_open", "{r}");
    assert_eq!(r["received"], 0, "nothing received that could not be claimed: {r}");
    assert_eq!(r["claim_store"], "failed", "{r}");
}

/// A TCP forwarder from a local port to `upstream`, until dropped: stands for a
/// broker that comes up after `drain` started.
struct Forwarder {
    stop: Arc<AtomicBool>,
}

impl Forwarder {
    fn start(port: u16, upstream: String) -> Forwarder {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind the forwarder");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let running = stop.clone();
        thread::spawn(move || {
            while !running.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).expect("blocking");
                        let server = TcpStream::connect(&upstream).expect("the broker");
                        pipe(client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                        pipe(server, client);
                    }
                    Err(_) => thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Forwarder { stop }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Copy `from` to `to` on a thread until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// The broker is not there when `drain run --once` starts: each failed attempt is a
/// warning, the next waits longer (jittered), and once the broker answers the tick
/// runs and exits 0. Before, a broker down at start was fatal (exit 2).
#[test]
fn a_broker_down_at_start_is_retried_until_it_answers() {
    let Some(broker) = Broker::shared("bounded") else { return };
    let source = Queue::declare(&broker, "bounded-source");
    broker.feed(&source.name, &["m-1".to_owned(), "m-2".to_owned()]);
    let port = free_port();
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_SOURCE_URL", format!("amqp://guest:guest@127.0.0.1:{port}/{}", source.name))
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "500");
    let mut run = Running::spawn(cmd);
    for attempt in ["attempt 1 failed", "attempt 2 failed"] {
        assert!(run.wait_for(attempt, Duration::from_secs(20)), "{attempt}: {}", run.log());
    }
    let upstream = broker.base.rsplit('@').next().expect("host:port").to_owned();
    let _broker_up = Forwarder::start(port, upstream);
    let status = run.wait_exit(LIMIT);
    assert!(status.is_some_and(|s| s.success()), "exit 0 once the broker answers: {status:?}\n{}", run.log());
    assert!(run.count("connected to receive from DRAIN_SOURCE_URL") == 1, "{}", run.log());
    assert_eq!(broker.counts(&source.name), (0, 0), "the tick drained the queue");
}

/// A port that answers every connection with an HTTP error: a server, but not AMQP.
fn not_amqp() -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    let stop = Arc::new(AtomicBool::new(false));
    let running = stop.clone();
    thread::spawn(move || {
        while !running.load(Ordering::Acquire) {
            match listener.accept() {
                Ok((mut client, _)) => {
                    let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (port, stop)
}

/// Errors that retrying cannot fix exit 2 at once, with one line and no retry: a
/// wrong password, and a port that does not speak AMQP.
#[test]
fn permanent_broker_errors_exit_2_without_retrying() {
    let Some(broker) = Broker::shared("bounded") else { return };
    let source = Queue::declare(&broker, "bounded-permanent");
    let upstream = broker.base.rsplit('@').next().expect("host:port");
    let (http, stop) = not_amqp();
    for url in [
        format!("amqp://guest:wrong-password@{upstream}/{}", source.name),
        format!("amqp://guest:guest@127.0.0.1:{http}/{}", source.name),
    ] {
        let mut cmd = drain();
        cmd.args(["run", "--once"]).env("DRAIN_SOURCE_URL", &url).env("DRAIN_LOG", "info");
        let out = output(cmd, LIMIT);
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(2), "{url}: {shown}");
        assert!(!shown.contains("retrying"), "{url}: no retry: {shown}");
        assert!(!shown.contains("wrong-password"), "the secret is masked: {shown}");
    }
    stop.store(true, Ordering::Release);
}

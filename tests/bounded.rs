//! Bounded waits through the `drain` binary (docs/reliability.md): a tick on a frozen
//! Redis pays one timeout and receives nothing it could not claim; `--once` releases
//! what its tick's timed-out claim call took late before it exits, and keeps nothing
//! to release when every call was refused before it was sent; a broker that is
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
    let mut server = redis();
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

/// `drain run --once` whose tick's claim call reaches Redis late: held on the way for
/// 1.2 s, past the store's 1 s response timeout, then run all the same (as a frozen
/// server runs it when it thaws). The tick gives its messages back; before exiting,
/// the process probes the store (the probe queues behind the late call; should it
/// time out, the next probe comes after the late call went on) and releases
/// the claims that call took, so none of those messages stays held for the pending TTL
/// (300 s), given back by every run meanwhile. Before, `--once` exited right after the
/// tick and the late call left every claim of the batch pending.
#[test]
fn a_once_tick_releases_the_claims_its_timed_out_call_took_late() {
    let server = redis();
    drain_bin();
    let proxy = LateClaims::start(format!("127.0.0.1:{}", server.port()), Duration::from_millis(1200));
    let out = output(once_through(&proxy), LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(r["claim_store"], "failed", "the claim call timed out: {r}");
    assert!(r["received"].as_u64().is_some_and(|n| n > 0), "the tick received the demo's burst: {r}");
    // Whatever the process did, the late call has run once Redis answered it.
    assert!(proxy.late_call_answered(LIMIT), "the held claim call reached Redis and was answered");
    let pending = pending_claims(&server);
    assert_eq!(pending, 0, "claims the late call took are left pending:\n{}", text(&out));
    assert!(
        text(&out).contains("claims a timed-out call may have taken after its tick gave the messages back"),
        "{}",
        text(&out)
    );
}

/// The same, with Redis frozen (SIGSTOP) from the moment the claim call is held: the
/// store never answers, so `--once` probes again for its 10 s, says in one warning that
/// the claims stay pending until the pending TTL, and exits 0: bounded, not hung.
#[test]
fn a_once_tick_stops_probing_a_store_that_stays_silent() {
    let mut server = redis();
    drain_bin();
    let proxy = LateClaims::start(format!("127.0.0.1:{}", server.port()), Duration::from_secs(2));
    let mut run = Running::spawn(once_through(&proxy));
    assert!(proxy.holding_within(LIMIT), "the tick's claim call reached the proxy");
    server.pause();
    let status = run.wait_exit(LIMIT);
    server.resume();
    assert!(status.is_some_and(|s| s.success()), "exit 0 after the bounded probing: {status:?}\n{}", run.log());
    assert!(run.count("probing again to release") >= 2, "{}", run.log());
    assert_eq!(run.count("stay pending until the pending TTL"), 1, "{}", run.log());
    assert_eq!(run.count("released"), 0, "{}", run.log());
}

/// `drain run --once` with the claim on and nothing listening on Redis's port: every
/// store call is refused before it is sent, so no claim can be taken late and
/// nothing is kept to release. The tick gives its messages back and the process
/// exits at once, without probing or warning about pending claims. Before, a refused
/// connection counted as a call that may have run: `--once` probed for 10 s and then
/// warned that claims nobody could have taken stayed pending.
#[test]
fn a_once_tick_on_a_refused_store_keeps_no_claims_to_release() {
    drain_bin();
    let port = free_port();
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", format!("redis://127.0.0.1:{port}"))
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "off")
        .env("DRAIN_LOG", "info");
    let out = output(cmd, LIMIT);
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(r["claim_store"], "failed", "{r}");
    assert_eq!(r["submitted"], 0, "nothing submitted without a claim: {r}");
    let log = text(&out);
    assert!(log.contains("refused the connection"), "{log}");
    assert!(!log.contains("probing again to release"), "nothing to release:\n{log}");
    assert!(!log.contains("stay pending"), "no claim can be pending:\n{log}");
}

/// `drain run --once` on the demo queue with the claim on and the lease off (so the
/// tick's first store call is its claim call), its Redis through `proxy`.
fn once_through(proxy: &LateClaims) -> std::process::Command {
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", format!("redis://127.0.0.1:{}", proxy.port))
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "off")
        .env("DRAIN_LOG", "info");
    cmd
}

/// How many keys of `server` hold a `pending:` claim.
fn pending_claims(server: &drain_e2e::RedisServer) -> usize {
    let Ok(test_servers::Reply::Array(Some(keys))) = server.command(&["KEYS", "*"]) else { panic!("KEYS") };
    keys.iter()
        .filter_map(|k| match k {
            test_servers::Reply::Bulk(Some(k)) => Some(String::from_utf8_lossy(k).into_owned()),
            _ => None,
        })
        .filter(|k| {
            matches!(server.command(&["GET", k]), Ok(test_servers::Reply::Bulk(Some(v))) if v.starts_with(b"pending:"))
        })
        .count()
}

/// A TCP proxy to Redis that holds the first bytes a client sends naming a message
/// claim key (`:msg:{`), and what follows them on that connection, for `hold` before
/// passing them on: a claim call that reaches the server after its caller timed out.
/// The connection to the server stays open until the server has answered and closed
/// it, so the late call runs even when the client is gone.
struct LateClaims {
    port: u16,
    /// Set when the hold begins.
    holding: Arc<AtomicBool>,
    answered: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl LateClaims {
    fn start(upstream: String, hold: Duration) -> LateClaims {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("address").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let (stop, answered) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let holding = Arc::new(AtomicBool::new(false));
        let (running, late, holds) = (stop.clone(), answered.clone(), holding.clone());
        thread::spawn(move || {
            while !running.load(Ordering::Acquire) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                };
                client.set_nonblocking(false).expect("blocking");
                let server = TcpStream::connect(&upstream).expect("redis");
                let held = Arc::new(AtomicBool::new(false));
                let up = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                let (holds, held_up, held_down, late) = (holds.clone(), held.clone(), held, late.clone());
                thread::spawn(move || hold_first_claim(up, &holds, &held_up, hold));
                thread::spawn(move || {
                    let (mut from, mut to) = (server, client);
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if held_down.load(Ordering::Acquire) {
                            late.store(true, Ordering::Release);
                        }
                        // The client may be gone: keep reading what the server answers.
                        let _ = to.write_all(&buf[..n]);
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        });
        LateClaims { port, holding, answered, stop }
    }

    /// Wait (up to `within`) until the hold began.
    fn holding_within(&self, within: Duration) -> bool {
        set_within(&self.holding, within)
    }

    /// Wait (up to `within`) until the server answered what was held.
    fn late_call_answered(&self, within: Duration) -> bool {
        set_within(&self.answered, within)
    }
}

impl Drop for LateClaims {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Wait (up to `within`) until `flag` is set.
fn set_within(flag: &AtomicBool, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if flag.load(Ordering::Acquire) {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Client to server: the first chunk (of any connection; `holding` is set when it is
/// found) that names a claim key waits `hold`; `held` is set once it went on. The
/// search spans the end of the chunk before, so a key split between two reads is
/// found too.
fn hold_first_claim(
    (mut from, mut to): (TcpStream, TcpStream),
    holding: &AtomicBool,
    held: &AtomicBool,
    hold: Duration,
) {
    const NEEDLE: &[u8] = b":msg:{";
    let mut buf = [0u8; 16 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
        let found = tail.windows(NEEDLE.len()).any(|w| w == NEEDLE);
        tail.drain(..tail.len().saturating_sub(NEEDLE.len()));
        let first = found && !holding.swap(true, Ordering::AcqRel);
        if first {
            thread::sleep(hold);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if first {
            held.store(true, Ordering::Release);
        }
    }
    let _ = to.shutdown(Shutdown::Write);
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
    let broker = Broker::shared("bounded");
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
    let broker = Broker::shared("bounded");
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

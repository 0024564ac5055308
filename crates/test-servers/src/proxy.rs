//! A loopback TCP proxy whose traffic a test can hold back: while held, what a
//! client sends is taken and kept, not forwarded, and nothing it waits for comes
//! back; released, what waited goes through first.
//!
//! It is the outage of a store tested on a server others use: connect the store
//! under test through the proxy, and [`Proxy::hold`] freezes that store's
//! connections alone, as SIGSTOP freezes a private server (its calls time out, what
//! it sent runs when [`Proxy::release`] lets it through, new connections hang), while
//! the server goes on serving everyone else. drain-core's `testkit::OutageBy` makes
//! a contract suite's `Outage` of it: `OutageBy::new(|| proxy.hold(), || proxy.release(),
//! &clock, Duration::from_millis(100))`.
//!
//! The end-to-end tests also put one between a `drain` process and its target, to
//! stop the process at a moment when everything it sent has left it: once held, the
//! test waits until the client has sent nothing for a while ([`Proxy::wait_quiet`]).
//! It also stands for a managed address that moves to another node on a failover
//! ([`Proxy::retarget`]). Threads, not processes: they end within 50 ms of the
//! proxy's drop.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a blocked read or write waits before the thread looks at its flags.
const POLL: Duration = Duration::from_millis(50);

/// A proxy from a free loopback port to one upstream address.
pub struct Proxy {
    port: u16,
    flags: Arc<Flags>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

#[derive(Default)]
struct Flags {
    held: AtomicBool,
    stop: AtomicBool,
    /// Bytes read from clients so far.
    sent: AtomicU64,
    /// Where new connections go.
    upstream: Mutex<Option<SocketAddr>>,
    /// Raised by `retarget`: a pump of an older generation closes its connection.
    generation: AtomicUsize,
}

impl Proxy {
    /// Listen on a free loopback port and forward every connection to `upstream`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    #[must_use]
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let port = listener.local_addr().expect("the proxy's address").port();
        let flags = Arc::new(Flags { upstream: Mutex::new(Some(upstream)), ..Flags::default() });
        let threads = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (flags, threads) = (flags.clone(), threads.clone());
            std::thread::spawn(move || accept(&listener, &flags, &threads))
        };
        threads.lock().unwrap_or_else(PoisonError::into_inner).push(accept);
        Proxy { port, flags, threads }
    }

    /// The port to connect to instead of the upstream's.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stop forwarding, both ways.
    pub fn hold(&self) {
        self.flags.held.store(true, Ordering::SeqCst);
    }

    /// Wait until clients have sent nothing for `quiet` (within 30 s): while held,
    /// that means whatever a client had started to send has left it.
    ///
    /// # Panics
    /// When clients still send 30 s after it was called.
    pub fn wait_quiet(&self, quiet: Duration) {
        let bound = Instant::now() + Duration::from_secs(30);
        let (mut last, mut since) = (self.flags.sent.load(Ordering::SeqCst), Instant::now());
        while since.elapsed() < quiet {
            assert!(Instant::now() < bound, "clients still sending 30 s after the proxy was held");
            std::thread::sleep(Duration::from_millis(5));
            let now = self.flags.sent.load(Ordering::SeqCst);
            if now != last {
                (last, since) = (now, Instant::now());
            }
        }
    }

    /// Forward again, what waited first.
    pub fn release(&self) {
        self.flags.held.store(false, Ordering::SeqCst);
    }

    /// The address moves: every open connection is closed (as a failover closes
    /// them), and new ones go to `upstream`.
    pub fn retarget(&self, upstream: SocketAddr) {
        *self.flags.upstream.lock().unwrap_or_else(PoisonError::into_inner) = Some(upstream);
        self.flags.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flags.stop.store(true, Ordering::SeqCst);
        // Twice at most: the accept thread, once joined, starts no more.
        for _ in 0..2 {
            let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

fn accept(listener: &TcpListener, flags: &Arc<Flags>, threads: &Mutex<Vec<JoinHandle<()>>>) {
    while !flags.stop.load(Ordering::SeqCst) {
        let Ok((client, _)) = listener.accept() else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        // Read before the upstream: a retarget in between closes this connection.
        let generation = flags.generation.load(Ordering::SeqCst);
        let upstream = *flags.upstream.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(upstream) = upstream else { continue };
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else { continue };
        let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else { continue };
        let mut threads = threads.lock().unwrap_or_else(PoisonError::into_inner);
        for (from, to, upstream) in [(client, server, true), (server2, client2, false)] {
            let flags = flags.clone();
            threads.push(std::thread::spawn(move || pump(from, to, upstream, generation, &flags)));
        }
    }
}

/// Copy `from` to `to` until either ends, the proxy stops or is retargeted (a newer
/// `generation`). While held, what an `upstream` pump (client to server) reads is
/// kept for later, counted in `flags.sent`; the other reads nothing, and keeps what
/// a read begun before the hold brought.
fn pump(mut from: TcpStream, mut to: TcpStream, upstream: bool, generation: usize, flags: &Flags) {
    let ready =
        from.set_nonblocking(false).and(from.set_read_timeout(Some(POLL))).and(to.set_write_timeout(Some(POLL)));
    let mut buf = vec![0; 64 * 1024];
    let mut kept = Vec::new();
    while ready.is_ok() && !flags.stop.load(Ordering::SeqCst) && flags.generation.load(Ordering::SeqCst) == generation {
        let held = flags.held.load(Ordering::SeqCst);
        if held && !upstream {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        if !held && !kept.is_empty() && !write_all(&mut to, &std::mem::take(&mut kept), flags) {
            break;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if upstream {
                    flags.sent.fetch_add(n as u64, Ordering::SeqCst);
                }
                // Held again since the read began: what arrived after `hold`
                // returned waits too, so an outage begins at once.
                kept.extend_from_slice(&buf[..n]);
                if !flags.held.load(Ordering::SeqCst) && !write_all(&mut to, &std::mem::take(&mut kept), flags) {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => break,
        }
    }
    // A side that closed while held still gets its last bytes through, not dropped.
    if !kept.is_empty() {
        write_all(&mut to, &kept, flags);
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Write all of `data`, retrying timed-out writes until the proxy stops.
fn write_all(to: &mut TcpStream, mut data: &[u8], flags: &Flags) -> bool {
    while !data.is_empty() {
        match to.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if flags.stop.load(Ordering::SeqCst) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

//! The fault run: holders compete for one lease on a managed store behind a loopback
//! proxy standing for the one address a managed service gives (Redis: a primary and
//! a replica; PostgreSQL: a server and, for its failover, a copy of its data standing
//! for an asynchronous standby) and write, at every step under the lease, to a
//! resource on a Redis of its own: once through `fenced_write` (checked) and once
//! plain (`RPUSH`, unchecked). A nemesis runs a schedule of faults meanwhile:
//!
//! | fault | what it does |
//! |---|---|
//! | `failover` | Redis: the replica stops receiving, the primary hands out more fences, is SIGKILLed, and the address moves to the replica. PostgreSQL: the data is copied (the standby's state), more fences are handed out, the server is SIGKILLed and comes back on the copy. Either way the last writes are lost |
//! | `empty-restart` | Redis: the primary restarts with nothing (no persistence); PostgreSQL: SIGKILL and crash recovery |
//! | `frozen-holder` | a holder stops between its lease check and its write for twice the TTL (SIGSTOP of a process) |
//! | `partition` | the proxy holds all traffic for twice the TTL |
//! | `slow-replies` | the primary is SIGSTOPped for 400 ms |
//!
//! Every turn (holder, token, fence) and every write (fence, interval, answer) is
//! recorded, the resource is read back, and `check.rs` judges the history. Holders
//! are threads with a runtime and connections of their own, as processes would be.
//! The same run on a hand-written lease store (`SET NX` and `INCR`, the code drain
//! replaces) is the checker's negative control.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use adapter_postgres::{PostgresConfig, PostgresStore};
use adapter_redis::{FencedWrite, RedisConfig, RedisStore};
use drain_core::LeaseToken;
use drain_core::guard::{Guarded, LeaseGuard, LeaseHandle};
use drain_core::ports::{Fence, FenceVerdict, LeaseName, LeaseStore};
use drain_e2e::TokioClock;
use drain_e2e::proxy::Proxy;
use test_servers::{PostgresServer, RedisServer, Reply};

use super::broken::CounterFences;
use super::check::{Attempt, Fault, FaultRun, History, Outcome, Turn};

/// Holders competing for the lease.
pub(crate) const HOLDERS: usize = 4;
/// The lease's time to live.
pub(crate) const TTL: Duration = Duration::from_secs(1);
/// Steps of one turn, and the wait between two.
const STEPS: usize = 10;
const GAP: Duration = Duration::from_millis(15);
/// After a turn or a skip, before the holder tries again.
const REST: Duration = Duration::from_millis(30);
/// Bound on one write.
const WRITE_BOUND: Duration = Duration::from_secs(3);
/// After each fault, before the next: the run must write again meanwhile.
const SETTLE: Duration = Duration::from_secs(3);
/// The resource's keys on its own Redis.
const FENCED: &str = "nemesis";
const PLAIN: &str = "nemesis:plain";

/// Which lease store the holders use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    /// adapter-redis, as drain ships it.
    Drain,
    /// adapter-postgres, as drain ships it.
    Postgres,
    /// A hand-written `SET NX` + `INCR` store on Redis: the negative control.
    CounterFences,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the holders and the nemesis share.
struct Run {
    origin: Instant,
    stop: AtomicBool,
    next_id: AtomicU64,
    turns: Mutex<Vec<Turn>>,
    attempts: Mutex<Vec<Attempt>>,
    /// A freeze the nemesis asked for: the next holder at a step takes it (its
    /// fence goes here) and stays frozen until the nemesis clears `frozen`.
    freeze: AtomicBool,
    frozen: Mutex<Option<u64>>,
}

impl Run {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// The managed store behind the proxy.
enum Managed {
    Redis { primary: RedisServer, replica: RedisServer },
    Postgres(PostgresServer),
}

/// The servers: the managed store, the proxy for its address, the resource's Redis.
pub(crate) struct Servers {
    managed: Managed,
    pub(crate) proxy: Proxy,
    resource: RedisServer,
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn ok(server: &RedisServer, args: &[&str]) {
    let reply = server.command(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(!matches!(reply, Reply::Error(_)), "{args:?}: {reply:?}");
}

impl Servers {
    pub(crate) fn start(store: Store) -> Servers {
        let managed = if store == Store::Postgres {
            Managed::Postgres(PostgresServer::start())
        } else {
            let primary = RedisServer::start();
            let replica = RedisServer::start();
            replica.replicate_from(&primary);
            Managed::Redis { primary, replica }
        };
        let resource = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let port = match &managed {
            Managed::Redis { primary, .. } => primary.port(),
            Managed::Postgres(pg) => pg.port(),
        };
        let proxy = Proxy::start(addr(port));
        Servers { managed, proxy, resource }
    }

    /// The Redis primary the proxy forwards to now (`None` on PostgreSQL).
    pub(crate) fn primary(&self) -> Option<&RedisServer> {
        match &self.managed {
            Managed::Redis { primary, .. } => Some(primary),
            Managed::Postgres(_) => None,
        }
    }

    /// The PostgreSQL server behind the proxy (`None` on Redis).
    pub(crate) fn postgres(&self) -> Option<&PostgresServer> {
        match &self.managed {
            Managed::Postgres(pg) => Some(pg),
            Managed::Redis { .. } => None,
        }
    }

    /// The lease store's URL, through the proxy.
    pub(crate) fn lease_url(&self) -> String {
        match &self.managed {
            Managed::Redis { .. } => format!("redis://127.0.0.1:{}", self.proxy.port()),
            Managed::Postgres(_) => format!("postgres://postgres@127.0.0.1:{}/postgres", self.proxy.port()),
        }
    }

    /// What the failover keeps (the replica stops receiving; the data is copied),
    /// then at least one acquire (`acquired` waits for it) that the failover loses
    /// with the primary: SIGKILLed, the address moved to the replica (the old
    /// primary comes back empty as the new replica), or the server back on the copy.
    pub(crate) fn failover(&mut self, acquired: impl FnOnce()) {
        match &mut self.managed {
            Managed::Redis { primary, replica } => {
                ok(replica, &["REPLICAOF", "NO", "ONE"]);
                acquired();
                primary.kill();
                self.proxy.retarget(addr(replica.port()));
                std::mem::swap(primary, replica);
                replica.restart();
                replica.replicate_from(primary);
            }
            Managed::Postgres(pg) => {
                pg.copy_data();
                acquired();
                pg.revert_to_copy();
            }
        }
    }

    /// Redis: a restart with nothing; PostgreSQL: a crash restart (its log keeps
    /// what was committed).
    pub(crate) fn restart(&mut self) {
        match &mut self.managed {
            Managed::Redis { primary, .. } => primary.restart(),
            Managed::Postgres(pg) => pg.restart(),
        }
    }

    pub(crate) fn pause(&mut self, on: bool) {
        match (&mut self.managed, on) {
            (Managed::Redis { primary, .. }, true) => primary.pause(),
            (Managed::Redis { primary, .. }, false) => primary.resume(),
            (Managed::Postgres(pg), true) => pg.pause(),
            (Managed::Postgres(pg), false) => pg.resume(),
        }
    }
}

/// One write, recorded before it is sent and when it is answered.
async fn attempt(run: &Run, writes: &RedisStore, resource: usize, holder: usize, fence: &Fence) {
    let id = run.next_id.fetch_add(1, Ordering::SeqCst);
    let at = {
        let mut attempts = lock(&run.attempts);
        attempts.push(Attempt { resource, holder, fence: fence.number(), id, start: run.now(), end: None });
        attempts.len() - 1
    };
    let (key, number) = (id.to_string(), fence.number().to_string());
    let write = async {
        if resource == 0 {
            let fields: &[(&[u8], &[u8])] = &[(key.as_bytes(), number.as_bytes())];
            match writes.fenced_write(FENCED, fence, FencedWrite::HSet { fields }).await {
                Ok(FenceVerdict::Accepted) => Outcome::Accepted,
                Ok(FenceVerdict::Stale { .. }) => Outcome::Stale,
                Err(_) => Outcome::Failed,
            }
        } else {
            match writes.push_items(&[(PLAIN.to_owned(), vec![key.clone()])]).await {
                Ok(()) => Outcome::Accepted,
                Err(_) => Outcome::Failed,
            }
        }
    };
    let outcome = tokio::time::timeout(WRITE_BOUND, write).await.unwrap_or(Outcome::Failed);
    lock(&run.attempts)[at].end = Some((run.now(), outcome));
}

/// The work under the lease: steps that each write both resources.
async fn turn(run: &Run, writes: &RedisStore, holder: usize, token: &LeaseToken, held: LeaseHandle) {
    let fence = held.fence().cloned().expect("an enforced lease has a fence");
    lock(&run.turns).push(Turn { holder, token: token.as_str().to_owned(), fence: fence.number(), at: run.now() });
    for _ in 0..STEPS {
        if held.check().is_err() || run.stop.load(Ordering::SeqCst) {
            return;
        }
        // A frozen process: nothing on its side can stop the write after the check.
        if run.freeze.swap(false, Ordering::SeqCst) {
            *lock(&run.frozen) = Some(fence.number());
            let bound = Instant::now() + Duration::from_secs(20);
            while lock(&run.frozen).is_some() && Instant::now() < bound {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Both at once: a holder that thawed past its deadline is stopped at its next
        // await, so whatever one poll sends is what a frozen process would send.
        futures::join!(attempt(run, writes, 0, holder, &fence), attempt(run, writes, 1, holder, &fence));
        tokio::time::sleep(GAP).await;
    }
}

/// A holder: take turns under the lease until the run stops.
async fn hold(run: Arc<Run>, store: Store, lease_url: String, lease_port: u16, resource_url: String, holder: usize) {
    let timeouts = (Duration::from_millis(300), Duration::from_millis(300));
    let leases: Box<dyn LeaseStore> = match store {
        Store::Drain => {
            let config = RedisConfig::new(lease_url).timeouts(timeouts.0, timeouts.1);
            Box::new(RedisStore::connect(config).await.expect("the lease store"))
        }
        Store::Postgres => {
            // The schema was made before the holders start; a short statement timeout.
            let config =
                PostgresConfig::new(lease_url).timeouts(Duration::from_millis(500), Duration::from_millis(500));
            Box::new(connect_postgres(config).await)
        }
        Store::CounterFences => Box::new(CounterFences::new(lease_port, timeouts.1)),
    };
    let writes = RedisStore::connect(RedisConfig::new(resource_url).timeouts(timeouts.0, Duration::from_secs(1)))
        .await
        .expect("the resource's store");
    let clock = TokioClock::new();
    let lease = LeaseName::job("nemesis");
    let mut n: u64 = 0;
    while !run.stop.load(Ordering::SeqCst) {
        n += 1;
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&n.to_be_bytes());
        bytes[8] = u8::try_from(holder).unwrap_or(u8::MAX);
        let token = LeaseToken::from_random(&format!("holder-{holder}"), bytes);
        let guard = LeaseGuard::new(&*leases, &clock, lease.clone(), TTL).tell_on_loss();
        let _: Guarded<()> = guard.run(&token, |held| turn(&run, &writes, holder, &token, held)).await;
        tokio::time::sleep(REST + Duration::from_millis(5 * holder as u64)).await;
    }
}

/// A PostgreSQL store, retried for a few seconds (the first connect of many holders
/// at once may find the server busy).
async fn connect_postgres(config: PostgresConfig) -> PostgresStore {
    drain_e2e::answered(50, Duration::from_millis(100), || PostgresStore::connect(config.clone())).await
}

/// Run `faults` in order, each once, on `store`; the recorded history.
pub(crate) fn run(store: Store, faults: &[Fault]) -> History {
    let mut servers = Servers::start(store);
    if store == Store::Postgres {
        // The schema, once, before the holders race to make it.
        let url = servers.lease_url();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(connect_postgres(PostgresConfig::new(url)));
    }
    let run = Arc::new(Run {
        origin: Instant::now(),
        stop: AtomicBool::new(false),
        next_id: AtomicU64::new(1),
        turns: Mutex::new(Vec::new()),
        attempts: Mutex::new(Vec::new()),
        freeze: AtomicBool::new(false),
        frozen: Mutex::new(None),
    });
    let threads: Vec<JoinHandle<()>> = (0..HOLDERS)
        .map(|holder| {
            let (run, lease_url, port, url) =
                (run.clone(), servers.lease_url(), servers.proxy.port(), servers.resource.url());
            std::thread::Builder::new()
                .name(format!("holder-{holder}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    rt.block_on(hold(run, store, lease_url, port, url, holder));
                })
                .expect("a holder thread")
        })
        .collect();
    let mut runs = Vec::new();
    std::thread::sleep(SETTLE);
    for &fault in faults {
        let from = run.now();
        match fault {
            Fault::Failover => servers.failover(|| {
                let before = lock(&run.turns).len();
                let bound = Instant::now() + Duration::from_secs(10);
                while lock(&run.turns).len() == before && Instant::now() < bound {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }),
            Fault::EmptyRestart => servers.restart(),
            Fault::FrozenHolder => {
                // Frozen for at least twice the TTL, and until another holder's write
                // with a larger fence was accepted: what it sends on thawing is stale.
                run.freeze.store(true, Ordering::SeqCst);
                let bound = Instant::now() + Duration::from_secs(15);
                let newer = |fence: u64| {
                    let accepted = |a: &&Attempt| matches!(a.end, Some((_, Outcome::Accepted)));
                    lock(&run.attempts).iter().filter(|a| a.resource == 0 && a.fence > fence).any(|a| accepted(&a))
                };
                loop {
                    let frozen = *lock(&run.frozen);
                    let thaw = frozen.is_some_and(|f| run.now() >= from + TTL * 2 && newer(f));
                    if thaw || Instant::now() >= bound {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                lock(&run.frozen).take();
            }
            Fault::Partition => {
                servers.proxy.hold();
                std::thread::sleep(TTL * 2);
                servers.proxy.release();
            }
            Fault::SlowReplies => {
                servers.pause(true);
                std::thread::sleep(Duration::from_millis(400));
                servers.pause(false);
            }
        }
        runs.push(FaultRun { fault, from, to: run.now() });
        std::thread::sleep(SETTLE);
    }
    run.stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("a holder panicked");
    }
    let landed = landed(&servers.resource);
    let turns = lock(&run.turns).clone();
    let attempts = lock(&run.attempts).clone();
    History { turns, attempts, faults: runs, landed, ttl: TTL, took: run.now() }
}

/// What the resource holds: the fenced writes' ids (no order), the plain ones in order.
fn landed(resource: &RedisServer) -> [Vec<u64>; 2] {
    let read = |args: &[&str]| -> Vec<u64> {
        let Ok(Reply::Array(Some(items))) = resource.command(args) else { panic!("reading {args:?}") };
        items
            .into_iter()
            .filter_map(|item| match item {
                Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).parse().ok(),
                _ => None,
            })
            .collect()
    };
    [read(&["HKEYS", FENCED]), read(&["LRANGE", PLAIN, "0", "-1"])]
}

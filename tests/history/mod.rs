//! The history of holders competing for one lease through drain-core's `LeaseGuard`
//! and writing to resources, some fenced and some not, while the test pauses holders
//! past the lease's TTL, restarts the store and freezes it for less than the TTL. Every
//! write is recorded (holder, fence, the real-time interval its writer saw, the
//! answer); at the end the resources are read back and `check.rs` says which accepted
//! writes a fence check must have refused. Generic over the store (`Backend`):
//! `redis.rs` and `postgres.rs` give the servers and the resources.
//!
//! A holder is a thread with a Tokio runtime of its own and its own connections, as a
//! process would have; blocking that thread stops everything the holder does (its
//! work, its renewals, its connections), as SIGSTOP would. Two kinds of pause:
//!
//! * **between a check and its write**: the work blocks right after `LeaseHandle::check`
//!   answered that the lease is ours, then sends its writes. Nothing on the holder's
//!   side can stop that write; the resource's fence check must refuse it.
//! * **at an await point**: a task beside the work blocks the thread while the work
//!   waits between two steps. When it thaws, the guard checks the deadline before it
//!   polls the work again, so the holder takes no further step: none of its writes
//!   may start after the thaw.
//!
//! Half the holders have the guard drop their work on loss, half are told and stop
//! by themselves.

pub(crate) mod check;
pub(crate) mod postgres;
pub(crate) mod redis;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use drain_core::LeaseToken;
use drain_core::PortError;
use drain_core::guard::{Guarded, LeaseGuard, LeaseHandle};
use drain_core::ports::{Fence, LeaseName, LeaseStore};
use drain_e2e::TokioClock;
use futures::future::join_all;

use check::{Violation, Write};

/// Holders competing for the lease.
const HOLDERS: usize = 4;
/// The lease's time to live (the guard's deadline is 900 ms after the last confirmed
/// renewal was sent).
const TTL: Duration = Duration::from_secs(1);
/// Steps of one turn under the lease (holder `h` takes `STEPS * (h + 1)`), and the
/// wait between two: short turns hand the lease over often, long ones are renewed.
const STEPS: usize = 8;
const GAP: Duration = Duration::from_millis(15);
/// After a turn, before the holder tries again (the others get their chance); after a
/// skip or a refused acquire.
const REST: Duration = Duration::from_millis(40);
const RETRY: Duration = Duration::from_millis(20);
/// Bound on one write (the store's own timeouts are shorter).
const WRITE_BOUND: Duration = Duration::from_secs(3);
/// Bound on each wait of the schedule.
const WAIT: Duration = Duration::from_secs(15);
/// How long a paused holder waits to be thawed before it thaws itself (the test failed).
const PAUSE_BOUND: Duration = Duration::from_secs(40);
/// A freeze of the server (SIGSTOP) that delays the replies by less than the TTL.
const DELAY: Duration = Duration::from_millis(400);
/// The lease the holders compete for.
const LEASE: &str = "history";

/// What a write was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Accepted,
    /// Refused by the fence check.
    Stale,
    Failed,
}

/// One resource the holders write at each step.
pub(crate) struct Resource {
    pub(crate) name: &'static str,
    /// Whether the write checks the fence; the unchecked one proves the checker.
    pub(crate) checked: bool,
}

/// A store the history runs on: its private server, a holder's connections, the writes.
pub(crate) trait Backend: 'static {
    const NAME: &'static str;
    /// The resources each step writes, at once.
    const RESOURCES: &'static [Resource];
    type Server;
    /// A holder's lease store (each holder has its own, as a process would).
    type Store: LeaseStore + 'static;
    /// A holder's connections for the writes.
    type Conn;
    /// The private server, set up (a test fails saying what to install when it is not).
    fn start() -> Self::Server;
    fn url(server: &Self::Server) -> String;
    /// SIGSTOP, SIGCONT, and a restart that keeps the data (by pid).
    fn pause(server: &mut Self::Server);
    fn resume(server: &mut Self::Server);
    fn restart(server: &mut Self::Server);
    async fn connect(url: &str) -> Result<(Self::Store, Self::Conn), PortError>;
    /// Write `id` under `fence` to `resource`.
    async fn write(store: &Self::Store, conn: &Self::Conn, resource: usize, fence: &Fence, id: u64) -> Outcome;
    /// The ids `resource` holds at the end, with their place in its own order when it
    /// keeps one; `None` when it keeps nothing to read back (a mark keeps the largest).
    fn landed(server: &Self::Server, resource: usize) -> Option<Vec<(u64, Option<u64>)>>;
}

/// Whether the guard drops a holder's work on loss or tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Drop,
    Tell,
}

fn mode(holder: usize) -> Mode {
    if holder.is_multiple_of(2) { Mode::Drop } else { Mode::Tell }
}

/// Where a holder is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    BetweenCheckAndWrite,
    AwaitPoint,
}

/// A pause the test asks for: the first holder of `mode` that reaches `at` takes it.
struct Request {
    at: At,
    mode: Mode,
    /// Told (holder, fence, when) once the holder is paused.
    paused: mpsc::Sender<(usize, u64, Duration)>,
    thaw: mpsc::Receiver<()>,
}

/// A pause that happened.
#[derive(Debug, Clone, Copy)]
struct Pause {
    holder: usize,
    fence: u64,
    at: At,
    from: Duration,
    to: Duration,
}

/// One attempted write; `end` is `None` while (or when for good) no answer came.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    resource: usize,
    holder: usize,
    fence: u64,
    id: u64,
    start: Duration,
    end: Option<(Duration, Outcome)>,
}

/// What the holders and the test share.
struct Run {
    origin: Instant,
    stop: AtomicBool,
    next_id: AtomicU64,
    attempts: Mutex<Vec<Attempt>>,
    /// Every turn under the lease: (holder, fence, when it began).
    turns: Mutex<Vec<(usize, u64, Duration)>>,
    /// The fence each holder holds now.
    holding: Mutex<[Option<u64>; HOLDERS]>,
    /// Whether each holder's work waits between two steps.
    idle: [AtomicBool; HOLDERS],
    request: Mutex<Option<Request>>,
    pauses: Mutex<Vec<Pause>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Run {
    fn new() -> Run {
        Run {
            origin: Instant::now(),
            stop: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            attempts: Mutex::new(Vec::new()),
            turns: Mutex::new(Vec::new()),
            holding: Mutex::new([None; HOLDERS]),
            idle: std::array::from_fn(|_| AtomicBool::new(false)),
            request: Mutex::new(None),
            pauses: Mutex::new(Vec::new()),
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Writes `resource` answered `Accepted` with a fence above `fence`.
    fn accepted_above(&self, resource: usize, fence: u64) -> usize {
        let accepted = |a: &&Attempt| matches!(a.end, Some((_, Outcome::Accepted)));
        lock(&self.attempts).iter().filter(|a| a.resource == resource && a.fence > fence).filter(accepted).count()
    }

    /// Take the pause asked for at `at`, when it is for `holder`'s mode, and stay
    /// paused (the thread blocked) until the test thaws it.
    fn pause_point(&self, at: At, holder: usize) {
        let taken = {
            let mut slot = lock(&self.request);
            if slot.as_ref().is_some_and(|r| r.at == at && r.mode == mode(holder)) { slot.take() } else { None }
        };
        let Some(request) = taken else { return };
        let fence = lock(&self.holding)[holder].expect("paused under the lease");
        let from = self.now();
        let _ = request.paused.send((holder, fence, from));
        let _ = request.thaw.recv_timeout(PAUSE_BOUND);
        lock(&self.pauses).push(Pause { holder, fence, at, from, to: self.now() });
    }
}

/// What a holder's work says about itself while it runs, undone when the work ends
/// or is dropped (the guard may drop it at any await).
enum Mark<'a> {
    /// It holds the lease (with its fence).
    Holding(&'a Run, usize),
    /// It waits between two steps.
    Idle(&'a Run, usize),
}

impl Drop for Mark<'_> {
    fn drop(&mut self) {
        match *self {
            Mark::Holding(run, holder) => lock(&run.holding)[holder] = None,
            Mark::Idle(run, holder) => run.idle[holder].store(false, Ordering::SeqCst),
        }
    }
}

/// Stops the holders when the test ends, also when it fails.
struct StopOnDrop(Arc<Run>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
        lock(&self.0.request).take();
    }
}

/// One write, recorded before it is sent and when it is answered.
async fn attempt<B: Backend>(
    run: &Run,
    store: &B::Store,
    conn: &B::Conn,
    resource: usize,
    holder: usize,
    fence: &Fence,
) {
    let id = run.next_id.fetch_add(1, Ordering::SeqCst);
    let at = {
        let mut attempts = lock(&run.attempts);
        attempts.push(Attempt { resource, holder, fence: fence.number(), id, start: run.now(), end: None });
        attempts.len() - 1
    };
    let outcome =
        tokio::time::timeout(WRITE_BOUND, B::write(store, conn, resource, fence, id)).await.unwrap_or(Outcome::Failed);
    lock(&run.attempts)[at].end = Some((run.now(), outcome));
}

/// The work under the lease: up to `STEPS * (holder + 1)` steps, each writing every
/// resource at once.
async fn turn<B: Backend>(run: &Run, store: &B::Store, conn: &B::Conn, holder: usize, held: LeaseHandle) {
    let fence = held.fence().cloned().expect("an enforced lease has a fence");
    lock(&run.turns).push((holder, fence.number(), run.now()));
    lock(&run.holding)[holder] = Some(fence.number());
    let _holding = Mark::Holding(run, holder);
    for _ in 0..STEPS * (holder + 1) {
        if held.check().is_err() || run.stopping() {
            return;
        }
        run.pause_point(At::BetweenCheckAndWrite, holder);
        join_all((0..B::RESOURCES.len()).map(|r| attempt::<B>(run, store, conn, r, holder, &fence))).await;
        run.idle[holder].store(true, Ordering::SeqCst);
        let _idle = Mark::Idle(run, holder);
        tokio::time::sleep(GAP).await;
    }
}

/// Beside the work on the holder's runtime: pauses the whole holder while its work
/// waits between two steps (this task runs only while the work is not being polled).
async fn freezer(run: Arc<Run>, holder: usize) {
    while !run.stopping() {
        tokio::time::sleep(Duration::from_millis(2)).await;
        if run.idle[holder].load(Ordering::SeqCst) {
            run.pause_point(At::AwaitPoint, holder);
        }
    }
}

/// A holder: take turns under the lease until the run stops.
async fn hold<B: Backend>(run: Arc<Run>, url: String, holder: usize) {
    tokio::spawn(freezer(run.clone(), holder));
    let mut connected = None;
    for _ in 0..100 {
        match B::connect(&url).await {
            Ok(c) => {
                connected = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let (store, conn) = connected.unwrap_or_else(|| panic!("holder {holder} cannot connect to {}", B::NAME));
    let clock = TokioClock::new();
    let lease = LeaseName::job(LEASE);
    let mut turns: u64 = 0;
    while !run.stopping() {
        turns += 1;
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&turns.to_be_bytes());
        let token = LeaseToken::from_random(&format!("holder-{holder}"), bytes);
        let mut guard = LeaseGuard::new(&store, &clock, lease.clone(), TTL);
        if mode(holder) == Mode::Tell {
            guard = guard.tell_on_loss();
        }
        let wait = match guard.run(&token, |held| turn::<B>(&run, &store, &conn, holder, held)).await {
            Guarded::Ran { .. } | Guarded::Stopped { .. } => REST,
            Guarded::Skipped { .. } | Guarded::Refused(_) => RETRY,
        };
        tokio::time::sleep(wait + Duration::from_millis(3 * holder as u64)).await;
    }
}

/// Wait (bounded by `WAIT`) until `cond` holds; fail naming `what` otherwise.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The faults the schedule caused.
#[derive(Default)]
struct Faults {
    /// When each restart began and ended.
    restarts: Vec<(Duration, Duration)>,
    delays: usize,
}

/// Pause a holder of `mode` at `at`, do `meanwhile`, and thaw it once it has been
/// paused for longer than the TTL and every resource accepted another holder's write
/// with a larger fence (so whatever it writes next comes after a newer holder's write).
fn pause<B: Backend>(run: &Run, at: At, mode: Mode, meanwhile: impl FnOnce()) {
    let (paused, paused_rx) = mpsc::channel();
    let (thaw_tx, thaw) = mpsc::channel();
    *lock(&run.request) = Some(Request { at, mode, paused, thaw });
    let (holder, fence, from) =
        paused_rx.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no holder ({mode:?}) reached {at:?} within {WAIT:?}"));
    meanwhile();
    let resources = B::RESOURCES.len();
    wait_until(&format!("a write above fence {fence} on every resource while holder {holder} is paused"), || {
        run.now() >= from + TTL + TTL / 5 && (0..resources).all(|r| run.accepted_above(r, fence) > 0)
    });
    thaw_tx.send(()).expect("the paused holder waits");
}

/// SIGSTOP the server for `DELAY`: the replies of that moment come late.
fn delay<B: Backend>(server: &mut B::Server, faults: &mut Faults) {
    B::pause(server);
    std::thread::sleep(DELAY);
    B::resume(server);
    faults.delays += 1;
}

/// Run the history on `B` and assert what fencing promises; see the module docs.
pub(crate) fn run<B: Backend>() {
    let mut server = B::start();
    let url = B::url(&server);
    let run = Arc::new(Run::new());
    let stop = StopOnDrop(run.clone());
    let threads: Vec<JoinHandle<()>> = (0..HOLDERS)
        .map(|holder| {
            let (run, url) = (run.clone(), url.clone());
            std::thread::Builder::new()
                .name(format!("holder-{holder}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                    rt.block_on(hold::<B>(run, url, holder));
                })
                .expect("holder thread")
        })
        .collect();

    let mut faults = Faults::default();
    wait_until("the holders write", || run.accepted_above(0, 0) >= 20);
    pause::<B>(&run, At::BetweenCheckAndWrite, Mode::Tell, || {});
    pause::<B>(&run, At::AwaitPoint, Mode::Drop, || {});
    delay::<B>(&mut server, &mut faults);
    // The store restarts while a holder is paused: the fences handed out after it must
    // be larger than every one before it, and the paused holder's write must not land.
    pause::<B>(&run, At::BetweenCheckAndWrite, Mode::Drop, || {
        let from = run.now();
        B::restart(&mut server);
        faults.restarts.push((from, run.now()));
    });
    pause::<B>(&run, At::AwaitPoint, Mode::Tell, || {});
    delay::<B>(&mut server, &mut faults);
    pause::<B>(&run, At::BetweenCheckAndWrite, Mode::Drop, || {});
    let before = run.accepted_above(0, 0);
    wait_until("writes after the last fault", || run.accepted_above(0, 0) >= before + 100);

    drop(stop);
    let deadline = Instant::now() + WAIT;
    for t in threads {
        while !t.is_finished() {
            assert!(Instant::now() < deadline, "a holder did not stop within {WAIT:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        t.join().expect("a holder panicked");
    }
    let histories: Vec<History> = (0..B::RESOURCES.len()).map(|r| History::of::<B>(&run, &server, r)).collect();
    assess::<B>(&run, &faults, &histories);
}

/// What one resource saw.
struct History {
    resource: &'static Resource,
    attempted: usize,
    accepted: Vec<Write>,
    stale: usize,
    failed: usize,
    /// Writes that were never answered (the guard dropped the work mid-write).
    unanswered: usize,
    /// Accepted writes whose answer did not say so (failed or never came).
    late: usize,
    violations: Vec<Violation>,
}

impl History {
    /// The attempts on `resource`, and what it holds at the end.
    fn of<B: Backend>(run: &Run, server: &B::Server, resource: usize) -> History {
        let attempts: Vec<Attempt> = lock(&run.attempts).iter().filter(|a| a.resource == resource).copied().collect();
        let answered = |a: &Attempt, o: Outcome| a.end.is_some_and(|(_, got)| got == o);
        let write = |a: &Attempt, seq| Write {
            id: a.id,
            holder: a.holder,
            fence: a.fence,
            start: a.start,
            end: a.end.filter(|(_, o)| *o == Outcome::Accepted).map(|(end, _)| end),
            seq,
        };
        let name = B::RESOURCES[resource].name;
        let accepted: Vec<Write> = match B::landed(server, resource) {
            Some(landed) => {
                let landed: BTreeMap<u64, Option<u64>> = landed.into_iter().collect();
                let accepted: Vec<Write> =
                    attempts.iter().filter_map(|a| Some(write(a, *landed.get(&a.id)?))).collect();
                assert_eq!(accepted.len(), landed.len(), "{name}: every write it holds was attempted");
                for a in &attempts {
                    let held = landed.contains_key(&a.id);
                    assert!(held || !answered(a, Outcome::Accepted), "{name}: accepted write {a:?} is not there");
                    assert!(!held || !answered(a, Outcome::Stale), "{name}: write {a:?} refused as stale is there");
                }
                accepted
            }
            None => attempts.iter().filter(|a| answered(a, Outcome::Accepted)).map(|a| write(a, None)).collect(),
        };
        let late = accepted.iter().filter(|w| w.end.is_none()).count();
        let violations = check::violations(&accepted);
        History {
            resource: &B::RESOURCES[resource],
            attempted: attempts.len(),
            stale: attempts.iter().filter(|a| answered(a, Outcome::Stale)).count(),
            failed: attempts.iter().filter(|a| answered(a, Outcome::Failed)).count(),
            unanswered: attempts.iter().filter(|a| a.end.is_none()).count(),
            late,
            accepted,
            violations,
        }
    }

    fn line(&self) -> String {
        let r = self.resource;
        let mut line = format!(
            "{} ({}): {} attempted: {} accepted ({} with no answer saying so), {} refused as stale, {} failed, \
             {} never answered; {} violation(s)",
            r.name,
            if r.checked { "fence checked" } else { "unchecked" },
            self.attempted,
            self.accepted.len(),
            self.late,
            self.stale,
            self.failed,
            self.unanswered,
            self.violations.len(),
        );
        if let Some(v) = self.violations.first() {
            line.push_str(&format!(", e.g. {}", describe(v)));
        }
        line
    }
}

fn describe(v: &Violation) -> String {
    let (rule, earlier, later) = match v {
        Violation::ResourceOrder { earlier, later } => ("after, in the resource's order,", earlier, later),
        Violation::RealTime { earlier, later } => ("begun after the end of", earlier, later),
    };
    let end = earlier.end.map_or_else(|| "unanswered".to_owned(), |e| format!("ended {:.3} s", e.as_secs_f64()));
    format!(
        "write {} of holder {} with fence {} (begun {:.3} s) accepted {rule} write {} of holder {} with fence {} ({end})",
        later.id,
        later.holder,
        later.fence,
        later.start.as_secs_f64(),
        earlier.id,
        earlier.holder,
        earlier.fence
    )
}

/// Print the figures and assert them.
fn assess<B: Backend>(run: &Run, faults: &Faults, histories: &[History]) {
    let turns = lock(&run.turns).clone();
    let pauses = lock(&run.pauses).clone();
    let attempts = lock(&run.attempts).clone();
    let fences: BTreeSet<u64> = turns.iter().map(|t| t.1).collect();
    let count = |at| pauses.iter().filter(|p| p.at == at).count();
    let lengths = pauses.iter().map(|p| (p.to - p.from).as_secs_f64());
    let (shortest, longest) = lengths.fold((f64::MAX, 0.0_f64), |(s, l), x| (s.min(x), l.max(x)));
    eprintln!(
        "fencing history on {} over {:.1} s: {HOLDERS} holders, {} turns under the lease (fences {} to {}), {} \
         pauses of {shortest:.2} to {longest:.2} s past the {TTL:?} TTL ({} between a check and its write, {} at an \
         await point), {} store restart(s), {} delayed replies (server frozen {DELAY:?}); writes attempted {}, \
         accepted {}, refused as stale {}",
        B::NAME,
        run.now().as_secs_f64(),
        turns.len(),
        fences.first().unwrap_or(&0),
        fences.last().unwrap_or(&0),
        pauses.len(),
        count(At::BetweenCheckAndWrite),
        count(At::AwaitPoint),
        faults.restarts.len(),
        faults.delays,
        histories.iter().map(|h| h.attempted).sum::<usize>(),
        histories.iter().map(|h| h.accepted.len()).sum::<usize>(),
        histories.iter().map(|h| h.stale).sum::<usize>(),
    );
    for h in histories {
        eprintln!("  {}", h.line());
    }

    assert_eq!((count(At::BetweenCheckAndWrite), count(At::AwaitPoint)), (3, 2), "{pauses:?}");
    assert_eq!((faults.restarts.len(), faults.delays), (1, 2));
    assert_eq!(fences.len(), turns.len(), "every turn has a fence of its own: {turns:?}");
    // The fences survive the restart: every turn after it has a larger fence than any before it.
    for &(from, to) in &faults.restarts {
        let before = turns.iter().filter(|t| t.2 < from).map(|t| t.1).max().unwrap_or(0);
        let after = turns.iter().filter(|t| t.2 > to).map(|t| t.1).min().expect("turns after the restart");
        assert!(after > before, "the fence went back from {before} to {after} across the restart");
    }
    for p in &pauses {
        let after: Vec<&Attempt> =
            attempts.iter().filter(|a| a.holder == p.holder && a.fence == p.fence && a.start > p.to).collect();
        match p.at {
            // The guard's deadline: no step once the holder thaws.
            At::AwaitPoint => assert!(after.is_empty(), "holder paused at an await point wrote on: {p:?} {after:?}"),
            // The writes the stall held back went out, and nothing after them.
            At::BetweenCheckAndWrite => assert_eq!(after.len(), B::RESOURCES.len(), "{p:?} {after:?}"),
        }
    }
    for h in histories {
        if h.resource.checked {
            assert!(h.violations.is_empty(), "{}: {}", h.resource.name, describe(&h.violations[0]));
            assert!(h.stale > 0, "{}: a paused holder's write was refused as stale", h.resource.name);
        } else {
            // The same schedule without the check: the checker sees the stale writes land.
            assert!(!h.violations.is_empty(), "{}: the checker found no stale write", h.resource.name);
        }
    }
}

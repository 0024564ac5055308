//! Owner drains under the nemesis: `drain owners` processes serve seeded backlogs on
//! the managed store of `harness.rs` (Redis or PostgreSQL, through its proxy) while
//! the nemesis freezes a process past its owner claims' TTL, slows the replies and
//! partitions the address.
//! The backlogs are the demo's data in the same store, so the faults that lose writes
//! (a failover, an empty restart) would lose items drain never saw; they are left out.
//!
//! Two rules: **`items.once`**: every item is recorded exactly once and nothing is
//! left in a backlog or in flight; **`owners.finish`**: every process ends its run
//! complete (exit 0, `"complete":true`).

use std::time::{Duration, Instant};

use drain_e2e::owners::Store as Backlogs;
use drain_e2e::{Running, drain, drain_bin};

use super::check::{Fault, Violation};
use super::harness::{Servers, Store};

/// Processes, owners and items: about half a minute of work at [`ITEM_MS`] an item.
pub(crate) const PROCESSES: usize = 3;
const OWNERS: u32 = 6;
const ITEMS: u64 = 1_800;
const ITEM_MS: u64 = 100;
/// The owner claims' TTL (`--claim-ttl-seconds`).
const CLAIM_TTL: Duration = Duration::from_secs(2);
/// After each fault, before the next.
const SETTLE: Duration = Duration::from_secs(3);
/// Bound on the whole run.
const LIMIT: Duration = Duration::from_secs(180);

/// The faults owner drains go through.
pub(crate) const FAULTS: [Fault; 3] = [Fault::FrozenHolder, Fault::SlowReplies, Fault::Partition];

/// What the run found.
pub(crate) struct OwnersVerdict {
    pub(crate) violations: Vec<Violation>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) recorded: i64,
    pub(crate) twice: i64,
    pub(crate) took: Duration,
}

/// The backlogs on `servers`' store, seeded and counted through the proxy's address.
fn backlogs<'a>(servers: &'a Servers, url: &'a str) -> Backlogs<'a> {
    match (servers.primary(), servers.postgres()) {
        (Some(primary), _) => Backlogs::Redis(primary),
        (None, Some(pg)) => Backlogs::Postgres(pg, url),
        (None, None) => unreachable!("the store is Redis or PostgreSQL"),
    }
}

/// Run `faults` (of [`FAULTS`]) in order on a fleet of owner drains on `store`
/// (adapter-redis or adapter-postgres).
pub(crate) fn run(store: Store, faults: &[Fault]) -> OwnersVerdict {
    let mut servers = Servers::start(store);
    drain_bin();
    let url = servers.lease_url();
    backlogs(&servers, &url).seed(OWNERS, ITEMS);
    let origin = Instant::now();
    let mut procs: Vec<Running> = (0..PROCESSES)
        .map(|_| {
            let mut cmd = drain();
            cmd.args(["owners", "--owners", &OWNERS.to_string(), "--batch", "5", "--pass-ms", "100"])
                .args(["--item-delay-us", &(ITEM_MS * 1000).to_string()])
                .args(["--claim-ttl-seconds", &CLAIM_TTL.as_secs().to_string()])
                .env("DRAIN_STORE_URL", &url)
                .env("DRAIN_LOG", "info")
                .env("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", "1")
                .env("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS", "2");
            Running::spawn(cmd)
        })
        .collect();
    std::thread::sleep(SETTLE);
    for (i, &fault) in faults.iter().enumerate() {
        assert!(FAULTS.contains(&fault), "{fault:?} loses the demo's own items");
        match fault {
            Fault::FrozenHolder => {
                let p = &procs[i % PROCESSES];
                p.freeze();
                std::thread::sleep(CLAIM_TTL * 2);
                p.thaw();
            }
            Fault::SlowReplies => {
                servers.pause(true);
                std::thread::sleep(Duration::from_millis(400));
                servers.pause(false);
            }
            Fault::Partition => {
                servers.proxy.hold();
                std::thread::sleep(CLAIM_TTL * 2);
                servers.proxy.release();
            }
            Fault::Failover | Fault::EmptyRestart => unreachable!(),
        }
        std::thread::sleep(SETTLE);
    }
    let mut violations = Vec::new();
    for (i, p) in procs.iter_mut().enumerate() {
        // Exit 0 is a complete run (every backlog empty); a stop on an error exits 1.
        let status = p.wait_exit(LIMIT.saturating_sub(origin.elapsed()));
        if !status.is_some_and(|s| s.success()) {
            let what = format!("process {i} ended {status:?}: {}", p.seen.last().map_or("", String::as_str));
            violations.push(Violation { rule: "owners.finish", at: origin.elapsed(), what });
        }
    }
    let backlogs = backlogs(&servers, &url);
    let (n, twice) = backlogs.recorded();
    let left = (backlogs.backlog(), backlogs.in_flight());
    if n != ITEMS as i64 || twice != 0 || left != (0, 0) {
        let what = format!("{n} of {ITEMS} items recorded, {twice} twice, {left:?} left in the backlogs and in flight");
        violations.push(Violation { rule: "items.once", at: origin.elapsed(), what });
    }
    OwnersVerdict { violations, faults: faults.to_vec(), recorded: n, twice, took: origin.elapsed() }
}

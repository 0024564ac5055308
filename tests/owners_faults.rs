//! `drain owners` never loses a popped item (docs/reliability.md, "Owner drains"):
//! a batch leaves an owner's backlog only into its in-flight list, and leaves that
//! only recorded as processed. Under a missing right, Redis killed between the two,
//! and the process SIGKILLed mid-batch and restarted, every item is recorded exactly
//! once in the end, none lost. (Work may run again for a batch whose turn died after
//! its work and before its record; the record is exactly once.) And a full retry
//! timer cap costs a round trip per serving pass, not one per turn of a hand-off loop.

use std::time::{Duration, Instant};

use adapter_redis::rights::{LEASES_AND_CLAIMS, OWNER_BACKLOGS};
use drain_e2e::owners::{LIMIT, backlog, in_flight, recorded, seed};
use drain_e2e::{RedisServer, Running, drain, drain_bin, output, redis};
use test_servers::Reply;

/// Items and owners of each run.
const ITEMS: u64 = 300;
const OWNERS: u32 = 10;

/// `drain owners` on `url`: batches of 10 items at `item_ms` each, a pass every
/// `pass_ms`, a short claim-busy window, `env` on top.
fn owners_every(url: &str, item_ms: u64, pass_ms: u64, env: &[(&str, &str)]) -> std::process::Command {
    let mut cmd = drain();
    cmd.args(["owners", "--owners", &OWNERS.to_string(), "--batch", "10", "--pass-ms", &pass_ms.to_string()])
        .args(["--item-delay-us", &(item_ms * 1000).to_string()])
        .env("DRAIN_REDIS_URL", url)
        .env("DRAIN_LOG", "info")
        .env("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", "1")
        .env("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS", "2");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// [`owners_every`] with a pass every 100 ms.
fn owners(url: &str, item_ms: u64, env: &[(&str, &str)]) -> std::process::Command {
    owners_every(url, item_ms, 100, env)
}

fn report(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("one JSON line ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

/// Every item recorded exactly once, nothing left in a backlog or in flight.
fn assert_every_item_once(server: &RedisServer) {
    let (n, twice) = recorded(server);
    assert_eq!((backlog(server), in_flight(server)), (0, 0), "nothing left");
    assert_eq!(n, ITEMS as i64, "every item recorded");
    assert_eq!(twice, 0, "no item recorded twice");
}

/// Wait (bounded) until at least `n` items are recorded.
fn wait_recorded(server: &RedisServer, n: i64, run: &mut Running) {
    let deadline = Instant::now() + LIMIT;
    while recorded(server).0 < n {
        assert!(Instant::now() < deadline, "fewer than {n} items recorded: {}", run.log());
        run.wait_for("\u{0}", Duration::from_millis(20));
    }
}

/// Freeze `run` (SIGSTOP) at a moment its in-flight lists hold items (thawing it and
/// looking again while they hold none, bounded) and return that count. A frozen
/// process takes and records nothing, so the count stays true until it is thawed or
/// killed. (Killed at an arbitrary moment, it sometimes sat between batches.)
fn frozen_with_batches_in_flight(server: &RedisServer, run: &Running) -> i64 {
    let deadline = Instant::now() + LIMIT;
    loop {
        run.freeze();
        // A command it sent just before the stop lands first.
        std::thread::sleep(Duration::from_millis(20));
        let n = in_flight(server);
        if n > 0 || Instant::now() >= deadline {
            return n;
        }
        run.thaw();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A Redis user that may do everything `drain owners` does but `HINCRBY`: the
/// record fails with a permanent `Permission` error; the run stops (exit 1, the
/// error in the report, `complete: false`) with every item still in a backlog or in
/// flight. Before, each popped batch was dropped, and the run reported
/// `processed 0, complete` over empty backlogs. With the right, a second run
/// records every item once.
#[test]
fn a_missing_hincrby_right_loses_nothing() {
    let server = redis();
    seed(&server, OWNERS, ITEMS);
    // Everything `drain owners` needs (the documented rights, and the wake-up's) but
    // HINCRBY.
    let backlogs = OWNER_BACKLOGS.iter().copied().filter(|r| *r != "+hincrby");
    let wake = ["+lrem", "+lpop", "+publish", "+subscribe"];
    let rights: Vec<&str> = LEASES_AND_CLAIMS.iter().copied().chain(backlogs).chain(wake).collect();
    server.acl_user("nohincrby", "pw", &["drain:*"], &["drain:wake:*"], &rights).expect("ACL SETUSER");

    let url = format!("redis://nohincrby:pw@127.0.0.1:{}", server.port());
    let out = output(owners(&url, 0, &[]), LIMIT);
    let r = report(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a permanent error stops the run: {r}\n{err}");
    assert_eq!((&r["complete"], &r["processed"]), (&false.into(), &0.into()), "{r}");
    assert!(r["error"].as_str().is_some_and(|e| e.contains("hincrby")), "the report names the right: {r}");
    assert_eq!(backlog(&server) + in_flight(&server), ITEMS as i64, "every item is still there: {r}");
    assert_eq!(recorded(&server).0, 0);

    let out = output(owners(&server.url(), 0, &[]), LIMIT);
    let r = report(&out);
    assert!(out.status.success(), "{r}");
    assert_eq!(r["complete"], true, "{r}");
    assert!(r["recovered"].as_u64().is_some_and(|n| n > 0), "the stranded batches were taken again: {r}");
    assert_every_item_once(&server);
}

/// A user without the right to read the backlogs' lengths (`LLEN`, every pass's one
/// round trip): the first pass fails for good, and `drain owners` stops at once
/// (exit 1, the error in the report, `complete: false`) with every item in its
/// backlog. Before, it logged the error on every 100 ms pass, forever.
#[test]
fn a_missing_llen_right_stops_the_passes() {
    let server = redis();
    seed(&server, OWNERS, ITEMS);
    let backlogs = OWNER_BACKLOGS.iter().copied().filter(|r| *r != "+llen");
    let wake = ["+lrem", "+lpop", "+publish", "+subscribe"];
    let rights: Vec<&str> = LEASES_AND_CLAIMS.iter().copied().chain(backlogs).chain(wake).collect();
    server.acl_user("nollen", "pw", &["drain:*"], &["drain:wake:*"], &rights).expect("ACL SETUSER");

    let url = format!("redis://nollen:pw@127.0.0.1:{}", server.port());
    let out = output(owners(&url, 0, &[]), LIMIT);
    let r = report(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a permanent error stops the run: {r}\n{err}");
    assert_eq!((&r["complete"], &r["processed"], &r["passes"]), (&false.into(), &0.into(), &1.into()), "{r}");
    assert!(r["error"].as_str().is_some_and(|e| e.contains("llen")), "the report names the right: {r}");
    assert_eq!(err.matches("failed").count(), 1, "one line says why: {err}");
    assert_eq!(backlog(&server), ITEMS as i64, "every item is still there: {r}");
}

/// Redis (with an append-only file, so what it ran survives) killed while turns hold
/// batches between taking and recording them, and restarted on the same port: the
/// turns that were in flight fail (temporary errors: retried), their batches are
/// still in the in-flight lists after the restart, and the same `drain owners`
/// process records every item once. Before, the items popped just before the kill
/// were gone: out of the backlog, never recorded.
#[test]
fn redis_killed_between_take_and_record_loses_nothing() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    drain_bin();
    seed(&server, OWNERS, ITEMS);
    let mut run = Running::spawn(owners(&server.url(), 20, &[]));
    wait_recorded(&server, 60, &mut run);
    // The kill lands while the process is frozen with batches in flight, so what the
    // in-flight lists held is exactly what the restarted server (`appendfsync
    // always`) holds. (Read after the restart, it raced the process: a turn whose
    // work ended during the outage records its batch as soon as Redis answers.)
    let in_flight_at_kill = frozen_with_batches_in_flight(&server, &run);
    server.kill();
    run.thaw();
    std::thread::sleep(Duration::from_millis(500));
    server.restart();
    let status = run.wait_exit(LIMIT);
    assert!(status.is_some_and(|s| s.success()), "drain owners finished: {status:?}\n{}", run.log());
    eprintln!("{in_flight_at_kill} items were in flight when Redis was killed");
    assert_every_item_once(&server);
    assert!(in_flight_at_kill > 0, "the kill hit batches between take and record: {}", run.log());
}

/// `drain owners` SIGKILLed while its turns hold batches, then started again (a new
/// process, after the dead one's 2 s owner claims lapse): the new process takes the
/// stranded batches first and records every item once. Before, the killed process's
/// popped items were lost.
#[test]
fn a_process_killed_mid_batch_and_restarted_loses_nothing() {
    let server = redis();
    drain_bin();
    seed(&server, OWNERS, ITEMS);
    let two_second_claims = |item_ms| {
        let mut cmd = owners(&server.url(), item_ms, &[]);
        cmd.args(["--claim-ttl-seconds", "2"]);
        cmd
    };
    let mut first = Running::spawn(two_second_claims(20));
    wait_recorded(&server, 60, &mut first);
    frozen_with_batches_in_flight(&server, &first);
    drop(first); // SIGKILL
    let stranded = in_flight(&server);
    let out = output(two_second_claims(0), LIMIT);
    let r = report(&out);
    assert!(out.status.success(), "{r}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(r["complete"], true, "{r}");
    assert_every_item_once(&server);
    assert!(stranded > 0, "killed mid-batch: batches were in flight");
    assert_eq!(r["recovered"].as_u64(), Some(u64::try_from(stranded).unwrap_or(0)), "the stranded batches: {r}");
}

/// Every owner's claim held by someone else for minutes, a cap of one retry timer:
/// each pass requests every owner, the batched peek finds all held, one gets the
/// timer and the rest are handed off, to the next pass. The run's Redis traffic is
/// then a few round trips per pass (before: a handed-off owner went straight back
/// into the scheduler, peek, held, hand-off again, one round trip per turn of that
/// loop), and its log stays quiet.
#[test]
fn a_full_retry_timer_cap_costs_a_round_trip_per_pass_not_a_loop() {
    let server = redis();
    seed(&server, OWNERS, ITEMS);
    for i in 0..OWNERS {
        let claim = format!("drain:claim:{{owner-{i}}}");
        let ok = server.command(&["SET", &claim, "someone-else:ff", "PX", "600000"]).expect("SET");
        assert_eq!(ok, Reply::Simple("OK".into()));
    }
    let env = [("PROJECTION_DRAIN_MAX_RETRY_TIMERS", "1"), ("PROJECTION_DRAIN_RELEASE_WAKE", "off")];
    let cmd = owners_every(&server.url(), 0, 250, &env);
    let before: u64 = server.command_calls().expect("commandstats").values().sum();
    let mut run = Running::spawn(cmd);
    let window = Duration::from_secs(5);
    assert!(!run.wait_for("\"complete\"", window), "nothing can complete: {}", run.log());
    let after: u64 = server.command_calls().expect("commandstats").values().sum();
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", run.log());
    let commands = after - before;
    // Per pass (at most 5 s / 250 ms = 20, plus the first): one LLEN pipeline (2 per
    // owner), one peek, and the timer's peek of its one owner; connect costs a few
    // more. A peek with drain stamps (the default) is one EVALSHA of peek_marked.lua,
    // and Redis counts each command its script runs as well: GET and PTTL of a held
    // claim and PTTL of the mark, 3 per owner (a plain peek pipeline: 2 per owner).
    let peek = |owners: u64| 1 + 3 * owners;
    let per_pass = 2 * u64::from(OWNERS) + peek(u64::from(OWNERS)) + peek(1);
    let bound = 21 * per_pass + 50;
    eprintln!("{commands} Redis commands in {window:?} with the retry timers at the cap (at most {bound})");
    assert!(commands <= bound, "{commands} Redis commands in {window:?}: a hand-off loop (at most {bound})");
    let warnings = run.count("\"WARN\"");
    assert!(warnings <= 2, "{warnings} warnings in {window:?}:\n{}", run.log());
}

/// The same for `drain run --owners N`'s demo workload: with every owner's claim
/// held elsewhere and one retry timer, a handed-off intent waits for the next
/// arrivals tick (each second) instead of looping through the scheduler.
#[test]
fn the_run_owners_demo_at_the_retry_timer_cap_does_not_loop() {
    let server = redis();
    drain_bin();
    for i in 0..OWNERS {
        let claim = format!("drain:claim:{{owner-{i}}}");
        let ok = server.command(&["SET", &claim, "someone-else:ff", "PX", "600000"]).expect("SET");
        assert_eq!(ok, Reply::Simple("OK".into()));
    }
    let mut cmd = drain();
    cmd.args(["run", "--owners", &OWNERS.to_string()])
        .env("DRAIN_REDIS_URL", server.url())
        .env("DRAIN_LOG", "info")
        .env("SERVICEBUS_ATOMIC_CLAIM", "off")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "3600")
        .env("DRAIN_SHUTDOWN_GRACE_SECONDS", "0")
        .env("PROJECTION_DRAIN_MAX_RETRY_TIMERS", "1");
    let mut run = Running::spawn(cmd);
    assert!(run.wait_for("owner drains started", Duration::from_secs(30)), "{}", run.log());
    let before: u64 = server.command_calls().expect("commandstats").values().sum();
    let window = Duration::from_secs(5);
    run.wait_for("\u{0}", window);
    let after: u64 = server.command_calls().expect("commandstats").values().sum();
    run.terminate();
    assert!(run.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", run.log());
    let commands = after - before;
    // Each second: the arrivals' requests and the handed-off intents, peeked in a
    // few batched round trips. Each is one EVALSHA of peek_marked.lua (drain stamps
    // are on by default) running 3 commands per owner, which Redis counts too.
    let bound = 6 * 8 * (1 + 3 * u64::from(OWNERS)) + 50;
    eprintln!("{commands} Redis commands in {window:?} of `drain run --owners` at the cap (at most {bound})");
    assert!(commands <= bound, "{commands} Redis commands in {window:?}: a hand-off loop (at most {bound})");
}

//! `nightly-job` against a private redis-server: of processes started together one
//! runs the job and the others say who does; a killed holder's job is taken over once
//! its lease's time to live has passed, under a larger fence, and not before; a holder
//! whose store freezes stops at its lease's deadline and takes no further step; a
//! holder frozen itself past the time to live stops before its next write.

mod support;

use std::time::{Duration, Instant};

use support::Program;
use test_servers::{RedisServer, Reply};

const BIN: &str = env!("CARGO_BIN_EXE_nightly-job");
/// The lease's time to live: renewed every 667 ms, lost 1.8 s after the last
/// confirmed renewal was sent (the time to live less a tenth).
const TTL_MS: u64 = 2_000;
const TTL: Duration = Duration::from_millis(TTL_MS);
/// Bound on anything a healthy process does in these tests.
const BOUND: Duration = Duration::from_secs(30);

/// `nightly-job` as `me`, running `steps` steps of `step_ms` each.
fn job(redis: &RedisServer, me: &str, steps: u32, step_ms: u64) -> Program {
    Program::start(BIN, &[&redis.url(), me, &TTL_MS.to_string(), &steps.to_string(), &step_ms.to_string()])
}

/// What the job wrote for `step`, if anything.
fn step_value(redis: &RedisServer, step: u32) -> Option<String> {
    match redis.command(&["GET", &format!("nightly-report:step:{step}")]).expect("GET") {
        Reply::Bulk(v) => v.map(|b| String::from_utf8_lossy(&b).into_owned()),
        other => panic!("GET answered {other:?}"),
    }
}

/// The fence a job ran under, from its first step's line.
fn fence_of(p: &Program) -> Option<u64> {
    p.stdout().iter().find_map(|l| l.strip_prefix("step 1 done under fence ")?.parse().ok())
}

#[test]
fn of_three_processes_started_at_once_one_runs_and_the_others_say_who() {
    let redis = RedisServer::start();
    // Two seconds of work: every process asks for the lease while the first holds it.
    let mut all: Vec<(&str, Program)> = ["a", "b", "c"].into_iter().map(|me| (me, job(&redis, me, 4, 500))).collect();
    for (me, p) in &mut all {
        let status = p.wait_exit(BOUND).unwrap_or_else(|| panic!("{me} did not exit:\n{}", p.output()));
        assert!(status.success(), "{me}: {status}\n{}", p.output());
    }
    let runners: Vec<&str> = all.iter().filter(|(_, p)| fence_of(p).is_some()).map(|(me, _)| *me).collect();
    let logs: Vec<String> = all.iter().map(|(me, p)| format!("{me}: {}", p.output())).collect();
    assert_eq!(runners.len(), 1, "exactly one process runs the job:\n{}", logs.join("\n"));
    let runner = runners[0];
    for (me, p) in all.iter().filter(|(me, _)| *me != runner) {
        let said = format!("skipped: {runner} runs it");
        assert!(p.stdout().iter().any(|l| l.starts_with(&said)), "{me} names the holder:\n{}", p.output());
    }
    for step in 1..=4 {
        assert_eq!(step_value(&redis, step), Some(format!("step {step} by {runner}")));
    }
}

#[test]
fn a_killed_holder_is_taken_over_after_the_ttl_with_a_larger_fence_and_not_before() {
    let redis = RedisServer::start();
    let mut a = job(&redis, "a", 20, 300);
    assert!(a.wait_for("step 1 done", BOUND), "a runs:\n{}", a.output());
    a.signal("KILL");
    let killed = Instant::now();
    assert!(a.wait_exit(BOUND).is_some_and(|s| !s.success()));
    let fence_a = fence_of(&a).expect("a announced its fence");

    // Before the time to live has passed, the dead holder's lease still stands.
    let mut b = job(&redis, "b", 1, 10);
    assert!(b.wait_exit(BOUND).is_some_and(|s| s.success()), "{}", b.output());
    let after = killed.elapsed();
    assert!(
        b.stdout().iter().any(|l| l.starts_with("skipped: a runs it")),
        "b ({after:?} after the kill):\n{}",
        b.output()
    );
    assert_eq!(step_value(&redis, 2), None, "nobody ran step 2 yet");

    // After it (the last renewal was sent before the kill), the next process takes over.
    std::thread::sleep((TTL + Duration::from_millis(300)).saturating_sub(killed.elapsed()));
    let mut c = job(&redis, "c", 2, 10);
    assert!(c.wait_exit(BOUND).is_some_and(|s| s.success()), "{}", c.output());
    let fence_c = fence_of(&c).unwrap_or_else(|| panic!("c runs:\n{}", c.output()));
    assert!(fence_c > fence_a, "c's fence {fence_c} is larger than a's {fence_a}");
    assert!(c.stdout().iter().any(|l| l == "nightly-report done"), "{}", c.output());
    assert_eq!(step_value(&redis, 2), Some("step 2 by c".to_owned()));
}

#[test]
fn a_holder_whose_store_freezes_stops_by_its_deadline_and_takes_no_further_step() {
    let mut redis = RedisServer::start();
    // Steps of 4 s of work: the freeze comes while step 2 works, longer than the lease lives.
    let mut a = job(&redis, "a", 10, 4_000);
    assert!(a.wait_for("step 1 done", BOUND), "a runs:\n{}", a.output());
    redis.pause();
    let frozen = Instant::now();
    let status = a.wait_exit(BOUND);
    let stopped_after = frozen.elapsed();
    redis.resume();
    let status = status.unwrap_or_else(|| panic!("a did not stop:\n{}", a.output()));
    assert_eq!(status.code(), Some(1), "{}", a.output());
    // The deadline is 1.8 s after the last renewal confirmed before the freeze; a
    // second more is room for a slow machine, and still short of step 2's end (4 s).
    assert!(stopped_after < TTL + Duration::from_secs(1), "stopped {stopped_after:?} after the freeze");
    let said = a.stderr().join("\n");
    assert!(said.contains("stopped in step 2") && said.contains("no renewal was confirmed"), "{}", a.output());
    assert!(!a.stdout().iter().any(|l| l.contains("step 2 done")), "{}", a.output());
    assert_eq!(step_value(&redis, 1), Some("step 1 by a".to_owned()));
    assert_eq!(step_value(&redis, 2), None, "no step after the freeze reached the store");
}

#[test]
fn a_holder_frozen_past_its_ttl_stops_before_its_next_write_and_the_next_holder_keeps_its_work() {
    let redis = RedisServer::start();
    let mut a = job(&redis, "a", 10, 1_000);
    assert!(a.wait_for("step 1 done", BOUND), "a runs:\n{}", a.output());
    // A pause of the holder itself (a long GC, a stopped VM): past the time to live,
    // then another process takes the job over.
    a.signal("STOP");
    std::thread::sleep(TTL + Duration::from_millis(500));
    let mut b = job(&redis, "b", 2, 10);
    let b_done = b.wait_exit(BOUND);
    a.signal("CONT");
    assert!(b_done.is_some_and(|s| s.success()), "b takes over:\n{}", b.output());
    assert!(fence_of(&b) > fence_of(&a), "a larger fence:\n{}\n{}", a.output(), b.output());
    // Thawed, a learns of the loss before its next write: from its own clock, even
    // before its renewal task runs.
    let status = a.wait_exit(BOUND).unwrap_or_else(|| panic!("a did not stop:\n{}", a.output()));
    assert_eq!(status.code(), Some(1), "{}", a.output());
    assert!(a.stderr().join("\n").contains("lease lost"), "{}", a.output());
    assert!(!a.stdout().iter().any(|l| l.contains("step 2 done")), "{}", a.output());
    assert_eq!(step_value(&redis, 2), Some("step 2 by b".to_owned()), "b's work stands");
}

//! Fencing proved by histories on real servers: four holders compete for one lease
//! through drain-core's `LeaseGuard` (fail-closed; two drop their work on loss, two
//! are told) on a private Redis and a private PostgreSQL, and write at every step to
//! resources that check the fence and to one that does not, while the test pauses
//! holders past the TTL (between a check and its write, and at an await point),
//! restarts the store under a paused holder and freezes it for less than the TTL.
//! Every write is recorded with its holder, fence and real-time interval, and the
//! checker (`history/check.rs`) says which accepted writes a fence check must have
//! refused: none on the checked resources, some on the unchecked one in the very same
//! run, which is what proves the checker (and the check) is not vacuous.
//!
//! The harness is `history/`; the checker's own cases are below.

mod history;

use std::time::Duration;

use history::check::{Violation, Write, violations};

#[test]
fn on_redis_no_stale_write_is_accepted_through_pauses_a_restart_and_delayed_replies() {
    history::run::<history::redis::Redis>();
}

#[test]
fn on_postgres_no_stale_write_is_accepted_through_pauses_a_restart_and_delayed_replies() {
    history::run::<history::postgres::Postgres>();
}

/// A write `id` of fence `fence`, between `start` and `end` ms (`None`: unanswered),
/// at `seq` in the resource's order.
fn w(id: u64, fence: u64, start: u64, end: Option<u64>, seq: Option<u64>) -> Write {
    let ms = Duration::from_millis;
    Write { id, holder: 0, fence, start: ms(start), end: end.map(ms), seq }
}

/// The violations of `history`, as (rule, later id, earlier id).
fn check(history: &[Write], expected: &[(&str, u64, u64)]) {
    let got: Vec<(&str, u64, u64)> = violations(history)
        .iter()
        .map(|v| match v {
            Violation::ResourceOrder { earlier, later } => ("order", later.id, earlier.id),
            Violation::RealTime { earlier, later } => ("time", later.id, earlier.id),
        })
        .collect();
    assert_eq!(got, expected, "{history:?}");
}

#[test]
fn the_checker_finds_every_write_a_fence_check_must_refuse() {
    check(&[], &[]);
    // In order, equal fences included.
    check(&[w(1, 1, 0, Some(5), None), w(2, 1, 6, Some(9), None), w(3, 2, 10, Some(12), None)], &[]);
    // A stale write begun after a newer one ended.
    check(&[w(1, 2, 0, Some(5), None), w(2, 1, 6, Some(9), None)], &[("time", 2, 1)]);
    // Overlapping writes are concurrent: either order is fine.
    check(&[w(1, 2, 0, Some(5), None), w(2, 1, 4, Some(9), None)], &[]);
    // The earlier write is the one with the largest fence before it.
    check(&[w(1, 3, 0, Some(2), None), w(2, 5, 1, Some(3), None), w(3, 4, 4, Some(6), None)], &[("time", 3, 2)]);
    // An unanswered write constrains nothing after it, but is checked itself.
    check(&[w(1, 5, 0, None, None), w(2, 1, 9, Some(10), None)], &[]);
    check(&[w(1, 5, 0, Some(1), None), w(2, 1, 9, None, None)], &[("time", 2, 1)]);
    // In the resource's order a lower fence after a higher one, however the intervals lie.
    check(&[w(1, 2, 0, Some(10), Some(1)), w(2, 1, 0, Some(10), Some(2))], &[("order", 2, 1)]);
    check(&[w(1, 1, 0, Some(10), Some(1)), w(2, 2, 0, Some(10), Some(2)), w(3, 2, 0, None, Some(3))], &[]);
    // A write breaking both rules is named once, by the resource's order.
    check(&[w(1, 2, 0, Some(1), Some(1)), w(2, 1, 5, Some(6), Some(2))], &[("order", 2, 1)]);
}

//! `retrying` (connecting to something that may be down) and `purge_rounds`
//! (deleting what a store keeps after it expired), in paused time.

use std::cell::RefCell;
use std::time::Duration;

use drain_core::{Backoff, ErrorKind, PortError};
use drain_runtime::{purge_rounds, retrying};
use tokio::time::Instant;

const BACKOFF: Backoff = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(4) };

fn down() -> PortError {
    PortError::new(ErrorKind::Connection, "connection refused")
}

#[tokio::test(start_paused = true)]
async fn temporary_errors_are_retried_after_the_back_off() {
    let start = Instant::now();
    let attempts = RefCell::new(Vec::new());
    let answer = retrying("reach the broker", BACKOFF, || {
        attempts.borrow_mut().push(start.elapsed());
        let n = attempts.borrow().len();
        async move { if n < 4 { Err(down()) } else { Ok(n) } }
    })
    .await;
    assert_eq!(answer.expect("up at the 4th attempt"), 4);
    let at = attempts.into_inner();
    // Waits before attempts 2, 3, 4: caps 1 s, 2 s, 4 s, each drawn from its upper half.
    for (i, cap) in [1, 2, 4].into_iter().enumerate() {
        let wait = at[i + 1] - at[i];
        let cap = Duration::from_secs(cap);
        assert!(wait >= cap / 2 && wait <= cap, "wait {i}: {wait:?} outside [{:?}, {cap:?}]", cap / 2);
    }
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_returned_at_once() {
    let calls = RefCell::new(0);
    let e = retrying("reach the broker", BACKOFF, || {
        *calls.borrow_mut() += 1;
        async { Err::<(), _>(PortError::new(ErrorKind::Auth, "bad password")) }
    })
    .await
    .expect_err("a credential needs someone to act");
    assert_eq!((e.kind, *calls.borrow()), (ErrorKind::Auth, 1));
}

#[tokio::test(start_paused = true)]
async fn a_round_purges_until_fewer_than_the_limit_come_back_and_a_failure_ends_it() {
    const EVERY: Duration = Duration::from_secs(300);
    let start = Instant::now();
    // What each call answers, in order: round 1 takes three calls, round 2 fails at
    // its second, round 3 is one short call.
    let answers = RefCell::new(vec![Ok(10), Ok(10), Ok(3), Ok(10), Err(down()), Ok(0)]);
    let calls = RefCell::new(Vec::new());
    let rounds = purge_rounds(EVERY, 10, |limit| {
        calls.borrow_mut().push((start.elapsed().as_secs(), limit));
        let answer = answers.borrow_mut().remove(0);
        async move { answer }
    });
    // Three rounds, and stopped (dropped) while the third waits for the next.
    let _ = tokio::time::timeout(EVERY * 2 + Duration::from_secs(1), rounds).await;
    assert_eq!(calls.into_inner(), [(0, 10), (0, 10), (0, 10), (300, 10), (300, 10), (600, 10)]);
    assert!(answers.borrow().is_empty());
}

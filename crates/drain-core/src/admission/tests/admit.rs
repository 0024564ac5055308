//! Requests, peeks and the order of launches.

use super::*;

// ---- request --------------------------------------------------------------------

/// Where `check_request` puts the owner `x` before requesting it again.
#[derive(Debug, Clone, Copy)]
enum Prior {
    Unknown,
    Queued,
    Peeking,
    Ready,
    Timer,
    Running,
    RunningDirty,
    HandedOff,
    Finished,
    Closed,
}

fn drive(s: &mut S, prior: Prior) {
    let now = Time::ZERO;
    let x = id("x");
    match prior {
        Prior::Unknown => {}
        Prior::Queued => {
            let _ = s.request(now, x);
        }
        Prior::Peeking => {
            drive(s, Prior::Queued);
            assert_eq!(s.poll_action(now), peek(&["x"]));
        }
        Prior::Ready => {
            drive(s, Prior::Peeking);
            s.on_peek(now, vec![(x, PeekResult::Free)]);
        }
        Prior::Running => run(s, now, "x"),
        Prior::RunningDirty => {
            run(s, now, "x");
            let _ = s.request(now, x);
        }
        Prior::Timer => {
            run(s, now, "x");
            assert_eq!(s.on_turn(now, &x, ClaimBusy), Ok(()));
        }
        Prior::HandedOff => {
            // The only timer slot is taken by `filler`, so `x`'s timer overflows.
            run(s, now, "filler");
            assert_eq!(s.on_turn(now, &id("filler"), ClaimBusy), Ok(()));
            drive(s, Prior::Timer);
        }
        Prior::Finished => {
            run(s, now, "x");
            assert_eq!(s.on_turn(now, &x, Done), Ok(()));
        }
        Prior::Closed => {
            drive(s, Prior::Queued);
            let _ = s.close();
        }
    }
}

#[track_caller]
fn check_request(prior: Prior, expected: Result<Requested, Closed>, after: Option<OwnerState>) {
    let mut s = sched(SchedulerConfig { max_retry_timers: 1, ..config(On, 2) });
    drive(&mut s, prior);
    let before = s.state_of(&id("x"));
    let (queue, timers) = (s.queue_len(), s.timer_count());
    assert_eq!(s.request(t(1), id("x")), expected, "request after {prior:?}");
    let state = s.state_of(&id("x"));
    match after {
        Some(OwnerState::Timer { .. }) => assert_eq!(state, before, "timer kept after {prior:?}"),
        _ => assert_eq!(state, after, "state after {prior:?}"),
    }
    let grew = usize::from(expected == Ok(Requested::Queued));
    assert_eq!(s.queue_len(), queue + grew, "one FIFO entry at most, after {prior:?}");
    assert_eq!(s.timer_count(), timers, "timers after {prior:?}");
}

#[test]
fn requests_coalesce() {
    let queued = Some(OwnerState::Queued { entry: Initial });
    let timer = Some(OwnerState::Timer { due: Time::ZERO });
    let dirty = Some(OwnerState::Running { dirty: true });
    check_request(Prior::Unknown, Ok(Requested::Queued), queued);
    check_request(Prior::Queued, Ok(Requested::Coalesced), queued);
    check_request(Prior::Peeking, Ok(Requested::Coalesced), Some(OwnerState::Peeking));
    check_request(Prior::Ready, Ok(Requested::Coalesced), Some(OwnerState::Ready));
    check_request(Prior::Timer, Ok(Requested::Coalesced), timer);
    check_request(Prior::Running, Ok(Requested::MarkedDirty), dirty);
    check_request(Prior::RunningDirty, Ok(Requested::MarkedDirty), dirty);
    check_request(Prior::HandedOff, Ok(Requested::Coalesced), Some(OwnerState::HandedOff));
    check_request(Prior::Finished, Ok(Requested::Queued), queued);
    check_request(Prior::Closed, Err(Closed), None);
}

// ---- peeks -------------------------------------------------------------------------

#[track_caller]
fn check_peek(mode: Switch, result: PeekResult, after: Next, events: &[Event<'_>]) {
    let mut s = sched(config(mode, 1));
    let now = t(50_000);
    let _ = s.request(now, id("x"));
    assert_eq!(s.poll_action(now), peek(&["x"]));
    assert_eq!(s.peeking_count(), 1);
    s.on_peek(now, vec![(id("x"), result)]);
    assert_eq!(s.peeking_count(), 0);
    assert_eq!(decisions(&mut s), events, "{mode} {result:?}");
    match after {
        Next::Queued(_) => {
            assert_eq!(s.state_of(&id("x")), Some(OwnerState::Ready), "{mode} {result:?}");
            assert_eq!(s.poll_action(now), launch("x", Initial), "{mode} {result:?}");
        }
        Next::TimerWithin(low, high) => {
            let Some(OwnerState::Timer { due }) = s.state_of(&id("x")) else {
                panic!("{mode} {result:?}: expected a timer")
            };
            assert!(due >= now + ms(low) && due <= now + ms(high), "due {due}");
            assert_eq!(s.poll_action(now), None);
        }
        Next::Finished => unreachable!("a peek never finishes an owner"),
    }
}

#[test]
fn peek_results() {
    use Event::{OwnerSkipped, PeekError};
    use PeekResult::{Busy, Error, Free};
    let ready = Next::Queued(Initial);
    let held = |mode| OwnerSkipped { reason: SkipReason::ClaimBusy, mode };
    check_peek(On, Free, ready, &[]);
    check_peek(On, Busy, Next::TimerWithin(5000, 15_000), &[held(On)]);
    check_peek(On, Error, ready, &[PeekError]);
    check_peek(Shadow, Free, ready, &[]);
    check_peek(Shadow, Busy, ready, &[held(Shadow)]);
    check_peek(Shadow, Error, ready, &[PeekError]);
}

#[test]
fn missing_results_admit_their_batch_and_stray_results_are_ignored() {
    let mut s = sched(config(On, 4));
    for o in ["a", "b", "c"] {
        let _ = s.request(t(0), id(o));
    }
    assert_eq!(s.poll_action(t(0)), peek(&["a", "b", "c"]));
    // A fourth slot is free: a second batch goes out while the first is in flight.
    let _ = s.request(t(0), id("d"));
    assert_eq!(s.poll_action(t(0)), peek(&["d"]));
    let _ = decisions(&mut s);
    // Only `b` is answered; `a` and `c` (same batch) are admitted as errors; `d`
    // (another batch) keeps waiting; `zz` and the repeated `b` are ignored.
    let results = vec![(id("zz"), PeekResult::Busy), (id("b"), PeekResult::Free), (id("b"), PeekResult::Busy)];
    s.on_peek(t(1), results);
    assert_eq!(decisions(&mut s), vec![Event::PeekError, Event::PeekError]);
    assert_eq!(s.state_of(&id("zz")), None);
    assert_eq!(s.state_of(&id("d")), Some(OwnerState::Peeking));
    assert_eq!(s.peeking_count(), 1);
    // Ready owners launch in the order they were settled: answered first.
    assert_eq!(s.poll_action(t(1)), launch("b", Initial));
    assert_eq!(s.poll_action(t(1)), launch("a", Initial));
    assert_eq!(s.poll_action(t(1)), launch("c", Initial));
    assert_eq!(s.poll_action(t(1)), None, "d still holds the fourth slot");
    s.on_peek(t(2), vec![(id("d"), PeekResult::Free)]);
    assert_eq!(s.poll_action(t(2)), launch("d", Initial));
}

// ---- poll_action ----------------------------------------------------------------------

/// A step of a `check_polls` script.
#[derive(Debug, Clone, Copy)]
enum Step<'a> {
    Request(&'a str),
    /// Run `owner` to a `Productive { more: true }` turn: it is queued as a continuation.
    Continue(&'a str),
    Poll(&'a [&'a str], Option<Entry>),
    PeekFree(&'a [&'a str]),
    Turn(&'a str, TurnOutcome),
}

/// Run `steps`; a `Poll(owners, Some(entry))` expects a launch of the single owner,
/// `Poll(owners, None)` a peek of `owners` (or nothing when `owners` is empty).
#[track_caller]
fn check_polls(mode: Switch, workers: usize, steps: &[Step<'_>]) {
    let mut s = sched(config(mode, workers));
    let now = t(0);
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Request(o) => assert!(s.request(now, id(o)).is_ok()),
            Step::Continue(o) => {
                assert_eq!(s.on_turn(now, &id(o), MORE), Ok(()), "step {i}");
            }
            Step::Poll(owners, entry) => {
                let expected = match (owners, entry) {
                    ([], _) => None,
                    ([one], Some(entry)) => launch(one, entry),
                    (many, _) => peek(many),
                };
                assert_eq!(s.poll_action(now), expected, "{mode} step {i}: {step:?}");
            }
            Step::PeekFree(owners) => {
                s.on_peek(now, owners.iter().map(|o| (id(o), PeekResult::Free)));
            }
            Step::Turn(o, outcome) => assert_eq!(s.on_turn(now, &id(o), outcome), Ok(())),
        }
        assert!(s.running_count() + s.peeking_count() <= workers, "{mode} step {i}");
    }
}

#[test]
fn batched_peeks_take_the_leading_initial_run_up_to_the_free_slots() {
    use Step::{PeekFree, Poll, Request};
    check_polls(
        On,
        3,
        &[
            Request("a"),
            Request("b"),
            Request("c"),
            Request("d"),
            Poll(&["a", "b", "c"], None),
            Poll(&[], None),
            PeekFree(&["a", "b", "c"]),
            Poll(&["a"], Some(Initial)),
            Poll(&["b"], Some(Initial)),
            Poll(&["c"], Some(Initial)),
            Poll(&[], None),
        ],
    );
    check_polls(Shadow, 2, &[Request("a"), Request("b"), Request("c"), Poll(&["a", "b"], None)]);
}

#[test]
fn continuations_launch_without_a_peek_and_end_a_peek_run() {
    use Step::{Continue, PeekFree, Poll, Request, Turn};
    for mode in [On, Shadow] {
        check_polls(
            mode,
            3,
            &[
                Request("a"),
                Poll(&["a"], None),
                PeekFree(&["a"]),
                Poll(&["a"], Some(Initial)),
                Request("b"),
                Continue("a"),
                Request("c"),
                // FIFO: b (initial), a (continuation), c (initial).
                Poll(&["b"], None),
                Poll(&["a"], Some(Continuation)),
                Poll(&["c"], None),
                Poll(&[], None),
                PeekFree(&["c", "b"]),
                Turn("a", Done),
                Poll(&["c"], Some(Initial)),
                Poll(&["b"], Some(Initial)),
            ],
        );
    }
}

#[test]
fn off_never_peeks_and_launches_in_fifo_order() {
    use Step::{Continue, Poll, Request, Turn};
    check_polls(
        Off,
        2,
        &[
            Request("a"),
            Request("b"),
            Request("c"),
            Poll(&["a"], Some(Initial)),
            Poll(&["b"], Some(Initial)),
            Poll(&[], None),
            Continue("a"),
            Poll(&["c"], Some(Initial)),
            Turn("b", ClaimBusy),
            Poll(&["a"], Some(Continuation)),
            Turn("c", Done),
            Poll(&["b"], Some(Initial)),
        ],
    );
}

#[test]
fn ready_owners_launch_before_the_fifo_head() {
    use Step::{PeekFree, Poll, Request, Turn};
    check_polls(
        On,
        2,
        &[
            Request("a"),
            Poll(&["a"], None),
            PeekFree(&["a"]),
            Request("b"),
            Poll(&["a"], Some(Initial)),
            Poll(&["b"], None),
            Request("c"),
            Turn("a", Done),
            PeekFree(&["b"]),
            Poll(&["b"], Some(Initial)),
            Poll(&["c"], None),
        ],
    );
}

#[test]
fn zero_workers_means_one_slot() {
    let mut s = sched(config(Off, 0));
    let _ = s.request(t(0), id("a"));
    let _ = s.request(t(0), id("b"));
    assert_eq!(s.poll_action(t(0)), launch("a", Initial));
    assert_eq!(s.poll_action(t(0)), None);
}

/// A recycled peek vector carries the next batch (its allocation is reused), and an
/// answer given as an iterator settles the batch as a vector would.
#[test]
fn a_recycled_peek_vector_carries_the_next_batch() {
    let mut s = sched(config(On, 2));
    let now = Time::ZERO;
    let _ = s.request(now, id("a"));
    let Some(Action::Peek(mut first)) = s.poll_action(now) else { panic!("a peek") };
    let reserved = first.capacity();
    let at = first.as_ptr();
    s.on_peek(now, first.drain(..).map(|o| (o, PeekResult::Free)));
    s.recycle(first);
    assert_eq!(s.poll_action(now), launch("a", Initial));
    let _ = s.request(now, id("b"));
    let Some(Action::Peek(second)) = s.poll_action(now) else { panic!("a peek") };
    assert_eq!(second, ids(&["b"]));
    assert!(second.capacity() >= reserved && second.as_ptr() == at, "the recycled allocation is reused");
}

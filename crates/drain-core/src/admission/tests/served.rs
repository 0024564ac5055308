//! Skipping served requests: a peek's drain stamp after the owner's latest request
//! forgets the owner; anything else launches it as before.

use super::*;

fn skip(mode: Switch) -> SchedulerConfig {
    SchedulerConfig { skip_served: mode, workers: 1, ..SchedulerConfig::default() }
}

fn peeked(claim: PeekResult, drained: Option<u64>) -> Peeked {
    Peeked { claim, drained: drained.map(t) }
}

/// Request `x` made at `made`, peek it at 100 ms with `claim` and a mark at
/// `drained`: the state it ends in and the decisions.
#[track_caller]
fn check(mode: Switch, made: u64, claim: PeekResult, drained: Option<u64>, expected: Option<OwnerState>, served: bool) {
    let mut s = sched(skip(mode));
    assert_eq!(s.request_made(t(100), id("x"), t(made)), Ok(Requested::Queued));
    assert_eq!(s.poll_action(t(100)), peek(&["x"]));
    s.on_peek(t(100), [(id("x"), peeked(claim, drained))]);
    let case = format!("{mode:?} made {made} {claim:?} drained {drained:?}");
    let state = match s.state_of(&id("x")) {
        Some(OwnerState::Timer { .. }) => Some(OwnerState::Timer { due: Time::ZERO }),
        other => other,
    };
    assert_eq!(state, expected, "{case}");
    let skipped = decisions(&mut s).contains(&Event::OwnerSkipped { reason: SkipReason::Served, mode });
    assert_eq!(skipped, served, "{case}");
    assert_eq!(s.peeking_count(), 0, "{case}: the slot is free again");
}

#[test]
fn a_mark_after_the_request_forgets_the_owner() {
    let timer = Some(OwnerState::Timer { due: Time::ZERO });
    let ready = Some(OwnerState::Ready);
    use PeekResult::{Busy, Error, Free};
    // mode, made, claim, mark, where the owner ends, a served decision
    check(On, 10, Free, Some(11), None, true);
    check(On, 10, Busy, Some(50), None, true);
    check(On, 10, Free, Some(10), ready, false);
    check(On, 10, Free, Some(9), ready, false);
    check(On, 10, Busy, Some(9), timer, false);
    check(On, 10, Free, None, ready, false);
    check(On, 10, Error, None, ready, false);
    check(Shadow, 10, Free, Some(11), ready, true);
    check(Shadow, 10, Busy, Some(11), timer, true);
    check(Off, 10, Free, Some(11), ready, false);
    check(Off, 10, Busy, Some(11), timer, false);
}

/// The request a peek is judged by is the latest the owner owes: coalesced requests
/// keep the latest time, a request during a turn is owed after it, and a request the
/// turn started for is not.
#[test]
fn the_latest_owed_request_decides() {
    // Two requests coalesce: a mark between them does not serve the second.
    let mut s = sched(skip(On));
    let _ = s.request_made(t(100), id("x"), t(10));
    let _ = s.request_made(t(100), id("x"), t(30));
    let _ = s.request_made(t(100), id("x"), t(20));
    assert_eq!(s.poll_action(t(100)), peek(&["x"]));
    s.on_peek(t(100), [(id("x"), peeked(PeekResult::Free, Some(25)))]);
    assert_eq!(s.state_of(&id("x")), Some(OwnerState::Ready));

    // A request during the turn is owed after it: the turn's own start does not serve it.
    assert_eq!(s.poll_action(t(100)), launch("x", Initial));
    assert_eq!(s.request_made(t(150), id("x"), t(150)), Ok(Requested::MarkedDirty));
    assert_eq!(s.on_turn(t(200), &id("x"), Done), Ok(()));
    assert_eq!(s.poll_action(t(200)), peek(&["x"]));
    s.on_peek(t(200), [(id("x"), peeked(PeekResult::Free, Some(100)))]);
    assert_eq!(s.state_of(&id("x")), Some(OwnerState::Ready), "mark 100 is before the request at 150");

    // A claim-busy turn still owes the request it started for; a later drain serves it.
    assert_eq!(s.poll_action(t(200)), launch("x", Initial));
    assert_eq!(s.on_turn(t(210), &id("x"), ClaimBusy), Ok(()));
    let due = s.next_deadline().expect("a claim retry");
    s.handle_timeout(due);
    assert_eq!(s.poll_action(due), peek(&["x"]));
    s.on_peek(due, [(id("x"), peeked(PeekResult::Free, Some(160)))]);
    assert_eq!(s.state_of(&id("x")), None, "a drain that began at 160 served the request made at 150");
}

/// A continuation is never peeked, so no mark can drop it: the turn said more.
#[test]
fn continuations_are_never_dropped() {
    let mut s = sched(skip(On));
    run(&mut s, t(0), "x");
    assert_eq!(s.on_turn(t(10), &id("x"), MORE), Ok(()));
    assert_eq!(s.poll_action(t(10)), launch("x", Continuation));
}

/// A served owner frees its slot at once: the next owner is peeked in the same pass.
#[test]
fn a_served_owner_frees_its_slot() {
    let mut s = sched(skip(On));
    let _ = s.request_made(t(5), id("x"), t(5));
    assert_eq!(s.poll_action(t(5)), peek(&["x"]));
    let _ = s.request_made(t(6), id("y"), t(6));
    assert_eq!(s.poll_action(t(6)), None, "one slot, taken by the peek");
    s.on_peek(t(7), [(id("x"), peeked(PeekResult::Free, Some(6)))]);
    assert_eq!(s.poll_action(t(7)), peek(&["y"]));
    assert_eq!(s.request(t(8), id("x")), Ok(Requested::Queued), "a forgotten owner is requested afresh");
}

/// With the switch On, a request made after the ones a claim wait holds ends the
/// wait: a peek (not a turn) tells whether a drain served it. A repeat of a request
/// already held, Shadow and Off leave the timer alone.
#[test]
fn a_newer_request_ends_a_claim_wait() {
    for (mode, made, expected) in [
        (On, 20, Requested::Queued),
        (On, 10, Requested::Coalesced),
        (Shadow, 20, Requested::Coalesced),
        (Off, 20, Requested::Coalesced),
    ] {
        let mut s = sched(skip(mode));
        let _ = s.request_made(t(10), id("x"), t(10));
        assert_eq!(s.poll_action(t(10)), peek(&["x"]));
        s.on_peek(t(11), [(id("x"), peeked(PeekResult::Busy, Some(0)))]);
        assert!(s.waits_for_claim(&id("x")), "{mode:?}");
        assert_eq!(s.request_made(t(30), id("x"), t(made)), Ok(expected), "{mode:?} made {made}");
        let queued = expected == Requested::Queued;
        assert_eq!(s.timer_count(), usize::from(!queued), "{mode:?} made {made}");
        assert_eq!(s.poll_action(t(30)).is_some(), queued, "{mode:?} made {made}: peeked again");
    }
}

/// The peek a newer request makes, finding the claim free: with a drain begun since
/// the owner's previous peek (later than that peek's mark plus its round trip), the
/// owner launches; without one, the holder released to take the claim again for its
/// next turn (or its turn failed), and the owner waits for the claim again instead of
/// racing it. A peek not made for a newer request launches on a free claim as ever.
#[test]
fn a_newer_request_races_no_holder_that_released_without_draining() {
    // (the mark the second peek finds, where the owner ends)
    for (mark, launched) in [(Some(5), false), (Some(7), false), (Some(8), true), (None, true)] {
        let mut s = sched(skip(On));
        let _ = s.request_made(t(10), id("x"), t(10));
        assert_eq!(s.poll_action(t(10)), peek(&["x"]));
        // Busy, the mark at 5 (no later than 5 + the 1 ms round trip + 1 ms).
        s.on_peek(t(11), [(id("x"), peeked(PeekResult::Busy, Some(5)))]);
        let before = s.state_of(&id("x"));
        assert_eq!(s.request_made(t(30), id("x"), t(30)), Ok(Requested::Queued));
        assert_eq!(s.poll_action(t(30)), peek(&["x"]));
        let found = match mark {
            Some(m) => peeked(PeekResult::Free, Some(m)),
            None => Peeked::from(PeekResult::Free),
        };
        s.on_peek(t(31), [(id("x"), found)]);
        let state = s.state_of(&id("x"));
        if launched {
            assert_eq!(state, Some(OwnerState::Ready), "mark {mark:?}");
        } else {
            assert_eq!(state, before, "mark {mark:?}: waits again until the wait the request ended was due");
            assert!(s.waits_for_claim(&id("x")), "mark {mark:?}");
            // Newer requests leave that wait; the owner launches once it is due.
            let Some(OwnerState::Timer { due }) = state else { panic!("a claim wait: {state:?}") };
            assert_eq!(s.request_made(t(40), id("x"), t(40)), Ok(Requested::Coalesced));
            s.handle_timeout(due);
            assert_eq!(s.poll_action(due), peek(&["x"]));
            s.on_peek(due, [(id("x"), found)]);
            assert_eq!(s.state_of(&id("x")), Some(OwnerState::Ready), "mark {mark:?}: due");
        }
    }
    // A claim wait after a lost race: the peek before the launch noted the mark.
    let mut s = sched(skip(On));
    let _ = s.request_made(t(10), id("x"), t(10));
    assert_eq!(s.poll_action(t(10)), peek(&["x"]));
    s.on_peek(t(11), [(id("x"), peeked(PeekResult::Free, Some(5)))]);
    assert!(matches!(s.poll_action(t(11)), Some(Action::Launch { .. })));
    assert_eq!(s.on_turn(t(12), &id("x"), ClaimBusy), Ok(()));
    assert_eq!(s.request_made(t(30), id("x"), t(30)), Ok(Requested::Queued));
    assert_eq!(s.poll_action(t(30)), peek(&["x"]));
    s.on_peek(t(31), [(id("x"), peeked(PeekResult::Free, Some(5)))]);
    assert!(s.waits_for_claim(&id("x")), "no drain since the peek before the lost race: waits again");
    // A timer's own peek (no newer request) launches on a free claim.
    let mut s = sched(skip(On));
    let _ = s.request_made(t(10), id("x"), t(10));
    assert_eq!(s.poll_action(t(10)), peek(&["x"]));
    s.on_peek(t(11), [(id("x"), peeked(PeekResult::Busy, Some(5)))]);
    let Some(OwnerState::Timer { due }) = s.state_of(&id("x")) else { panic!("a claim wait") };
    s.handle_timeout(due);
    assert_eq!(s.poll_action(due), peek(&["x"]));
    s.on_peek(due, [(id("x"), peeked(PeekResult::Free, Some(5)))]);
    assert_eq!(s.state_of(&id("x")), Some(OwnerState::Ready));
}

/// A newer request ends a claim wait once: the wait the peek it made starts is left
/// to its timer (or a release) however often newer requests come, and the wait after
/// that timer's own peek can be ended again.
#[test]
fn a_newer_request_ends_a_claim_wait_once() {
    let mut s = sched(skip(On));
    let _ = s.request_made(t(10), id("x"), t(10));
    assert_eq!(s.poll_action(t(10)), peek(&["x"]));
    s.on_peek(t(11), [(id("x"), peeked(PeekResult::Busy, Some(0)))]);
    assert_eq!(s.request_made(t(20), id("x"), t(20)), Ok(Requested::Queued));
    assert_eq!(s.poll_action(t(20)), peek(&["x"]));
    s.on_peek(t(21), [(id("x"), peeked(PeekResult::Busy, Some(0)))]);
    for at in [30, 40, 50] {
        assert_eq!(s.request_made(t(at), id("x"), t(at)), Ok(Requested::Coalesced), "at {at}");
    }
    let Some(OwnerState::Timer { due }) = s.state_of(&id("x")) else { panic!("a claim wait") };
    s.handle_timeout(due);
    assert_eq!(s.poll_action(due), peek(&["x"]));
    s.on_peek(due, [(id("x"), peeked(PeekResult::Busy, Some(0)))]);
    let later = due + Duration::from_millis(1);
    assert_eq!(s.request_made(later, id("x"), later), Ok(Requested::Queued), "a new wait");
}

/// A claim wait whose peek knew no drain stamps (the store keeps none) is not ended
/// by a newer request: no peek could tell it was served, so the backoff stands.
#[test]
fn without_marks_a_newer_request_leaves_the_claim_wait() {
    let mut s = sched(skip(On));
    let _ = s.request_made(t(10), id("x"), t(10));
    assert_eq!(s.poll_action(t(10)), peek(&["x"]));
    s.on_peek(t(11), [(id("x"), PeekResult::Busy)]);
    assert_eq!(s.request_made(t(30), id("x"), t(20)), Ok(Requested::Coalesced));
    assert_eq!(s.timer_count(), 1);
}

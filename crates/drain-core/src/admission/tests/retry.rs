//! Turn outcomes, claim-busy and failure backoff, and the timer cap.

use super::*;

// ---- turn outcomes ----------------------------------------------------------------

#[track_caller]
fn check_turn(mode: Switch, dirty: bool, outcome: TurnOutcome, next: Next, events: &[Event<'_>]) {
    let mut s = sched(config(mode, 1));
    let now = t(100_000);
    run(&mut s, now, "x");
    if dirty {
        assert_eq!(s.request(now, id("x")), Ok(Requested::MarkedDirty));
    }
    let _ = decisions(&mut s);
    assert_eq!(s.on_turn(now, &id("x"), outcome), Ok(()));
    let mut expected = vec![Event::OwnerTurn { outcome }];
    expected.extend_from_slice(events);
    let case = format!("{mode} dirty={dirty} {outcome:?}");
    assert_eq!(decisions(&mut s), expected, "events of {case}");
    assert_eq!(s.running_count(), 0, "{case}");
    match (next, s.state_of(&id("x"))) {
        (Next::Finished, state) => assert_eq!(state, None, "{case}"),
        (Next::Queued(entry), state) => {
            assert_eq!(state, Some(OwnerState::Queued { entry }), "{case}");
            assert_eq!(s.queue_len(), 1, "{case}");
        }
        (Next::TimerWithin(low, high), Some(OwnerState::Timer { due })) => {
            assert!(due >= now + ms(low) && due <= now + ms(high), "{case}: due {due}");
            assert_eq!(s.next_deadline(), Some(due), "{case}");
            assert_eq!(s.queue_len(), 0, "{case}");
        }
        (Next::TimerWithin(..), state) => panic!("{case}: expected a timer, got {state:?}"),
    }
}

#[test]
fn turn_outcomes() {
    use Event::ClaimBusyBackoff as Backoff;
    let busy = Next::TimerWithin(5000, 15_000);
    let failed = Next::TimerWithin(0, 1000);
    for mode in [Off, Shadow, On] {
        for dirty in [false, true] {
            // More work continues at once, without a peek; a dirty mark is absorbed.
            check_turn(mode, dirty, MORE, Next::Queued(Continuation), &[]);
            // Failure backoff does not depend on the switch.
            check_turn(mode, dirty, Failed, failed, &[]);
        }
        for outcome in [Done, NO_MORE] {
            check_turn(mode, false, outcome, Next::Finished, &[]);
            check_turn(mode, true, outcome, Next::Queued(Initial), &[]);
        }
    }
    check_turn(On, false, ClaimBusy, busy, &[Backoff { mode: On }]);
    check_turn(On, true, ClaimBusy, busy, &[Backoff { mode: On }]);
    check_turn(Shadow, false, ClaimBusy, Next::Queued(Initial), &[Backoff { mode: Shadow }]);
    check_turn(Off, false, ClaimBusy, Next::Queued(Initial), &[]);
    check_turn(Off, true, ClaimBusy, Next::Queued(Initial), &[]);
}

#[test]
fn a_turn_of_an_owner_that_is_not_running_is_refused() {
    let mut s = sched(config(On, 1));
    assert_eq!(s.on_turn(t(0), &id("x"), Done), Err(NotRunning(id("x"))));
    let _ = s.request(t(0), id("x"));
    assert_eq!(s.on_turn(t(0), &id("x"), Done), Err(NotRunning(id("x"))));
    assert_eq!(s.state_of(&id("x")), Some(OwnerState::Queued { entry: Initial }));
    assert_eq!(decisions(&mut s), vec![]);
}

// ---- backoff -------------------------------------------------------------------------

#[test]
fn claim_busy_jitter_spreads_over_the_whole_window() {
    let mut s = sched(SchedulerConfig { max_retry_timers: 10_000, ..config(On, 1) });
    let now = t(1_000_000);
    let mut delays = Vec::new();
    for i in 0..2000 {
        let o = format!("o{i}");
        run(&mut s, now, &o);
        assert_eq!(s.on_turn(now, &id(&o), ClaimBusy), Ok(()));
        let Some(OwnerState::Timer { due }) = s.state_of(&id(&o)) else { panic!("no timer") };
        delays.push(due.saturating_since(now).as_millis());
    }
    let (low, high) = (delays.iter().min().copied(), delays.iter().max().copied());
    assert!(low.is_some_and(|d| (5000..6000).contains(&d)), "lowest {low:?}");
    assert!(high.is_some_and(|d| (14_000..=15_000).contains(&d)), "highest {high:?}");
}

#[test]
fn failure_backoff_grows_to_the_cap_and_resets() {
    let config = SchedulerConfig { failure_base: ms(1000), failure_cap: ms(5000), ..config(On, 1) };
    let mut s = sched(config);
    let mut now = t(0);
    run(&mut s, now, "x");
    // Ceiling of the n-th consecutive failure: 1 s, 2 s, 4 s, then the 5 s cap.
    let check_failure = |s: &mut S, now: &mut Time, ceiling: u64| {
        assert_eq!(s.on_turn(*now, &id("x"), Failed), Ok(()));
        let Some(OwnerState::Timer { due }) = s.state_of(&id("x")) else { panic!("no timer") };
        assert!(due <= *now + ms(ceiling), "failure delay above {ceiling} ms");
        *now = due;
        s.handle_timeout(*now);
        assert_eq!(s.poll_action(*now), peek(&["x"]));
        s.on_peek(*now, vec![(id("x"), PeekResult::Free)]);
        assert_eq!(s.poll_action(*now), launch("x", Initial));
    };
    for ceiling in [1000, 2000, 4000, 5000, 5000] {
        check_failure(&mut s, &mut now, ceiling);
    }
    // Any other outcome resets the count.
    assert_eq!(s.on_turn(now, &id("x"), MORE), Ok(()));
    assert_eq!(s.poll_action(now), launch("x", Continuation));
    check_failure(&mut s, &mut now, 1000);
    check_failure(&mut s, &mut now, 2000);
}

#[test]
fn failure_delays_use_the_whole_jitter_range() {
    let mut s = sched(SchedulerConfig { max_retry_timers: 10_000, ..config(Off, 1) });
    let now = t(0);
    let mut delays = Vec::new();
    for i in 0..1000 {
        let o = format!("o{i}");
        run(&mut s, now, &o);
        assert_eq!(s.on_turn(now, &id(&o), Failed), Ok(()));
        let Some(OwnerState::Timer { due }) = s.state_of(&id(&o)) else { panic!("no timer") };
        delays.push(due.as_millis());
    }
    assert!(delays.iter().all(|&d| d <= 1000));
    assert!(delays.iter().any(|&d| d < 100) && delays.iter().any(|&d| d > 900));
}

// ---- timers -------------------------------------------------------------------------

#[test]
fn timers_fire_in_deadline_order_as_initial_entries() {
    let mut s = sched(SchedulerConfig { backoff_min: ms(10), backoff_max: ms(10), ..config(On, 3) });
    assert_eq!(s.next_deadline(), None);
    for (at, o) in [(5, "late"), (0, "early"), (0, "early2")] {
        run(&mut s, t(at), o);
    }
    for (at, o) in [(5, "late"), (0, "early"), (0, "early2")] {
        assert_eq!(s.on_turn(t(at), &id(o), ClaimBusy), Ok(()));
    }
    // `late` reports at t=5 but was armed first; time never runs backwards, so the
    // two later reports (at t=0) are taken at t=5 too: all three are due at 15.
    assert_eq!(s.next_deadline(), Some(t(15)));
    s.handle_timeout(t(14));
    assert_eq!(s.timer_count(), 3);
    s.handle_timeout(t(15));
    assert_eq!(s.timer_count(), 0);
    assert_eq!(s.next_deadline(), None);
    assert_eq!(s.poll_action(t(15)), peek(&["late", "early", "early2"]));
}

#[test]
fn a_request_does_not_pull_a_timer_forward() {
    let mut s = sched(config(On, 1));
    run(&mut s, t(0), "x");
    assert_eq!(s.on_turn(t(0), &id("x"), ClaimBusy), Ok(()));
    let due = s.next_deadline();
    assert_eq!(s.request(t(1), id("x")), Ok(Requested::Coalesced));
    assert_eq!(s.poll_action(t(1)), None);
    assert_eq!(s.next_deadline(), due);
}

#[test]
fn timers_beyond_the_cap_are_handed_off_and_counted() {
    let mut s = sched(SchedulerConfig { max_retry_timers: 2, ..config(On, 4) });
    for o in ["a", "b", "c", "d"] {
        run(&mut s, t(0), o);
    }
    let _ = decisions(&mut s);
    assert_eq!(s.on_turn(t(0), &id("a"), ClaimBusy), Ok(()));
    assert_eq!(s.on_turn(t(0), &id("b"), Failed), Ok(()));
    assert_eq!(s.on_turn(t(0), &id("c"), ClaimBusy), Ok(()));
    assert_eq!(s.on_turn(t(0), &id("d"), Failed), Ok(()));
    assert_eq!(s.timer_count(), 2);
    let overflows = decisions(&mut s).iter().filter(|e| **e == Event::RetryOverflow).count();
    assert_eq!(overflows, 2);
    assert_eq!(s.state_of(&id("c")), Some(OwnerState::HandedOff));
    assert_eq!(s.handoff_count(), 2);
    assert_eq!(s.poll_handoff(), Some(id("c")));
    assert_eq!(s.poll_handoff(), Some(id("d")));
    assert_eq!(s.poll_handoff(), None);
    assert_eq!(s.state_of(&id("c")), None);
    // A polled hand-off is forgotten: a new request starts afresh.
    assert_eq!(s.request(t(1), id("c")), Ok(Requested::Queued));
    // A held peek overflows the same way.
    assert_eq!(s.poll_action(t(1)), peek(&["c"]));
    s.on_peek(t(1), vec![(id("c"), PeekResult::Busy)]);
    assert_eq!(s.poll_handoff(), Some(id("c")));
    assert!(decisions(&mut s).contains(&Event::RetryOverflow));
}

#[test]
fn a_zero_cap_hands_every_retry_off() {
    let mut s = sched(SchedulerConfig { max_retry_timers: 0, ..config(On, 1) });
    run(&mut s, t(0), "x");
    assert_eq!(s.on_turn(t(0), &id("x"), Failed), Ok(()));
    assert_eq!(s.timer_count(), 0);
    assert_eq!(s.poll_handoff(), Some(id("x")));
}

//! Close, events, determinism and scale.

use super::*;

// ---- close -----------------------------------------------------------------------

#[test]
fn close_returns_every_pending_intent_and_refuses_later_requests() {
    let mut s = sched(SchedulerConfig { max_retry_timers: 1, ..config(On, 5) });
    let now = t(0);
    run(&mut s, now, "timer");
    assert_eq!(s.on_turn(now, &id("timer"), ClaimBusy), Ok(()));
    run(&mut s, now, "handoff");
    assert_eq!(s.on_turn(now, &id("handoff"), ClaimBusy), Ok(()));
    run(&mut s, now, "running");
    run(&mut s, now, "dirty");
    assert_eq!(s.request(now, id("dirty")), Ok(Requested::MarkedDirty));
    run(&mut s, now, "more");
    // Two batches in flight; the first comes back free.
    let _ = s.request(now, id("ready"));
    assert_eq!(s.poll_action(now), peek(&["ready"]));
    let _ = s.request(now, id("peeking"));
    assert_eq!(s.poll_action(now), peek(&["peeking"]));
    s.on_peek(now, vec![(id("ready"), PeekResult::Free)]);
    assert_eq!(s.on_turn(now, &id("more"), MORE), Ok(()));
    let _ = s.request(now, id("queued"));
    let states = ["handoff", "ready", "peeking", "more", "queued", "timer"].map(|o| s.state_of(&id(o)));
    assert_eq!(
        states,
        [
            Some(OwnerState::HandedOff),
            Some(OwnerState::Ready),
            Some(OwnerState::Peeking),
            Some(OwnerState::Queued { entry: Continuation }),
            Some(OwnerState::Queued { entry: Initial }),
            s.next_deadline().map(|due| OwnerState::Timer { due }),
        ]
    );
    // Hand-offs, ready, peeking, the FIFO, then timers.
    assert_eq!(s.close(), ids(&["handoff", "ready", "peeking", "more", "queued", "timer"]));
    assert!(s.is_closed());
    assert_eq!((s.queue_len(), s.timer_count(), s.next_deadline()), (0, 0, None));
    assert_eq!((s.peeking_count(), s.handoff_count()), (0, 0));
    assert_eq!(s.state_of(&id("timer")), None);
    assert_eq!(s.request(now, id("new")), Err(Closed));
    assert_eq!(s.request(now, id("running")), Err(Closed));
    assert_eq!(s.poll_action(now), None);
    // Running owners are still tracked; those that would continue are handed off.
    assert_eq!(s.running_count(), 2);
    assert_eq!(s.on_turn(now, &id("running"), Done), Ok(()));
    assert_eq!(s.state_of(&id("running")), None);
    assert_eq!(s.on_turn(now, &id("dirty"), Done), Ok(()));
    assert_eq!(s.poll_handoff(), Some(id("dirty")));
    assert_eq!(s.poll_handoff(), None);
    assert_eq!(s.close(), vec![]);
}

#[test]
fn close_hands_off_every_continuing_outcome() {
    for outcome in [MORE, ClaimBusy, Failed] {
        for mode in [Off, Shadow, On] {
            let mut s = sched(config(mode, 1));
            run(&mut s, t(0), "x");
            assert_eq!(s.close(), vec![]);
            let _ = decisions(&mut s);
            assert_eq!(s.on_turn(t(1), &id("x"), outcome), Ok(()));
            assert_eq!(decisions(&mut s), vec![Event::OwnerTurn { outcome }]);
            assert_eq!(s.state_of(&id("x")), Some(OwnerState::HandedOff), "{mode} {outcome:?}");
            assert_eq!(s.timer_count(), 0);
            // A second close returns the hand-off not yet polled.
            assert_eq!(s.close(), ids(&["x"]));
            assert_eq!(s.state_of(&id("x")), None);
        }
    }
}

#[test]
fn late_peek_answers_after_close_are_ignored() {
    let mut s = sched(config(On, 2));
    let _ = s.request(t(0), id("x"));
    assert_eq!(s.poll_action(t(0)), peek(&["x"]));
    assert_eq!(s.close(), ids(&["x"]));
    assert_eq!(s.peeking_count(), 0);
    s.on_peek(t(1), vec![(id("x"), PeekResult::Busy)]);
    assert_eq!(s.state_of(&id("x")), None);
    assert_eq!(s.poll_action(t(1)), None);
}

// ---- events and determinism ------------------------------------------------------------

#[test]
fn gauges_are_emitted_when_they_change() {
    let mut s = sched(config(On, 1));
    let _ = s.request(t(0), id("a"));
    let _ = s.request(t(0), id("a"));
    let _ = s.request(t(0), id("b"));
    assert_eq!(s.poll_action(t(0)), peek(&["a"]));
    s.on_peek(t(0), vec![(id("a"), PeekResult::Busy)]);
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(
        events,
        vec![
            Event::OwnerQueueDepth(1),
            Event::OwnerQueueDepth(2),
            Event::OwnerQueueDepth(1),
            Event::OwnerSkipped { reason: SkipReason::ClaimBusy, mode: On },
            Event::RetryTimers(1),
        ]
    );
    let _ = s.close();
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(events, vec![Event::OwnerQueueDepth(0), Event::RetryTimers(0)]);
}

#[test]
fn the_same_seed_gives_the_same_deadlines() {
    let deadlines = |seed: u64| {
        let mut s = Scheduler::new(config(On, 1), SmallRng::seed_from_u64(seed));
        (0..20)
            .map(|i| {
                let o = format!("o{i}");
                run(&mut s, t(0), &o);
                let outcome = if i % 2 == 0 { ClaimBusy } else { Failed };
                assert_eq!(s.on_turn(t(0), &id(&o), outcome), Ok(()));
                s.state_of(&id(&o))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(deadlines(3), deadlines(3));
    assert_ne!(deadlines(3), deadlines(4));
}

#[test]
fn turn_labels() {
    let labels = [
        (MORE, "productive_more"),
        (NO_MORE, "productive_done"),
        (Done, "done"),
        (ClaimBusy, "claim_busy"),
        (Failed, "failed"),
    ];
    for (outcome, label) in labels {
        assert_eq!(outcome.as_str(), label);
    }
}

#[test]
fn owner_ids() {
    let a = OwnerId::from("tenant-a");
    assert_eq!(a, OwnerId::from(String::from("tenant-a")));
    assert_eq!((a.as_str(), a.to_string()), ("tenant-a", "tenant-a".to_owned()));
    assert!(OwnerId::from("a") < OwnerId::from("b"));
    assert_eq!(a.into_string(), "tenant-a");
}

// ---- scale -----------------------------------------------------------------------------

/// Ten thousand owners through fifty slots with claim contention, failures and
/// continuations, on virtual time: every owner finishes and nothing is left behind.
#[test]
fn ten_thousand_owners_all_finish() {
    use rand::RngExt;
    let config = SchedulerConfig { max_retry_timers: 500, ..config(On, 50) };
    let mut s = sched(config);
    let mut world = SmallRng::seed_from_u64(11);
    let mut now = t(0);
    let mut finished = 0usize;
    for i in 0..10_000 {
        let _ = s.request(now, OwnerId::from(format!("owner-{i}")));
    }
    let mut running = Vec::new();
    for _ in 0..1_000_000 {
        while let Some(action) = s.poll_action(now) {
            match action {
                Action::Peek(owners) => {
                    let answers = owners.into_iter().map(|o| {
                        let held = world.random_bool(0.2);
                        (o, if held { PeekResult::Busy } else { PeekResult::Free })
                    });
                    s.on_peek(now, answers);
                }
                Action::Launch { owner, .. } => running.push(owner),
            }
        }
        for owner in std::mem::take(&mut running) {
            let outcome = match world.random_range(0..10) {
                0 => ClaimBusy,
                1 => Failed,
                2..=4 => MORE,
                _ => Done,
            };
            assert_eq!(s.on_turn(now, &owner, outcome), Ok(()));
            if s.state_of(&owner).is_none() {
                finished += 1;
            }
        }
        while let Some(owner) = s.poll_handoff() {
            // The next serving pass takes it back.
            let _ = s.request(now, owner);
        }
        while s.poll_event().is_some() {}
        if s.queue_len() == 0 && s.running_count() == 0 {
            match s.next_deadline() {
                Some(due) => now = due,
                None => break,
            }
        } else {
            now += ms(100);
        }
        s.handle_timeout(now);
    }
    assert_eq!(finished, 10_000);
    assert_eq!((s.queue_len(), s.timer_count(), s.running_count()), (0, 0, 0));
}

//! The claim-aware admission `Scheduler` driven by hand, sans-IO, in virtual time: no
//! runtime, no store, no clock. The "store" is a table of who holds which owner's
//! claim until when; time is a number this loop moves to the scheduler's next
//! deadline. This is what `admission::drive` does over real ports.
//!
//! `cargo run -p drain-core --example scheduler_by_hand`

use std::collections::HashMap;
use std::time::Duration;

use drain_core::admission::{Action, OwnerId, PeekResult, Scheduler, SchedulerConfig, TurnOutcome};
use drain_core::event::{Event, SkipReason};
use drain_core::rand::SeedableRng;
use drain_core::rand::rngs::SmallRng;
use drain_core::{Switch, Time};

fn main() {
    let config = {
        let mut m = SchedulerConfig::default();
        m.claim_aware = Switch::On;
        m.workers = 2;
        m
    };
    // A seeded generator: the jitter, and so the whole run, repeats exactly.
    let mut s = Scheduler::new(config, SmallRng::seed_from_u64(7));

    // Another instance holds `tenant-b`'s claim for the first 12 s; each owner has
    // some items, worked 5 per turn.
    let claims: HashMap<OwnerId, Time> = HashMap::from([(OwnerId::from("tenant-b"), Time::from_millis(12_000))]);
    let mut items: HashMap<OwnerId, u32> =
        HashMap::from([(OwnerId::from("tenant-a"), 12), (OwnerId::from("tenant-b"), 3)]);
    let mut now = Time::ZERO;
    for owner in ["tenant-a", "tenant-b", "tenant-a"] {
        // The second request for tenant-a coalesces with the first.
        let _ = s.request(now, OwnerId::from(owner));
    }

    let (mut turns, mut deferred, mut steps) = (Vec::new(), 0, 0);
    loop {
        steps += 1;
        assert!(steps < 1_000, "the scheduler settles");
        s.handle_timeout(now);
        while let Some(action) = s.poll_action(now) {
            match action {
                // One batched read of the owners' claims: here, the table.
                Action::Peek(owners) => {
                    let held = |o: &OwnerId| claims.get(o).is_some_and(|until| *until > now);
                    let answers: Vec<(OwnerId, PeekResult)> = owners
                        .iter()
                        .map(|o| (o.clone(), if held(o) { PeekResult::Busy } else { PeekResult::Free }))
                        .collect();
                    s.on_peek(now, answers);
                    s.recycle(owners);
                }
                // One turn of the owner's work: take the claim, work a batch, release.
                Action::Launch { owner, .. } => {
                    let left = items.entry(owner.clone()).or_default();
                    let took = (*left).min(5);
                    *left -= took;
                    turns.push((now.as_millis(), owner.to_string(), took));
                    let outcome =
                        if took == 0 { TurnOutcome::Done } else { TurnOutcome::Productive { more: *left > 0 } };
                    s.on_turn(now, &owner, outcome).expect("the owner runs: it was just launched");
                }
            }
        }
        while let Some(event) = s.poll_event() {
            if let Event::OwnerSkipped { reason: SkipReason::ClaimBusy, .. } = event {
                deferred += 1;
            }
        }
        // Nothing to do now: jump to the next timer, or stop when there is none.
        match s.next_deadline() {
            Some(deadline) => now = deadline.max(now + Duration::from_millis(1)),
            None => break,
        }
    }

    // tenant-a ran at once, three turns of 5, 5 and 2 (continuations skip the peek);
    // tenant-b was deferred on a jittered 5-15 s timer until its claim was free.
    let a: Vec<u32> = turns.iter().filter(|t| t.1 == "tenant-a").map(|t| t.2).collect();
    assert_eq!(a, [5, 5, 2]);
    let b_first = turns.iter().find(|t| t.1 == "tenant-b").expect("tenant-b ran");
    assert!(b_first.0 >= 12_000, "tenant-b launched only once its claim was free");
    assert!(deferred >= 1, "a held claim defers, it does not burn a turn");
    assert!(items.values().all(|&n| n == 0), "every item worked");
    for (at, owner, took) in &turns {
        println!("t={at:>6} ms  {owner}: {took} item(s)");
    }
    println!("{deferred} deferral(s), {} turn(s), no lost race", turns.len());
}

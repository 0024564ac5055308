//! The tick's lease over time, against the in-memory ports in virtual time: renewal
//! every third of the TTL, the deadline without renewal, and the holder's concurrency.

mod support;

use std::time::Duration;

use drain_core::event::{Event, LeaseOp};
use drain_core::guard::Loss;
use drain_core::tick::InFlight;
use drain_core::{ErrorKind, Switch};
use support::{Harness, stats};

#[test]
fn lease_is_renewed_every_third_of_the_ttl() {
    let mut h = Harness::with_delay(Duration::from_millis(9_500));
    h.cfg.lease_ttl = Duration::from_secs(30);
    // One submit at a time, so the drain lasts 66.5 s.
    h.cfg.in_flight = InFlight::Fixed;
    h.feed(&["a", "b", "c", "d", "e", "f", "g"]); // 66.5 s of submits, TTL 30 s
    let r = h.tick();
    assert_eq!(stats(&r).1, 7);
    assert!(!r.lease_lost);
    let renews = h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Renew, result: "renewed", .. }));
    assert_eq!(renews, 6, "66.5 s drain / 10 s period");
    assert_eq!(h.count(|e| matches!(e, Event::LeaseOp { op: LeaseOp::Release, result: "released", .. })), 1);
    assert_eq!(h.lease_value(), None);
}

/// Without renewal the lease lasts its time to live, so the drain stops at the
/// deadline (TTL less a tenth) instead of draining on under a lease another tick may
/// have taken.
#[test]
fn without_renewal_the_drain_stops_at_the_deadline() {
    let mut h = Harness::with_delay(Duration::from_secs(10));
    h.cfg.lease_ttl = Duration::from_secs(30);
    h.cfg.renew = Switch::Off;
    // One submit at a time, each starting at a known time.
    h.cfg.in_flight = InFlight::Fixed;
    h.feed(&["a", "b", "c", "d", "e", "f"]);
    let r = h.tick();
    assert!(r.lease_lost, "{r:?}");
    assert_eq!(h.target.submitted_ids(), ["a", "b", "c"], "submits start at 0, 10 and 20 s; the deadline is 27 s");
    assert_eq!(h.store.calls().get("renew"), None);
    assert_eq!(h.count(|e| matches!(e, Event::LeaseLost { loss: Loss::Expired, .. })), 1);
    let s = r.stats.unwrap();
    assert_eq!(s.received, s.submitted + s.abandoned, "every received message is settled");
}

/// A tick that holds the lease drains with `held_concurrency` (the capacity the lease
/// keeps from racing); one that does not (off, shadow, failing open) with
/// `concurrency`.
#[test]
fn the_lease_holder_drains_with_the_held_concurrency() {
    // (single-flight, store failing, concurrency seen)
    let cases = [(Switch::On, false, 8), (Switch::Off, false, 2), (Switch::Shadow, false, 2), (Switch::On, true, 2)];
    for (lease, failing, want) in cases {
        let mut h = Harness::with_delay(Duration::from_millis(100));
        (h.cfg.singleflight, h.cfg.concurrency, h.cfg.held_concurrency, h.cfg.batch) = (lease, 2, Some(8), 20);
        h.cfg.in_flight = InFlight::Fixed;
        h.cfg.atomic_claim = Switch::Off;
        if failing {
            h.store.set_failing(Some(ErrorKind::Connection));
        }
        let ids: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
        h.feed(&ids.iter().map(String::as_str).collect::<Vec<_>>());
        let r = h.tick();
        assert_eq!(stats(&r).1, 20, "{lease:?} failing {failing}");
        assert_eq!(h.target.max_in_flight(), want, "{lease:?} failing {failing}: {r:?}");
    }
}

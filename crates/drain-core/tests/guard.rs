//! The lease guard in virtual time: skipped, held and renewed, released on every
//! path, lost on `Lost` or at the deadline, and a holder frozen past its time to live
//! that never takes another step once it thaws.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use drain_core::event::{Event, LeaseOp};
use drain_core::guard::{Guarded, LeaseGuard, LeaseStatus, Loss};
use drain_core::memory::{ManualClock, MemoryStore, block_on};
use drain_core::ports::{Clock, LeaseName};
use drain_core::testkit::{RecordingObserver, TestRng};
use drain_core::{ErrorKind, LeaseToken, Switch, Time};
use futures::FutureExt;
use proptest::prelude::*;

const TTL: Duration = Duration::from_secs(30);

struct H {
    clock: Arc<ManualClock>,
    store: Arc<MemoryStore>,
    observer: RecordingObserver,
    lease: LeaseName,
}

impl H {
    fn new() -> Self {
        let clock = Arc::new(ManualClock::new());
        let store = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
        H { clock, store, observer: RecordingObserver::new(), lease: LeaseName::job("nightly") }
    }

    fn guard(&self) -> LeaseGuard<'_> {
        LeaseGuard::new(&*self.store, &*self.clock, self.lease.clone(), TTL).observer(&self.observer)
    }

    fn at(&self, secs: u64) -> Time {
        Time::from_millis(secs * 1_000)
    }

    fn ops(&self, op: LeaseOp, result: &str) -> usize {
        self.observer.count(|e| matches!(e, Event::LeaseOp { op: o, result: r, .. } if *o == op && *r == result))
    }
}

fn token(name: &str, seed: u64) -> LeaseToken {
    LeaseToken::generate(name, &mut TestRng::new(seed))
}

/// Steps of the guarded work: (who, second, fence).
type Log = Mutex<Vec<(&'static str, u64, u64)>>;

/// Work that takes a step every second until `until` (seconds on the clock),
/// logging each; with `check`, it asks the handle before each step.
async fn stepper(
    clock: &ManualClock,
    held: drain_core::guard::LeaseHandle,
    who: &'static str,
    until: u64,
    log: &Log,
    check: bool,
) -> u64 {
    let mut steps = 0;
    let fence = held.fence().map_or(0, |f| f.number());
    loop {
        let next = clock.now() + Duration::from_secs(1);
        clock.sleep_until(next).await;
        if clock.now() >= Time::from_millis(until * 1_000) || (check && held.check().is_err()) {
            return steps;
        }
        log.lock().unwrap().push((who, clock.now().as_millis() / 1_000, fence));
        steps += 1;
    }
}

#[test]
fn a_lease_held_elsewhere_skips_the_work() {
    let h = H::new();
    h.store.put_lease(&h.lease, "other:00000000000000000000000000000001", Duration::from_secs(12));
    let ran = Mutex::new(false);
    let out = block_on(&h.clock, h.guard().run(&token("me", 1), |_| async { *ran.lock().unwrap() = true }));
    match out {
        Guarded::Skipped { holder, remaining } => {
            assert_eq!((holder.as_str(), remaining), ("other", Duration::from_secs(12)))
        }
        other => panic!("{other:?}"),
    }
    assert!(!*ran.lock().unwrap());
    assert_eq!(h.store.calls().get("release"), None, "a skipped run releases nothing");
}

#[test]
fn held_work_gets_the_fence_is_renewed_every_third_and_released() {
    let h = H::new();
    h.store.set_fence(&h.lease, 41);
    let log = Log::default();
    let out = block_on(&h.clock, h.guard().run(&token("me", 1), |held| stepper(&h.clock, held, "me", 66, &log, true)));
    match out {
        Guarded::Ran { output, status, fence, loss } => {
            assert_eq!((output, status, fence.map(|f| f.number()), loss), (65, LeaseStatus::Held, Some(42), None));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.ops(LeaseOp::Renew, "renewed"), 6, "66 s of work / a 10 s period");
    assert_eq!(h.ops(LeaseOp::Release, "released"), 1);
    assert_eq!(h.store.lease_token(&h.lease), None);
}

/// Takes the lease over at `at` (as a later holder would after our TTL).
async fn steal(h: &H, at: u64) {
    h.clock.sleep_until(h.at(at)).await;
    h.store.put_lease(&h.lease, "thief:ffffffffffffffffffffffffffffffff", Duration::from_secs(300));
}

#[test]
fn a_renewal_that_finds_the_lease_gone_drops_the_work() {
    let h = H::new();
    let log = Log::default();
    let (guard, me) = (h.guard(), token("me", 1));
    let run = guard.run(&me, |held| stepper(&h.clock, held, "me", 100, &log, false));
    let (out, ()) = block_on(&h.clock, futures::future::join(run, steal(&h, 15)));
    assert!(matches!(out, Guarded::Stopped { loss: Loss::Lost, .. }), "{out:?}");
    let last = log.lock().unwrap().last().copied();
    assert_eq!(last, Some(("me", 19, 1)), "the renewal at 20 s stops the work before its step at 20 s");
    assert_eq!(h.observer.count(|e| matches!(e, Event::LeaseLost { loss: Loss::Lost, .. })), 1);
    assert_eq!(h.ops(LeaseOp::Release, "not_owner"), 1, "released on loss; the thief's lease stays");
    assert!(h.store.lease_token(&h.lease).is_some_and(|t| t.starts_with("thief:")));
}

#[test]
fn told_work_learns_of_the_loss_and_finishes_itself() {
    let h = H::new();
    let log = Log::default();
    let (guard, me) = (h.guard().tell_on_loss(), token("me", 1));
    let (clock, log_ref) = (&*h.clock, &log);
    let run = guard.run(&me, |held| async move {
        let steps = stepper(clock, held.clone(), "me", 100, log_ref, true).await;
        (steps, held.lost().await)
    });
    let (out, ()) = block_on(&h.clock, futures::future::join(run, steal(&h, 15)));
    match out {
        Guarded::Ran { output, loss, .. } => assert_eq!((output, loss), ((19, Loss::Lost), Some(Loss::Lost))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn without_a_confirmed_renewal_the_lease_is_lost_at_the_deadline() {
    let h = H::new();
    let log = Log::default();
    let fail = async {
        h.clock.sleep_until(h.at(5)).await;
        h.store.set_failing(Some(ErrorKind::Timeout));
    };
    let (guard, me) = (h.guard(), token("me", 1));
    let run = guard.run(&me, |held| stepper(&h.clock, held, "me", 100, &log, false));
    let (out, ()) = block_on(&h.clock, futures::future::join(run, fail));
    assert!(matches!(out, Guarded::Stopped { loss: Loss::Expired, .. }), "{out:?}");
    assert_eq!(h.ops(LeaseOp::Renew, "error"), 2, "at 10 and 20 s");
    let last = log.lock().unwrap().last().copied();
    assert_eq!(last, Some(("me", 26, 1)), "the deadline is 27 s: the TTL less a tenth, from the acquire");
    assert_eq!(h.clock.now(), h.at(27));
}

/// `inner`, not polled at all between `from` and `until` (a frozen process: its
/// timers and its renewals do not run, while the clock goes on).
struct Frozen<'a, F> {
    inner: Pin<Box<F>>,
    clock: &'a ManualClock,
    from: Time,
    until: Time,
    thaw: Option<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>,
}

impl<F: Future> Future for Frozen<'_, F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let now = self.clock.now();
        if now >= self.from && now < self.until {
            let (clock, until) = (self.clock, self.until);
            let thaw = self.thaw.get_or_insert_with(|| clock.sleep_until(until));
            if thaw.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        self.inner.as_mut().poll(cx)
    }
}

fn frozen<'a, F: Future>(clock: &'a ManualClock, from: u64, until: u64, inner: F) -> Frozen<'a, F> {
    let t = |s: u64| Time::from_millis(s * 1_000);
    Frozen { inner: Box::pin(inner), clock, from: t(from), until: t(until), thaw: None }
}

/// A holder frozen from 5 s to 60 s, past its 30 s lease; another holder takes the
/// lease at 35 s and works until 45 s. Once thawed, the first takes no step, told or
/// dropped, and the second's steps carry the larger fence.
#[test]
fn a_holder_frozen_past_its_ttl_takes_no_step_once_it_thaws() {
    for tell in [false, true] {
        let h = H::new();
        let log = Log::default();
        let mut first = h.guard();
        if tell {
            first = first.tell_on_loss();
        }
        let a_token = token("a", 1);
        let a = first.run(&a_token, |held| stepper(&h.clock, held, "a", 100, &log, tell));
        let b = async {
            h.clock.sleep_until(h.at(35)).await;
            h.guard().run(&token("b", 2), |held| stepper(&h.clock, held, "b", 45, &log, tell)).await
        };
        let (a, b) = block_on(&h.clock, futures::future::join(frozen(&h.clock, 5, 60, a), b));
        if tell {
            assert!(matches!(a, Guarded::Ran { loss: Some(Loss::Expired), .. }), "{a:?}");
        } else {
            assert!(matches!(a, Guarded::Stopped { loss: Loss::Expired, .. }), "{a:?}");
        }
        assert!(matches!(b, Guarded::Ran { loss: None, .. }), "{b:?}");
        let log = log.lock().unwrap().clone();
        let a_steps: Vec<u64> = log.iter().filter(|s| s.0 == "a").map(|s| s.1).collect();
        assert_eq!(a_steps, [1, 2, 3, 4], "tell {tell}: nothing after the freeze");
        assert!(log.iter().filter(|s| s.0 == "b").all(|s| s.2 == 2 && (36..45).contains(&s.1)), "{log:?}");
    }
}

#[test]
fn a_panic_is_raised_again_after_the_release() {
    let h = H::new();
    let (guard, me) = (h.guard(), token("me", 1));
    let run = guard.run(&me, |_| async {
        h.clock.sleep_until(h.at(3)).await;
        panic!("the job broke");
    });
    let caught = std::panic::catch_unwind(AssertUnwindSafe(|| block_on(&h.clock, run)));
    let message = caught.expect_err("re-raised").downcast::<&str>().map(|m| *m);
    assert_eq!(message.ok(), Some("the job broke"));
    assert_eq!(h.ops(LeaseOp::Release, "released"), 1);
    assert_eq!(h.store.lease_token(&h.lease), None);
}

#[test]
fn a_store_error_at_acquire_refuses_unless_the_guard_fails_open() {
    // (error kind, fail open, outcome, releases: a timed-out acquire may have landed)
    let cases = [
        (ErrorKind::Connection, false, "refused", 0),
        (ErrorKind::Timeout, false, "refused", 1),
        (ErrorKind::Connection, true, "fail_open", 0),
        (ErrorKind::Timeout, true, "fail_open", 1),
    ];
    for (kind, open, want, releases) in cases {
        let h = H::new();
        h.store.set_failing(Some(kind));
        let guard = if open { h.guard().fail_open() } else { h.guard() };
        let out = block_on(&h.clock, guard.run(&token("me", 1), |held| async move { held.fence().is_none() }));
        let got = match out {
            Guarded::Refused(e) => {
                assert_eq!(e.kind, kind);
                "refused"
            }
            Guarded::Ran { output: true, status: LeaseStatus::FailOpen, fence: None, loss: None } => "fail_open",
            other => panic!("{other:?}"),
        };
        assert_eq!((got, h.store.calls().get("release").copied().unwrap_or(0)), (want, releases), "{kind:?} {open}");
    }
}

#[test]
fn off_never_touches_the_store_and_shadow_never_stops_the_work() {
    let h = H::new();
    let out = block_on(&h.clock, h.guard().mode(Switch::Off).run(&token("me", 1), |_| async { 7 }));
    assert!(matches!(out, Guarded::Ran { output: 7, status: LeaseStatus::Off, fence: None, loss: None }), "{out:?}");
    assert_eq!(h.store.total_calls(), 0);

    h.store.put_lease(&h.lease, "other:00000000000000000000000000000001", Duration::from_secs(60));
    let out = block_on(&h.clock, h.guard().mode(Switch::Shadow).run(&token("me", 2), |_| async { 8 }));
    assert!(matches!(out, Guarded::Ran { output: 8, status: LeaseStatus::ShadowWouldSkip, .. }), "{out:?}");

    // Shadow takes a free lease, and a loss it finds is counted, never acted on.
    let h = H::new();
    let log = Log::default();
    let (guard, me) = (h.guard().mode(Switch::Shadow), token("me", 3));
    let run = guard.run(&me, |held| stepper(&h.clock, held, "me", 40, &log, true));
    let (out, ()) = block_on(&h.clock, futures::future::join(run, steal(&h, 15)));
    match out {
        Guarded::Ran { output, status, fence, loss } => {
            assert_eq!((output, status, fence, loss), (39, LeaseStatus::ShadowAcquired, None, Some(Loss::Lost)));
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the store's failures and however long the holder is frozen, the work
    /// takes a step only while the store holds its lease; and when the store never
    /// fails and the holder never freezes, the work runs to its end.
    #[test]
    fn steps_happen_only_while_the_store_holds_the_lease(
        outages in proptest::collection::vec((0u64..120, 1u64..40), 0..4),
        freeze in proptest::option::of((0u64..100, 1u64..80)),
        ttl_s in 3u64..40,
    ) {
        let h = H::new();
        let ttl = Duration::from_secs(ttl_s);
        let me = token("me", 1);
        let held_at_each_step = Mutex::new(Vec::new());
        let store = &*h.store;
        let guard = LeaseGuard::new(store, &*h.clock, h.lease.clone(), ttl);
        let work = |_| async {
            for _ in 0..120 {
                h.clock.sleep_until(h.clock.now() + Duration::from_secs(1)).await;
                let ours = store.lease_token(&h.lease).as_deref() == Some(me.as_str());
                held_at_each_step.lock().unwrap().push(ours);
            }
        };
        let failures = async {
            for (start, len) in &outages {
                h.clock.sleep_until(h.at(*start).max(h.clock.now())).await;
                store.set_failing(Some(ErrorKind::Timeout));
                h.clock.sleep_until(h.clock.now() + Duration::from_secs(*len)).await;
                store.set_failing(None);
            }
        };
        let (from, len) = freeze.unwrap_or((0, 0));
        let run = frozen(&h.clock, from, from + len, guard.run(&me, work).boxed());
        let (out, ()) = block_on(&h.clock, futures::future::join(run, failures));
        let steps = held_at_each_step.into_inner().unwrap();
        prop_assert!(steps.iter().all(|ours| *ours), "a step ran while the lease was not ours: {steps:?}");
        if outages.is_empty() && freeze.is_none() {
            prop_assert!(matches!(out, Guarded::Ran { loss: None, .. }), "{out:?}");
            prop_assert_eq!(steps.len(), 120);
        }
    }
}

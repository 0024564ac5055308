//! The scenarios both fault suites run, each on a [`World`] its test made (the
//! test picks the server's start arguments and any store-specific setting first):
//! the server dead before the tick, killed while an acquire, a claim or a release
//! is in flight, killed mid-drain, frozen past the lease TTL, answering slower than
//! the client's timeout (each store's test slows its own server). What only one
//! store does stays in its test file.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use drain_core::event::{Event, LeaseOp, MessageOutcome, TickOutcome};
use drain_core::guard::{LeaseStatus, Loss};
use drain_core::testkit::message;
use drain_core::tick::{ClaimHealth, TickReport};

use drain_e2e::answered;

use super::{FaultServer, FaultStore, KillDuring, Op, World, lock, stats};

/// The world a scenario was written for: `messages` queued, submits taking `delay`.
#[track_caller]
fn given<S: FaultStore, V: FaultServer>(w: &World<S, V>, messages: usize, delay: Duration) {
    assert_eq!((w.ids.len(), w.target.delay), (messages, delay), "the scenario's world");
}

/// Dead before the tick (12 messages, no delay): twice, the acquire fails, the tick
/// drains anyway (fail open), every claim fails so nothing is submitted (fail
/// closed) and the first wholly abandoned batch ends the tick; once the server is
/// back the same store drains everything at once, each message once. The world's
/// timeouts are patient (`World::patient`): the faults here are refusals, and an
/// acquire that a starved client let time out would mark the store down and the
/// tick would receive nothing (`crates/drain-core/src/tick/health.rs`).
pub(crate) async fn dead_before_the_tick<S: FaultStore, V: FaultServer>(mut w: World<S, V>) {
    given(&w, 12, Duration::ZERO);
    w.server().kill();
    for round in 1..=2 {
        let r = w.tick().await;
        assert_eq!(r.lease, Some(LeaseStatus::FailOpen), "round {round}: {r:?}");
        assert_eq!(r.fence, None);
        assert_eq!(stats(&r), (5, 0, 0, 5), "round {round}: one batch, all abandoned, then the tick ends");
        assert_eq!(r.claims, ClaimHealth::Failed, "{r:?}");
        assert!(w.target.ids().is_empty(), "no submit without a claim");
        assert_eq!(w.source.ready_len(), 12, "every message is back in the queue");
        assert_eq!(w.lease_ops(LeaseOp::Acquire, "error"), round);
        assert_eq!(w.ticks(TickOutcome::FailOpen), round);
        assert_eq!(w.messages(MessageOutcome::ClaimError), 5 * round);
        assert_eq!(
            w.lease_ops(LeaseOp::Release, "error") + w.lease_ops(LeaseOp::Release, "released"),
            0,
            "nothing to release"
        );
    }

    w.server().restart();
    let reports = w.drain_until_done(Duration::from_secs(10)).await;
    assert!(reports.len() <= 2, "the same store recovers at once: {reports:?}");
    w.assert_exactly_once();
    w.assert_lease_works().await;
}

/// SIGKILL while the first acquire is on the wire (8 messages, no delay): fail
/// open, claims fail closed, recovery on the same store after a restart.
pub(crate) async fn killed_while_the_acquire_is_in_flight<S: FaultStore, V: FaultServer>(mut w: World<S, V>) {
    given(&w, 8, Duration::ZERO);
    let faulty = KillDuring::new(w.store.clone(), w.server.clone(), Op::Acquire, 1);
    let r = w.tick_with(&faulty, &faulty).await;
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen), "{r:?}");
    assert_eq!(stats(&r), (5, 0, 0, 5), "{r:?}");
    assert!(w.target.ids().is_empty(), "no submit without a claim");
    assert_eq!(w.lease_ops(LeaseOp::Acquire, "error"), 1);
    assert_eq!(w.messages(MessageOutcome::ClaimError), 5);

    w.server().restart();
    w.drain_until_done(Duration::from_secs(10)).await;
    w.assert_exactly_once();
    w.assert_lease_works().await;
}

/// SIGKILL from inside the second submit (15 messages, 20 ms a submit), after the
/// first batch's claims were taken: that batch is still submitted; settling it
/// fails, in the call that takes the second batch's claims, so the second batch,
/// received by then, goes back unsubmitted; a failed claim store ends the
/// receiving; the release fails and is counted; after a restart everything else
/// goes through once. The reports of the
/// drain after the restart, for what the store keeps across it.
pub(crate) async fn killed_mid_drain<S: FaultStore, V: FaultServer>(mut w: World<S, V>) -> Vec<TickReport> {
    given(&w, 15, Duration::from_millis(20));
    let server = w.server.clone();
    w.target.on_call(2, move || lock(&server).kill());
    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    assert!(r.fence.is_some(), "{r:?}");
    assert_eq!(stats(&r), (10, 5, 0, 5), "batch 1 (claimed) submitted, batch 2 back, then nothing more received");
    assert_eq!(r.claims, ClaimHealth::Failed, "{r:?}");
    assert_eq!(w.target.ids(), w.ids[..5], "only the first, claimed batch reached the target");
    assert_eq!(w.messages(MessageOutcome::ClaimSettleFailed), 5);
    assert_eq!(w.messages(MessageOutcome::ClaimError), 5, "batch 2, whose claims went with batch 1's settlement");
    assert_eq!(w.lease_ops(LeaseOp::Release, "error"), 1, "the failed release is counted (the TTL frees the lease)");
    assert_eq!(w.source.ready_len(), 10);

    w.server().restart();
    let reports = w.drain_until_done(Duration::from_secs(10)).await;
    w.assert_exactly_once();
    w.assert_lease_works().await;
    reports
}

/// SIGKILL while the second batch's claim call is in flight (15 messages, no
/// delay): that batch fails closed, the first is submitted, the release fails and
/// is counted; recovery on the same store after a restart.
pub(crate) async fn killed_while_a_claim_is_in_flight<S: FaultStore, V: FaultServer>(mut w: World<S, V>) {
    given(&w, 15, Duration::ZERO);
    let faulty = KillDuring::new(w.store.clone(), w.server.clone(), Op::Claim, 2);
    let r = w.tick_with(&faulty, &faulty).await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    assert_eq!(stats(&r), (10, 5, 0, 5), "{r:?}");
    assert_eq!(w.target.ids(), w.ids[..5]);
    assert_eq!(w.messages(MessageOutcome::ClaimError), 5);
    assert_eq!(w.messages(MessageOutcome::Submitted), 5);
    assert_eq!(w.lease_ops(LeaseOp::Release, "error"), 1);

    w.server().restart();
    w.drain_until_done(Duration::from_secs(10)).await;
    w.assert_exactly_once();
    w.assert_lease_works().await;
}

/// SIGKILL while the release is in flight (10 messages, no delay, on a server whose
/// restart keeps its data), with a 2.5 s lease TTL: the release fails and is
/// counted; after the restart the lease still holds our token until its TTL frees
/// it (a tick meanwhile is skipped); the fence survived and grows, and redeliveries
/// of the ten are duplicates (their done claims survived).
pub(crate) async fn killed_while_the_release_is_in_flight<S: FaultStore, V: FaultServer>(mut w: World<S, V>) {
    given(&w, 10, Duration::ZERO);
    w.cfg.lease_ttl = Duration::from_millis(2500);
    let faulty = KillDuring::new(w.store.clone(), w.server.clone(), Op::Release, 1);
    let r = w.tick_with(&faulty, &faulty).await;
    assert_eq!(stats(&r), (10, 10, 0, 0), "{r:?}");
    let first = r.fence.expect("the lease's fence");
    assert_eq!(w.lease_ops(LeaseOp::Release, "error"), 1);
    let orphan = w.last_token.clone().expect("token");

    w.server().restart();
    let lease = w.lease_key();
    let store = w.store.clone();
    let held =
        answered(20, Duration::from_millis(50), || store.peek(&lease)).await.expect("the lease outlived the kill");
    assert_eq!((held.holder.as_str(), held.fence), (orphan.holder(), first), "still ours, nobody released it");
    assert!(held.remaining <= w.cfg.lease_ttl, "{held:?}");
    let r = w.tick().await;
    assert!(r.is_skipped(), "held until the TTL frees it: {r:?}");

    // Redeliveries of the ten (a broker that lost their completions).
    for id in w.ids.clone() {
        w.source.push(message(&id));
    }
    tokio::time::sleep(held.remaining + Duration::from_millis(100)).await;
    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "the TTL freed it: {r:?}");
    assert!(r.fence.is_some_and(|f| f > first), "the fence survived the restart and still grows: {r:?}");
    assert_eq!(stats(&r), (10, 0, 10, 0), "the done claims survived: duplicates, not submits");
    assert_eq!(w.lease_ops(LeaseOp::Release, "released"), 1);
    w.assert_exactly_once_allowing_redeliveries();
}

/// SIGSTOP from the first submit for 2 s, twice the 1 s lease TTL (25 messages in
/// one batch, 120 ms a submit): no renewal is confirmed while it is frozen, so the
/// lease is lost at its deadline (0.9 s after the acquire) without waiting for the
/// store, the drain is cancelled (the rest abandoned) and the release, once the store
/// thaws, is `NotOwner`. Then a tick while it is frozen fails open and receives
/// nothing, and the same store drains everything exactly once.
pub(crate) async fn frozen_past_the_ttl<S: FaultStore, V: FaultServer>(mut w: World<S, V>) {
    given(&w, 25, Duration::from_millis(120));
    w.cfg.lease_ttl = Duration::from_secs(1);
    w.cfg.batch = 25;
    let (server, thaw) = (w.server.clone(), w.server.clone());
    let (paused_tx, paused_rx) = mpsc::channel();
    w.target.on_call(1, move || {
        lock(&server).pause();
        let _ = paused_tx.send(());
    });
    w.spawn(move || {
        paused_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("the first submit froze {}: {e}", V::NAME));
        std::thread::sleep(Duration::from_secs(2));
        lock(&thaw).resume();
    });
    let r = w.tick().await;
    w.join();
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    assert!(r.lease_lost, "the deadline passed with no renewal confirmed: {r:?}");
    assert_eq!(w.lease_ops(LeaseOp::Renew, "renewed"), 0, "no renewal is confirmed while frozen");
    assert_eq!(w.count(|e| matches!(e, Event::LeaseLost { loss: Loss::Expired, .. })), 1);
    assert_eq!(w.count(|e| matches!(e, Event::LeaseLost { .. })), 1);
    // The release comes after the settlement, which may time out on the frozen store
    // (then the release is skipped, counted as an error, and the TTL frees the lease).
    assert_eq!(w.lease_ops(LeaseOp::Release, "released"), 0, "nothing of anyone else's is deleted");
    assert_eq!(w.lease_ops(LeaseOp::Release, "not_owner") + w.lease_ops(LeaseOp::Release, "error"), 1);
    let (received, submitted, _, abandoned) = stats(&r);
    assert_eq!((received, submitted + abandoned), (25, 25));
    assert!(abandoned >= 1 && w.messages(MessageOutcome::Cancelled) as u64 == abandoned, "{r:?}");
    assert_eq!(w.source.ready_len() as u64, abandoned);

    // Frozen before a tick: the acquire times out (fail open), and the store is then
    // known down for the rest of the tick: the claims would fail closed, so nothing
    // is received at all. Requests already sent may still run when it thaws, leaving
    // a lease that nobody holds: a short TTL lets it lapse here.
    w.cfg.claim_pending_ttl = Duration::from_secs(1);
    w.cfg.batch = 5;
    let before = w.target.ids().len();
    let (ready, claim_errors) = (w.source.ready_len(), w.messages(MessageOutcome::ClaimError));
    w.server().pause();
    let r = w.tick().await;
    w.server().resume();
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen), "{r:?}");
    assert_eq!(stats(&r), (0, 0, 0, 0), "{r:?}");
    assert_eq!(r.claims, ClaimHealth::Failed, "{r:?}");
    assert_eq!(w.target.ids().len(), before, "nothing submitted while the claim store was frozen");
    assert_eq!(w.source.ready_len(), ready, "nothing received");
    assert_eq!(w.messages(MessageOutcome::ClaimError), claim_errors);

    w.drain_until_done(Duration::from_secs(15)).await;
    w.assert_exactly_once();
    w.assert_lease_works().await;
}

/// Which call [`slower_than_the_timeout`] slows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slowed {
    /// The claim settlement of the first batch, from the third submit on.
    Settlement,
    /// The lease's acquire before a tick.
    Acquire,
}

/// Answers slower than the client's response timeout (15 messages, 50 ms a submit),
/// twice. `slow` makes the server slow for the call it is given, returns once it is,
/// and hands back the thread that ends the slowness. Mid-drain the first batch's
/// settlement times out (with the third batch's claims: that batch goes back; the
/// second, claimed while the first was submitted, is submitted and its settlement
/// fails at once on the store known down) and the tick receives nothing more
/// (claims fail closed);
/// before a tick the acquire times out, the tick fails open, and with the store
/// known down it receives nothing. After each slowness ended, `unharmed` checks what
/// the store's test promises besides (its connections kept, say), and the same store
/// drains the rest, every message once. (A request that timed out may still run once
/// the server answers again; its lease or pending claims then lapse with their TTLs.)
pub(crate) async fn slower_than_the_timeout<S: FaultStore, V: FaultServer>(
    mut w: World<S, V>,
    slow: impl Fn(Slowed) -> JoinHandle<()> + Clone + Send + 'static,
    unharmed: impl Fn(&World<S, V>, &TickReport),
) {
    given(&w, 15, Duration::from_millis(50));
    let (slowed_tx, slowed_rx) = mpsc::channel();
    let slow_settlement = slow.clone();
    w.target.on_call(3, move || {
        let _ = slowed_tx.send(slow_settlement(Slowed::Settlement));
    });
    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::Held), "{r:?}");
    assert_eq!(
        stats(&r),
        (15, 10, 0, 5),
        "batch 1's settlement timed out, batch 3 went back, nothing more received: {r:?}"
    );
    assert_eq!(r.claims, ClaimHealth::Failed, "{r:?}");
    assert_eq!(w.target.ids(), w.ids[..10]);
    assert_eq!(w.messages(MessageOutcome::ClaimSettleFailed), 10, "batches 1 and 2");
    slowed_rx.recv().expect("the third submit slowed the server").join().expect("the slowness ended");
    unharmed(&w, &r);
    w.drain_until_done(Duration::from_secs(10)).await;
    w.assert_exactly_once();

    for id in ["late-1", "late-2", "late-3"] {
        w.ids.push(id.to_owned());
        w.source.push(message(id));
    }
    let (acquire_errors, claim_errors) =
        (w.lease_ops(LeaseOp::Acquire, "error"), w.messages(MessageOutcome::ClaimError));
    let slowness = slow(Slowed::Acquire);
    let r = w.tick().await;
    assert_eq!(r.lease, Some(LeaseStatus::FailOpen), "{r:?}");
    assert_eq!(stats(&r), (0, 0, 0, 0), "the acquire timed out: no receive on a store known down: {r:?}");
    assert_eq!(w.lease_ops(LeaseOp::Acquire, "error"), acquire_errors + 1);
    assert_eq!(w.messages(MessageOutcome::ClaimError), claim_errors);
    slowness.join().expect("the slowness ended");
    unharmed(&w, &r);
    w.drain_until_done(Duration::from_secs(10)).await;
    w.assert_exactly_once();
    w.assert_lease_works().await;
}

//! An async driver for the [`Scheduler`]: batched peeks through [`OwnerClaims`],
//! owner turns through the embedder's [`OwnerWork`], timers on the [`Clock`] port,
//! events to the [`Observer`]. Spawns nothing: turns run concurrently inside the one
//! future [`drive`] returns, at most `workers` at a time.
//!
//! With release wake-up on (claim-aware On, release wake not Off), a store that offers
//! the wake-up ([`OwnerClaims::release_wake`]) and work that names its instance
//! ([`OwnerWork::instance`]), the driver subscribes to the instance's release
//! notifications and feeds them to [`Scheduler::on_release`], its peeks register the
//! instance as a waiter on every claim found held, and each turn is told so it can
//! register on a lost race ([`OwnerTurns`](super::OwnerTurns) does). Nothing to wire.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use async_trait::async_trait;
use futures::future::{BoxFuture, poll_fn};
use futures::stream::{FuturesUnordered, Stream, StreamExt};

use super::{Action, Entry, OwnerId, OwnerState, PeekResult, Peeked, Scheduler, TurnOutcome, Woken};
use crate::error::{ErrorKind, PortError};
use crate::event::Event;
use crate::ports::{
    Clock, DrainStamps, Observer, OwnerClaim, OwnerClaims, ReleaseWake, Releases, StampedClaim, Waiter,
};
use crate::switch::Switch;
use crate::time::Time;

/// The owner's drain work. [`OwnerTurns`](super::OwnerTurns) is the ready-made one
/// around a work function; implement this trait only to take claims your own way.
#[async_trait]
pub trait OwnerWork: Send + Sync {
    /// Run one turn for `owner`: take the owner's claim (a lost race is
    /// [`TurnOutcome::ClaimBusy`]; with `waiter`, register it as a waiter in the same
    /// step, [`ReleaseWake::acquire_or_wait`]), do a bounded amount of work, release the
    /// claim, and say whether more remains.
    async fn turn(&self, owner: &OwnerId, entry: Entry, waiter: Option<&Waiter>) -> TurnOutcome;

    /// The scheduler could not keep this intent (timer cap reached, or shutting
    /// down): serve it in the next pass. Called, never dropped.
    fn hand_off(&self, owner: OwnerId);

    /// Whether the driver must stop, as on shutdown: a permanent error that retrying
    /// cannot mend. Asked after every turn.
    fn must_stop(&self) -> bool {
        false
    }

    /// This instance's id, under which the driver subscribes to release wake-ups
    /// (`None`: it does not).
    fn instance(&self) -> Option<&str> {
        None
    }
}

/// The ports the driver uses.
#[derive(Clone, Copy)]
pub struct DriverPorts<'a> {
    /// Read-only peeks at the owners' claims (one [`OwnerClaims::peek_owners`] per
    /// batch; [`ReleaseWake::peek_and_wait`] while this instance waits for releases).
    /// Needed only while claim-aware admission computes; without it every peek counts
    /// as an error and the owner is admitted.
    pub claims: Option<&'a dyn OwnerClaims>,
    /// The turns.
    pub work: &'a dyn OwnerWork,
    /// Time.
    pub clock: &'a dyn Clock,
    /// Decisions.
    pub observer: &'a dyn Observer,
}

/// One batched peek: the owners asked about, when it was sent, and what the store said.
type PeekDone = (Vec<OwnerId>, Time, Result<Vec<StampedClaim>, PortError>);
/// The armed timer: its deadline and the sleep.
type Timer<'a> = (Time, Pin<Box<dyn Future<Output = ()> + Send + 'a>>);

enum Wake {
    Shutdown,
    /// Every request that was ready, and whether the input ended after them.
    Requests(Vec<OwnerId>, bool),
    Turn(OwnerId, TurnOutcome),
    Peeked(PeekDone),
    /// Every release notification that was ready, and whether their stream ended.
    Releases(Vec<OwnerId>, bool),
    Timer,
}

/// Drive `scheduler` until `requests` ends and nothing is pending, or until
/// `shutdown` resolves. On shutdown the scheduler is closed: every pending intent,
/// and every running owner that would continue, goes to [`OwnerWork::hand_off`];
/// running turns are awaited, not dropped. A request that arrives after close is
/// handed off too.
pub async fn drive<R, S, F>(scheduler: &mut Scheduler<R>, ports: DriverPorts<'_>, requests: S, shutdown: F)
where
    R: rand::Rng + Send,
    S: Stream<Item = OwnerId> + Unpin + Send,
    F: Future<Output = ()> + Send,
{
    drive_with_releases(scheduler, ports, requests, futures::stream::empty(), shutdown).await;
}

/// [`drive`], also feeding `releases` to [`Scheduler::on_release`]: each item says
/// that the owner's claim was released elsewhere (e.g. a notification the release
/// published to this instance, a registered waiter). With
/// [`release_wake`](super::SchedulerConfig::release_wake) On, an owner on a claim
/// retry timer is queued (and peeked) at once, and [`Event::ReleaseWake`] is
/// observed (mode Shadow: the event only); Off ignores releases.
///
/// A release that arrives while its owner's peek or turn is still outstanding (the
/// notification overtook the reply that made this instance a waiter) is kept and
/// applied when that peek or turn ends, if the owner then waits for the claim. The
/// end of `releases` ends nothing: the driver stops as [`drive`] does.
pub(crate) async fn drive_with_releases<R, S, L, F>(
    scheduler: &mut Scheduler<R>,
    ports: DriverPorts<'_>,
    mut requests: S,
    releases: L,
    shutdown: F,
) where
    R: rand::Rng + Send,
    S: Stream<Item = OwnerId> + Unpin + Send,
    L: Stream<Item = OwnerId> + Unpin + Send,
    F: Future<Output = ()> + Send,
{
    let (wake, waiter, heard) = subscribe(scheduler, ports).await;
    // Peeks ask for drain stamps while skipping served requests computes.
    let marks: Option<&dyn DrainStamps> =
        ports.claims.and_then(|c| c.drain_stamps()).filter(|_| scheduler.config().skip_served.computes());
    let mut releases = futures::stream::select(releases.boxed(), heard);
    let mut shutdown = Some(Box::pin(shutdown));
    let mut input_open = true;
    let mut releases_open = true;
    // Releases that overtook their owner's peek or turn.
    let mut early: HashSet<OwnerId> = HashSet::new();
    let mut turns: FuturesUnordered<BoxFuture<'_, (OwnerId, TurnOutcome)>> = FuturesUnordered::new();
    let mut peeks: FuturesUnordered<BoxFuture<'_, PeekDone>> = FuturesUnordered::new();
    let mut timer: Option<Timer<'_>> = None;

    loop {
        let now = ports.clock.now();
        scheduler.handle_timeout(now);
        while let Some(action) = scheduler.poll_action(now) {
            match action {
                Action::Peek(owners) => {
                    let waiter = waiter.as_ref();
                    peeks.push(Box::pin(async move {
                        let sent = ports.clock.now();
                        let unmarked = |found: Vec<OwnerClaim>| {
                            found.into_iter().map(|claim| StampedClaim { claim, drained: None }).collect()
                        };
                        let r = match (ports.claims, marks, wake.zip(waiter)) {
                            (Some(_), Some(marks), wait) => marks.peek_stamped(&owners, wait.map(|(_, w)| w)).await,
                            (Some(_), None, Some((wake, waiter))) => {
                                wake.peek_and_wait(&owners, waiter).await.map(unmarked)
                            }
                            (Some(claims), None, None) => claims.peek_owners(&owners).await.map(unmarked),
                            (None, ..) => Err(PortError::new(ErrorKind::Config, "no owner claims to peek at")),
                        };
                        (owners, sent, r)
                    }));
                }
                Action::Launch { owner, entry } => {
                    let waiter = waiter.as_ref();
                    turns.push(Box::pin(async move {
                        let outcome = ports.work.turn(&owner, entry, waiter).await;
                        (owner, outcome)
                    }));
                }
            }
        }
        while let Some(event) = scheduler.poll_event() {
            ports.observer.observe(&event);
        }
        while let Some(owner) = scheduler.poll_handoff() {
            ports.work.hand_off(owner);
        }
        let idle = turns.is_empty() && peeks.is_empty();
        if idle
            && (scheduler.is_closed()
                || (!input_open && scheduler.next_deadline().is_none() && scheduler.queue_len() == 0))
        {
            return;
        }
        match scheduler.next_deadline() {
            Some(d) if timer.as_ref().is_none_or(|(t, _)| *t != d) => timer = Some((d, ports.clock.sleep_until(d))),
            None => timer = None,
            _ => {}
        }

        let wake = poll_fn(|cx| {
            if let Some(s) = shutdown.as_mut()
                && s.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Wake::Shutdown);
            }
            if !turns.is_empty()
                && let Poll::Ready(Some((o, out))) = turns.poll_next_unpin(cx)
            {
                return Poll::Ready(Wake::Turn(o, out));
            }
            if !peeks.is_empty()
                && let Poll::Ready(Some(done)) = peeks.poll_next_unpin(cx)
            {
                return Poll::Ready(Wake::Peeked(done));
            }
            // Take every request that is ready, so their peeks go out as one batch.
            if input_open && let Some((batch, ended)) = ready_items(&mut requests, cx) {
                return Poll::Ready(Wake::Requests(batch, ended));
            }
            if releases_open && let Some((batch, ended)) = ready_items(&mut releases, cx) {
                return Poll::Ready(Wake::Releases(batch, ended));
            }
            if let Some((_, sleep)) = timer.as_mut()
                && sleep.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Wake::Timer);
            }
            Poll::Pending
        })
        .await;

        let now = ports.clock.now();
        match wake {
            Wake::Shutdown => {
                shutdown = None;
                input_open = false;
                for owner in scheduler.close() {
                    ports.work.hand_off(owner);
                }
            }
            Wake::Requests(owners, ended) => {
                for owner in owners {
                    if let Err(super::Closed) = scheduler.request(now, owner.clone()) {
                        ports.work.hand_off(owner);
                    }
                }
                input_open = !ended;
            }
            Wake::Turn(owner, outcome) => {
                // The owner is running: it was launched by this loop.
                let _ = scheduler.on_turn(now, &owner, outcome);
                if early.remove(&owner) {
                    release(scheduler, ports, now, &owner);
                }
                if ports.work.must_stop() && !scheduler.is_closed() {
                    // A permanent error: stop as on shutdown (running turns finish).
                    shutdown = None;
                    input_open = false;
                    for owner in scheduler.close() {
                        ports.work.hand_off(owner);
                    }
                }
            }
            Wake::Peeked((owners, sent, result)) => {
                let results: Vec<(OwnerId, Peeked)> = match result {
                    Ok(found) if found.len() == owners.len() => owners
                        .into_iter()
                        .zip(found)
                        .map(|(o, c)| {
                            let claim = match c.claim {
                                OwnerClaim::Busy { .. } => PeekResult::Busy,
                                OwnerClaim::Free => PeekResult::Free,
                            };
                            // The store answered after `sent`: its mark began no later
                            // than `sent` less the mark's age, on this clock; an owner
                            // never drained is marked at the origin.
                            let at = c.drained.map_or(Time::ZERO, |ago| drained_before(sent, ago));
                            let drained = marks.map(|_| at);
                            (o, Peeked { claim, drained })
                        })
                        .collect(),
                    // An error, or an answer we cannot match to the owners: admit (as before).
                    _ => owners.into_iter().map(|o| (o, Peeked::from(PeekResult::Error))).collect(),
                };
                // Only when a release overtook a peek is there anything to look up.
                let answered: Vec<OwnerId> =
                    if early.is_empty() { Vec::new() } else { results.iter().map(|(o, _)| o.clone()).collect() };
                scheduler.on_peek(now, results);
                for owner in answered {
                    if early.remove(&owner) {
                        release(scheduler, ports, now, &owner);
                    }
                }
            }
            Wake::Releases(owners, ended) => {
                releases_open = !ended;
                for owner in owners {
                    if !release(scheduler, ports, now, &owner)
                        && matches!(scheduler.state_of(&owner), Some(OwnerState::Peeking | OwnerState::Running { .. }))
                    {
                        early.insert(owner);
                    }
                }
            }
            Wake::Timer => timer = None,
        }
    }
}

/// The store's release wake-up when the driver uses it (claim-aware On, release wake not
/// Off, a store that offers it, work that names its instance), with this instance as a
/// waiter and the releases it hears; a subscription that fails leaves the instance
/// unregistered (the retry window still serves).
async fn subscribe<'a, R: rand::Rng>(
    scheduler: &Scheduler<R>,
    ports: DriverPorts<'a>,
) -> (Option<&'a dyn ReleaseWake>, Option<Waiter>, Releases) {
    let cfg = scheduler.config();
    let none = || -> Releases { Box::pin(futures::stream::empty()) };
    let wake = ports.claims.and_then(|c| c.release_wake());
    let (Some(wake), Some(instance), Switch::On, true) =
        (wake, ports.work.instance(), cfg.claim_aware, cfg.release_wake != Switch::Off)
    else {
        return (wake, None, none());
    };
    match wake.subscribe(instance).await {
        Ok(heard) => (Some(wake), Some(Waiter { instance: instance.to_owned(), ttl: cfg.waiter_ttl() }), heard),
        Err(_) => (Some(wake), None, none()),
    }
}

/// A drain stamp `ago` old in an answer to a peek sent at `sent`, on the driver's
/// clock: no later than `sent - ago` (the store answered after `sent`), less a
/// millisecond for the store's rounding; a mark from before the clock's origin is
/// the origin, which no request precedes.
fn drained_before(sent: Time, ago: std::time::Duration) -> Time {
    let ago = u64::try_from(ago.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
    Time::from_millis(sent.as_millis().saturating_sub(ago.saturating_add(1)))
}

/// Every item `stream` has ready now, and whether it ended after them; `None` when it
/// has none and has not ended.
fn ready_items<S: Stream<Item = OwnerId> + Unpin>(
    stream: &mut S,
    cx: &mut std::task::Context<'_>,
) -> Option<(Vec<OwnerId>, bool)> {
    let mut batch = Vec::new();
    loop {
        match stream.poll_next_unpin(cx) {
            Poll::Ready(Some(o)) => batch.push(o),
            Poll::Ready(None) => return Some((batch, true)),
            Poll::Pending => return (!batch.is_empty()).then_some((batch, false)),
        }
    }
}

/// Hand one release to the scheduler and observe a wake; whether it woke (or, in
/// Shadow, would have).
fn release<R: rand::Rng>(scheduler: &mut Scheduler<R>, ports: DriverPorts<'_>, now: Time, owner: &OwnerId) -> bool {
    let mode = scheduler.config().release_wake;
    match scheduler.on_release(now, owner) {
        Woken::Queued | Woken::WouldQueue => {
            ports.observer.observe(&Event::ReleaseWake { mode });
            true
        }
        Woken::Ignored => false,
    }
}

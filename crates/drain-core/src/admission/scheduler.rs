//! The scheduler state machine itself.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, DefaultHasher};
use std::time::Duration;

use rand::{Rng, RngExt};

use super::config::{SchedulerConfig, millis};
use super::types::{Action, Closed, Entry, NotRunning, OwnerState, PeekResult, Peeked, Requested, Woken};
use crate::event::{Event, SkipReason};
use crate::outcome::TurnOutcome;
use crate::owner::OwnerId;
use crate::switch::Switch;
use crate::time::Time;

/// Emptied batch vectors kept for reuse (beyond this, recycled ones are dropped).
const SPARE_VECTORS: usize = 64;

/// A hasher with fixed keys: the scheduler must not read the operating system's
/// randomness, and it never iterates the map, so the hasher only affects speed.
type Fixed = BuildHasherDefault<DefaultHasher>;

/// Where one known owner is. Every variant but `Running` and `HandedOff` is matched
/// by exactly one entry in one of the scheduler's collections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In `fifo`.
    Queued(Entry),
    /// In `ready`.
    Ready,
    /// In `batches[batch]`.
    Peeking { batch: u64 },
    /// In `timers[(due, seq)]`; `claim` marks a claim retry (a held peek or a
    /// claim-busy turn), which a release wakes, as opposed to a failure backoff.
    Timer { due: Time, seq: u64, claim: bool },
    /// Counted in `running`.
    Running { dirty: bool },
    /// In `handoffs`.
    HandedOff,
}

/// One known owner.
#[derive(Debug, Clone, Copy)]
struct Slot {
    place: Place,
    /// Consecutive failed turns; reset by any other outcome, forgotten with the slot.
    failures: u32,
    /// When the latest request the owner owes was made (a running owner's included:
    /// its turn may fail). A drain stamp after it means every one was served.
    requested: Time,
    /// The owner's last peek answered with drain stamps (the store keeps them): only
    /// then does a newer request end a claim wait, since only then can a peek tell
    /// that a drain served it.
    marked: bool,
    /// When the owner's latest peek was issued.
    peeked_at: Time,
    /// The latest the owner's drain stamp can have been at its last peek with marks:
    /// a later mark is a drain that began since.
    known_mark: Option<Time>,
    /// The peeking owner was peeked because a newer request ended its claim wait,
    /// which was due then.
    repeek: Option<Time>,
    /// The owner's latest peek was made because a newer request ended its claim
    /// wait: newer requests then leave the wait it is in (a requester that asks
    /// again at every pass would otherwise peek the owner at every pass).
    peeked_for_request: bool,
}

impl Slot {
    /// A slot owing a request made at `requested`, nothing known yet.
    fn new(requested: Time) -> Self {
        Slot {
            place: Place::HandedOff,
            failures: 0,
            requested,
            marked: false,
            peeked_at: Time::ZERO,
            known_mark: None,
            repeek: None,
            peeked_for_request: false,
        }
    }
}

/// The claim-aware owner admission scheduler: a sans-IO state machine.
///
/// See the [module documentation](super) for the state diagram and the driving loop.
///
/// Time is whatever the driver passes as `now`; the scheduler never goes back in
/// time: a `now` earlier than one already seen is taken as the latest seen, so an
/// out-of-order caller cannot arm a timer in the past.
///
/// Every method is `O(log n)` in the number of known owners (amortised), except
/// [`close`](Self::close), which is linear.
#[derive(Debug)]
pub struct Scheduler<R> {
    config: SchedulerConfig,
    rng: R,
    owners: HashMap<OwnerId, Slot, Fixed>,
    fifo: VecDeque<OwnerId>,
    ready: VecDeque<OwnerId>,
    /// Outstanding peek batches, by id, in issue order (ids only grow, so the deque
    /// stays sorted). A deque and recycled vectors, not a map of fresh ones: a
    /// steady-state peek allocates nothing inside the scheduler.
    batches: VecDeque<(u64, Vec<OwnerId>)>,
    /// Emptied batch vectors, kept for the next batch.
    spare: Vec<Vec<OwnerId>>,
    /// Scratch for `on_peek`: the batches one answer named.
    answered: Vec<u64>,
    /// Pending retry timers, by deadline then arming order.
    timers: BTreeMap<(Time, u64), OwnerId>,
    handoffs: VecDeque<OwnerId>,
    events: VecDeque<Event<'static>>,
    running: usize,
    peeking: usize,
    /// Source of batch ids and timer tie-breakers.
    seq: u64,
    /// The latest `now` seen: time never goes backwards inside the scheduler.
    latest: Time,
    closed: bool,
    /// The gauge values last emitted.
    shown_depth: usize,
    shown_timers: usize,
}

impl<R: Rng> Scheduler<R> {
    /// An empty, open scheduler. `rng` draws every jitter: seed it for repeatable runs.
    #[must_use]
    pub fn new(config: SchedulerConfig, rng: R) -> Self {
        Scheduler {
            config,
            rng,
            owners: HashMap::default(),
            fifo: VecDeque::new(),
            ready: VecDeque::new(),
            batches: VecDeque::new(),
            spare: Vec::new(),
            answered: Vec::new(),
            timers: BTreeMap::new(),
            handoffs: VecDeque::new(),
            events: VecDeque::new(),
            running: 0,
            peeking: 0,
            seq: 0,
            latest: Time::ZERO,
            closed: false,
            shown_depth: 0,
            shown_timers: 0,
        }
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Ask for a turn of `owner`. Requests coalesce: an owner is at most once in the
    /// scheduler.
    ///
    /// * unknown -> back of the FIFO as an [`Entry::Initial`] ([`Requested::Queued`]);
    /// * queued, ready, peeking, on a retry timer or handed off -> nothing changes
    ///   ([`Requested::Coalesced`]); a timer is not pulled forward, except a claim
    ///   wait by a request made after the ones it holds, with
    ///   [`SchedulerConfig::skip_served`] On and the owner's last peek answered with
    ///   drain stamps and not itself made for a newer request (once a wait: a
    ///   requester that asks at every pass does not peek at every pass)
    ///   ([`Requested::Queued`]: peeked again; if that peek finds the
    ///   claim free but no drain begun since the owner's previous peek, the holder
    ///   released to continue, and the owner waits for the claim again);
    /// * running -> marked dirty, so it runs again after its turn
    ///   ([`Requested::MarkedDirty`]).
    ///
    /// # Errors
    ///
    /// [`Closed`] after [`close`](Self::close); the request is not recorded.
    pub fn request(&mut self, now: Time, owner: OwnerId) -> Result<Requested, Closed> {
        self.request_made(now, owner, now)
    }

    /// [`request`](Self::request) of a request made at `made` (on the scheduler's
    /// clock, at or before `now`): the time the requester knew the owner had work,
    /// e.g. when it wrote the work or read the backlog. [`request`](Self::request)
    /// takes `now`, the latest the request can have been made.
    ///
    /// With [`SchedulerConfig::skip_served`] the scheduler keeps the latest `made` the
    /// owner owes, and a peek whose drain stamp is after it forgets the owner. A
    /// `made` later than the truth only costs a turn; an earlier one could drop a
    /// request a drain did not serve.
    ///
    /// # Errors
    ///
    /// [`Closed`] after [`close`](Self::close); the request is not recorded.
    pub fn request_made(&mut self, now: Time, owner: OwnerId, made: Time) -> Result<Requested, Closed> {
        self.observe(now);
        if self.closed {
            return Err(Closed);
        }
        let requested = match self.owners.get_mut(&owner) {
            Some(slot) => {
                let requested = match &mut slot.place {
                    // A request made after the ones a claim wait holds: with drain stamps,
                    // a peek (not a turn) tells at once whether it is served or due.
                    Place::Timer { due, seq, claim: true }
                        if slot.marked
                            && !slot.peeked_for_request
                            && made > slot.requested
                            && self.config.skip_served.enforces() =>
                    {
                        let key = (*due, *seq);
                        slot.requested = made;
                        slot.repeek = Some(*due);
                        self.timers.remove(&key);
                        self.queue(owner, Entry::Initial);
                        self.gauges();
                        return Ok(Requested::Queued);
                    }
                    Place::Running { dirty } => {
                        *dirty = true;
                        Requested::MarkedDirty
                    }
                    _ => Requested::Coalesced,
                };
                // The latest: a mark after it covers every request the owner owes (the
                // turn running may still fail, owing the one it started for).
                slot.requested = slot.requested.max(made);
                requested
            }
            None => {
                self.queue(owner.clone(), Entry::Initial);
                if let Some(slot) = self.owners.get_mut(&owner) {
                    slot.requested = made;
                }
                Requested::Queued
            }
        };
        self.gauges();
        Ok(requested)
    }

    /// The next thing to do, if a turn slot is free and there is work; call it until
    /// it returns `None`.
    ///
    /// Free slots are `workers - running - peeking`. Ready owners (peeked) launch
    /// first, then the FIFO head: a continuation launches at once, and so does an
    /// initial entry when the switch is Off. With the switch On or Shadow, the leading
    /// run of initial entries at the head, up to the free slots, is returned as one
    /// batched [`Action::Peek`]; those owners hold their slots until
    /// [`on_peek`](Self::on_peek).
    ///
    /// This is the state machine's "poll launch" step: it hands out either a launch or
    /// the peek that must precede one.
    #[doc(alias = "poll_launch")]
    #[must_use]
    pub fn poll_action(&mut self, now: Time) -> Option<Action> {
        self.observe(now);
        let free = self.free_slots();
        if free == 0 {
            return None;
        }
        let action = if let Some(owner) = self.ready.pop_front() {
            self.start(&owner);
            Action::Launch { owner, entry: Entry::Initial }
        } else {
            let entry = self.queued_entry(self.fifo.front()?)?;
            if entry == Entry::Continuation || !self.config.claim_aware.computes() {
                let owner = self.fifo.pop_front()?;
                self.start(&owner);
                Action::Launch { owner, entry }
            } else {
                Action::Peek(self.take_peek_batch(now, free))
            }
        };
        self.gauges();
        Some(action)
    }

    /// The answer to an [`Action::Peek`].
    ///
    /// * [`PeekResult::Free`] -> ready: launches before the FIFO head.
    /// * [`PeekResult::Busy`] -> On: a retry timer at `now + U[backoff_min,
    ///   backoff_max]` and [`Event::OwnerSkipped`] (`mode` On). Shadow: the same event
    ///   with `mode` Shadow, and ready anyway.
    /// * [`PeekResult::Error`] -> ready (admitted as before) and [`Event::PeekError`].
    /// * Before any of these, with [`SchedulerConfig::skip_served`] computing: a drain
    ///   mark ([`Peeked::drained`]) later than the owner's latest request means a
    ///   drain that began after the request served it: [`Event::OwnerSkipped`]
    ///   (reason `Served`); On forgets the owner, Shadow goes on as above. A peek made
    ///   because a newer request ended a claim wait that finds the claim free with no
    ///   drain begun since the owner's previous peek counts as `Busy`: its holder
    ///   released without draining, to take it again for its next turn.
    ///
    /// Results are applied in the order given. A result for an owner that is not
    /// peeking (a stale or repeated answer, or one after [`close`](Self::close)) is
    /// ignored. Each call settles whole batches: every owner of a batch named by at
    /// least one result but left without one is treated as [`PeekResult::Error`]
    /// (admitted), so nothing is lost. Other outstanding batches are untouched, which
    /// lets several batches be in flight at once.
    ///
    /// Any iterator will do: a driver that zips the owners of
    /// [`Action::Peek`](super::Action::Peek) with the store's answers (draining the
    /// vector, then handing it back with [`recycle`](Self::recycle)) allocates nothing.
    pub fn on_peek<I, P>(&mut self, now: Time, results: I)
    where
        I: IntoIterator<Item = (OwnerId, P)>,
        P: Into<Peeked>,
    {
        let now = self.observe(now);
        let mut answered = std::mem::take(&mut self.answered);
        answered.clear();
        for (owner, result) in results {
            if let Some(Place::Peeking { batch }) = self.place_of(&owner) {
                answered.push(batch);
                let result = result.into();
                if let Some(slot) = self.owners.get_mut(&owner) {
                    slot.marked = result.drained.is_some();
                }
                if !self.served(&owner, result) {
                    match self.holder_continues(now, &owner, result) {
                        Some(due) => self.wait_again(now, owner, due),
                        None => self.settle_peek(now, owner, result.claim),
                    }
                }
            }
        }
        answered.sort_unstable();
        answered.dedup();
        for &batch in &answered {
            let Ok(at) = self.batches.binary_search_by_key(&batch, |(id, _)| *id) else { continue };
            let Some((_, mut owners)) = self.batches.remove(at) else { continue };
            for owner in owners.drain(..) {
                if self.place_of(&owner) == Some(Place::Peeking { batch }) {
                    self.settle_peek(now, owner, PeekResult::Error);
                }
            }
            self.recycle(owners);
        }
        self.answered = answered;
        self.gauges();
    }

    /// The end of `owner`'s turn; emits [`Event::OwnerTurn`].
    ///
    /// * `Productive { more: true }` -> back of the FIFO at once as an
    ///   [`Entry::Continuation`] (a pending dirty mark is absorbed).
    /// * `Done`, `Productive { more: false }` -> finished and forgotten, unless dirty:
    ///   then back of the FIFO as an [`Entry::Initial`].
    /// * `ClaimBusy` -> On: a retry timer at `now + U[backoff_min, backoff_max]` and
    ///   [`Event::ClaimBusyBackoff`]. Shadow: the event with `mode` Shadow and
    ///   immediate re-entry. Off: immediate re-entry (legacy). Re-entry is an initial
    ///   entry (so Shadow peeks it again; Off never peeks).
    /// * `Failed` -> a retry timer at `now + U[0, min(failure_cap, failure_base *
    ///   2^(n-1))]` for the `n`-th consecutive failure (full jitter). Any other
    ///   outcome resets `n`.
    ///
    /// A timer beyond `max_retry_timers` hands the owner off instead
    /// ([`Event::RetryOverflow`]). After [`close`](Self::close), an owner that would
    /// continue (more, dirty, claim busy, failed) is handed off, without a backoff
    /// event.
    ///
    /// # Errors
    ///
    /// [`NotRunning`] when `owner` has no running turn; nothing changes.
    pub fn on_turn(&mut self, now: Time, owner: &OwnerId, outcome: TurnOutcome) -> Result<(), NotRunning> {
        let now = self.observe(now);
        let Some(slot) = self.owners.get_mut(owner) else {
            return Err(NotRunning(owner.clone()));
        };
        let Place::Running { dirty } = slot.place else {
            return Err(NotRunning(owner.clone()));
        };
        slot.failures = match outcome {
            TurnOutcome::Failed => slot.failures.saturating_add(1),
            _ => 0,
        };
        let failures = slot.failures;
        self.running -= 1;
        self.events.push_back(Event::OwnerTurn { outcome });
        let owner = owner.clone();
        match outcome {
            TurnOutcome::Productive { more: true } => self.queue(owner, Entry::Continuation),
            TurnOutcome::Productive { more: false } | TurnOutcome::Done => {
                if dirty {
                    self.queue(owner, Entry::Initial);
                } else {
                    self.owners.remove(&owner);
                }
            }
            TurnOutcome::ClaimBusy => {
                let mode = self.config.claim_aware;
                if mode.computes() && !self.closed {
                    self.events.push_back(Event::ClaimBusyBackoff { mode });
                }
                if mode.enforces() {
                    let due = self.claim_busy_deadline(now);
                    self.arm(owner, due, true);
                } else {
                    self.queue(owner, Entry::Initial);
                }
            }
            TurnOutcome::Failed => {
                let delay = self.config.failure_backoff().full_delay(failures.saturating_sub(1), &mut self.rng);
                self.arm(owner, now + delay, false);
            }
        }
        self.gauges();
        Ok(())
    }

    /// Fire every retry timer due at or before `now`, in deadline order (ties in the
    /// order they were armed): each owner goes to the back of the FIFO as an
    /// [`Entry::Initial`], so it is peeked again.
    pub fn handle_timeout(&mut self, now: Time) {
        let now = self.observe(now);
        while let Some(timer) = self.timers.first_entry() {
            if timer.key().0 > now {
                break;
            }
            let owner = timer.remove();
            self.queue(owner, Entry::Initial);
        }
        self.gauges();
    }

    /// A release notification: whoever held `owner`'s claim has just released it
    /// (the driver learnt it from the claim store, e.g. a message published by the
    /// release, delivered to one waiting instance).
    ///
    /// With [`SchedulerConfig::release_wake`] On, an owner waiting on a *claim* retry
    /// timer (a held peek or a claim-busy turn, switch On) leaves the timer at once
    /// and joins the back of the FIFO as an [`Entry::Initial`]: it is peeked again
    /// before launch, so a release that someone else re-acquired in the meantime
    /// costs a peek, not a turn ([`Woken::Queued`]). Shadow answers
    /// [`Woken::WouldQueue`] and changes nothing; Off, an owner on a failure backoff,
    /// or an owner in any other state (or none, or after [`close`](Self::close))
    /// answers [`Woken::Ignored`] and changes nothing.
    ///
    /// This is what keeps claim-aware admission's contention cut without its latency
    /// cost: the 5–15 s window stays the backstop for a release nobody reported (a
    /// crashed holder whose claim expired, a lost notification), while a reported
    /// release hands the owner on at once, as legacy's spinning did.
    pub fn on_release(&mut self, now: Time, owner: &OwnerId) -> Woken {
        self.observe(now);
        let Some(Place::Timer { due, seq, claim: true }) = self.place_of(owner) else {
            return Woken::Ignored;
        };
        match self.config.release_wake {
            Switch::Off => Woken::Ignored,
            Switch::Shadow => Woken::WouldQueue,
            Switch::On => {
                self.timers.remove(&(due, seq));
                self.queue(owner.clone(), Entry::Initial);
                self.gauges();
                Woken::Queued
            }
        }
    }

    /// Whether `owner` waits on a claim retry timer (a held peek or a claim-busy
    /// turn), the state in which a release notification would wake it: a driver
    /// registers the instance as a waiter for the owner's release while this holds.
    #[must_use]
    pub fn waits_for_claim(&self, owner: &OwnerId) -> bool {
        matches!(self.place_of(owner), Some(Place::Timer { claim: true, .. }))
    }

    /// The earliest pending retry timer: call [`handle_timeout`](Self::handle_timeout)
    /// then.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Time> {
        self.timers.first_key_value().map(|(&(due, _), _)| due)
    }

    /// The next owner handed back to the caller (timer cap overflow, or a
    /// continuation after [`close`](Self::close)), oldest first. The scheduler has
    /// forgotten it; the caller owns the intent (e.g. the next serving pass).
    #[must_use]
    pub fn poll_handoff(&mut self) -> Option<OwnerId> {
        let owner = self.handoffs.pop_front()?;
        self.owners.remove(&owner);
        Some(owner)
    }

    /// Close the scheduler: cancel every timer and return every pending intent, so
    /// nothing is pending afterwards. The order: unpolled hand-offs, ready owners,
    /// peeking owners (batch order), the FIFO, then timers in deadline order.
    ///
    /// Later requests fail with [`Closed`]. Running owners stay tracked until their
    /// [`on_turn`](Self::on_turn); one that would continue then is handed off. Late
    /// peek answers are ignored. Closing again returns what was handed off since and
    /// not yet polled.
    #[must_use]
    pub fn close(&mut self) -> Vec<OwnerId> {
        self.closed = true;
        let mut pending = Vec::with_capacity(
            self.handoffs.len() + self.ready.len() + self.peeking + self.fifo.len() + self.timers.len(),
        );
        pending.extend(self.handoffs.drain(..));
        pending.extend(self.ready.drain(..));
        pending.extend(self.batches.drain(..).flat_map(|(_, owners)| owners));
        pending.extend(self.fifo.drain(..));
        pending.extend(std::mem::take(&mut self.timers).into_values());
        // Every collection holds only pending owners, each once; checking anyway
        // keeps a running owner tracked and returns nobody twice.
        pending.retain(|owner| {
            let pending = self.owners.get(owner).is_some_and(|slot| !matches!(slot.place, Place::Running { .. }));
            if pending {
                self.owners.remove(owner);
            }
            pending
        });
        self.peeking = 0;
        self.gauges();
        pending
    }

    /// Whether [`close`](Self::close) was called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The next buffered event, oldest first. Decisions are buffered as they are
    /// taken; the gauges [`Event::OwnerQueueDepth`] (FIFO plus ready) and
    /// [`Event::RetryTimers`] are emitted at the end of a call whenever their value
    /// changed. Drain this after every call: the buffer is unbounded.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event<'static>> {
        self.events.pop_front()
    }

    /// Where `owner` is; `None` when the scheduler does not know it (never requested,
    /// finished, handed off and polled, or returned by [`close`](Self::close)).
    #[must_use]
    pub fn state_of(&self, owner: &OwnerId) -> Option<OwnerState> {
        Some(match self.place_of(owner)? {
            Place::Queued(entry) => OwnerState::Queued { entry },
            Place::Ready => OwnerState::Ready,
            Place::Peeking { .. } => OwnerState::Peeking,
            Place::Timer { due, .. } => OwnerState::Timer { due },
            Place::Running { dirty } => OwnerState::Running { dirty },
            Place::HandedOff => OwnerState::HandedOff,
        })
    }

    /// Owners waiting to launch: the FIFO plus the ready (peeked) owners.
    #[must_use]
    pub fn queue_len(&self) -> usize {
        self.fifo.len() + self.ready.len()
    }

    /// Pending retry timers.
    #[must_use]
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// Owners whose turn is running.
    #[must_use]
    pub fn running_count(&self) -> usize {
        self.running
    }

    /// Owners in an outstanding peek batch.
    #[must_use]
    pub fn peeking_count(&self) -> usize {
        self.peeking
    }

    /// Owners handed off and not yet taken with [`poll_handoff`](Self::poll_handoff).
    #[must_use]
    pub fn handoff_count(&self) -> usize {
        self.handoffs.len()
    }

    // ---- internals -------------------------------------------------------------

    /// Record `now` and return the scheduler's time: the latest `now` seen, so an
    /// out-of-order caller can never schedule into the past.
    fn observe(&mut self, now: Time) -> Time {
        self.latest = self.latest.max(now);
        self.latest
    }

    fn free_slots(&self) -> usize {
        self.config.slots().saturating_sub(self.running + self.peeking)
    }

    fn place_of(&self, owner: &OwnerId) -> Option<Place> {
        self.owners.get(owner).map(|slot| slot.place)
    }

    fn queued_entry(&self, owner: &OwnerId) -> Option<Entry> {
        match self.place_of(owner)? {
            Place::Queued(entry) => Some(entry),
            _ => None,
        }
    }

    /// Move `owner` to `place`, creating its slot if it is new.
    fn set_place(&mut self, owner: &OwnerId, place: Place) {
        match self.owners.get_mut(owner) {
            Some(slot) => slot.place = place,
            None => {
                self.owners.insert(owner.clone(), Slot { place, ..Slot::new(self.latest) });
            }
        }
    }

    /// Back of the FIFO; after close, a hand-off.
    fn queue(&mut self, owner: OwnerId, entry: Entry) {
        if self.closed {
            self.hand_off(owner);
        } else {
            self.set_place(&owner, Place::Queued(entry));
            self.fifo.push_back(owner);
        }
    }

    /// A retry timer at `due` (`claim`: a claim retry, which a release may wake);
    /// beyond the cap (counted) or after close, a hand-off.
    fn arm(&mut self, owner: OwnerId, due: Time, claim: bool) {
        if self.closed {
            self.hand_off(owner);
        } else if self.timers.len() >= self.config.max_retry_timers {
            self.events.push_back(Event::RetryOverflow);
            self.hand_off(owner);
        } else {
            let seq = self.next_seq();
            self.set_place(&owner, Place::Timer { due, seq, claim });
            self.timers.insert((due, seq), owner);
        }
    }

    /// Give the intent back to the caller; the failure count is forgotten with it.
    fn hand_off(&mut self, owner: OwnerId) {
        let slot = Slot { place: Place::HandedOff, ..Slot::new(self.latest) };
        self.owners.insert(owner.clone(), slot);
        self.handoffs.push_back(owner);
    }

    fn start(&mut self, owner: &OwnerId) {
        self.set_place(owner, Place::Running { dirty: false });
        self.running += 1;
    }

    fn make_ready(&mut self, owner: OwnerId) {
        self.set_place(&owner, Place::Ready);
        self.ready.push_back(owner);
    }

    /// Hand back the (emptied or not) vector of an [`Action::Peek`](super::Action::Peek)
    /// once its owners are answered: the next batch reuses its allocation. Optional; a
    /// few are kept, the rest dropped.
    pub fn recycle(&mut self, mut owners: Vec<OwnerId>) {
        owners.clear();
        if self.spare.len() < SPARE_VECTORS {
            self.spare.push(owners);
        }
    }

    /// Take the leading run of initial entries at the FIFO head, at most `free`.
    fn take_peek_batch(&mut self, now: Time, free: usize) -> Vec<OwnerId> {
        let batch = self.next_seq();
        let mut owners = self.spare.pop().unwrap_or_default();
        while owners.len() < free {
            let Some(head) = self.fifo.front() else { break };
            if self.queued_entry(head) != Some(Entry::Initial) {
                break;
            }
            let Some(owner) = self.fifo.pop_front() else {
                break;
            };
            self.set_place(&owner, Place::Peeking { batch });
            if let Some(slot) = self.owners.get_mut(&owner) {
                slot.peeked_at = now;
                slot.peeked_for_request = slot.repeek.is_some();
            }
            owners.push(owner);
        }
        self.peeking += owners.len();
        let mut kept = self.spare.pop().unwrap_or_default();
        kept.extend(owners.iter().cloned());
        self.batches.push_back((batch, kept));
        owners
    }

    /// Whether a peek's drain stamp shows that `owner`'s requests were served (then,
    /// with the switch On, the owner is forgotten and its slot freed).
    fn served(&mut self, owner: &OwnerId, peeked: Peeked) -> bool {
        let mode = self.config.skip_served;
        let (Some(drained), true) = (peeked.drained, mode.computes()) else { return false };
        let Some(slot) = self.owners.get(owner) else { return false };
        if slot.requested >= drained {
            return false;
        }
        self.events.push_back(Event::OwnerSkipped { reason: SkipReason::Served, mode });
        if !mode.enforces() {
            return false;
        }
        self.peeking -= 1;
        self.owners.remove(owner);
        true
    }

    /// Whether a peek shows a holder that released without draining, and until when
    /// the owner then waits. A peek with a drain stamp notes the latest that mark can
    /// be (its estimate plus the peek's round trip). A peek made because a newer
    /// request ended a claim wait that finds the claim free with no drain begun since
    /// the owner's previous peek saw a holder release without draining: it continues
    /// at once (its next turn takes the claim again) or its turn failed. Racing it
    /// would cost a claim-busy turn, so the owner waits for the claim until the wait
    /// the request ended was due, as it would have without the newer request (not
    /// longer: a holder that died leaves no mark either).
    fn holder_continues(&mut self, now: Time, owner: &OwnerId, peeked: Peeked) -> Option<Time> {
        let slot = self.owners.get_mut(owner)?;
        let repeek = slot.repeek.take();
        let drained = peeked.drained?;
        let undrained = slot.known_mark.is_some_and(|known| drained <= known);
        let trip = now.saturating_since(slot.peeked_at) + Duration::from_millis(1);
        slot.known_mark = Some(drained + trip);
        repeek.filter(|_| peeked.claim == PeekResult::Free && undrained)
    }

    /// [`holder_continues`](Self::holder_continues): the owner waits for the claim
    /// until `due`, as after a peek that found it held, or launches when that is past.
    fn wait_again(&mut self, now: Time, owner: OwnerId, due: Time) {
        let mode = self.config.claim_aware;
        if due <= now || !mode.enforces() {
            self.settle_peek(now, owner, PeekResult::Free);
            return;
        }
        self.peeking -= 1;
        self.events.push_back(Event::OwnerSkipped { reason: SkipReason::ClaimBusy, mode });
        self.arm(owner, due, true);
    }

    fn settle_peek(&mut self, now: Time, owner: OwnerId, result: PeekResult) {
        self.peeking -= 1;
        let mode = self.config.claim_aware;
        match result {
            PeekResult::Free => self.make_ready(owner),
            PeekResult::Error => {
                self.events.push_back(Event::PeekError);
                self.make_ready(owner);
            }
            PeekResult::Busy => {
                self.events.push_back(Event::OwnerSkipped { reason: SkipReason::ClaimBusy, mode });
                if mode.enforces() {
                    let due = self.claim_busy_deadline(now);
                    self.arm(owner, due, true);
                } else {
                    self.make_ready(owner);
                }
            }
        }
    }

    /// `now + U[low, high]` of the claim-busy window, uniform, inclusive.
    fn claim_busy_deadline(&mut self, now: Time) -> Time {
        let (low, high) = self.config.claim_busy_window();
        let delay = self.rng.random_range(millis(low)..=millis(high));
        now + Duration::from_millis(delay)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn gauges(&mut self) {
        let depth = self.queue_len();
        if depth != self.shown_depth {
            self.shown_depth = depth;
            self.events.push_back(Event::OwnerQueueDepth(depth));
        }
        let timers = self.timers.len();
        if timers != self.shown_timers {
            self.shown_timers = timers;
            self.events.push_back(Event::RetryTimers(timers));
        }
    }
}

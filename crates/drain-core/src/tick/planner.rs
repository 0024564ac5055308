//! The drain's decisions as plain data: the [`Planner`] is told what happened
//! (a batch received, a dead letter done, a claim call answered, a submit ended, a
//! stop or a lost lease, messages settled at the source) and answers what to do next
//! (receive, dead-letter, settle and claim, submit, complete, abandon or release at
//! the source) and the counts. It performs no I/O and awaits nothing: the drain loop
//! (`drain.rs`) makes the calls it asks for and feeds it the answers, as quinn drives
//! quinn-proto. A lost lease's deadline is the guard's (`guard/`): it reaches the
//! planner as a stop, so the planner keeps no timer.
//!
//! A batch moves through these stages (a *step* is one batch's submits, beside which
//! the next batch is received and claimed; one batch at a time is triaged, claimed
//! ahead, or in its step):
//!
//! ```text
//! Receive ─► Triaged ─(claim call answered)─► Claimed ─(next)─► Step ─(end_submit, end_step)─► Submitted
//!   (permit)  (call out)                       (ahead)                                          (unsettled)
//! Submitted ─(in the next claim call; answered)─► ForSource: complete, abandon or release each message
//! ```
//!
//! The order that matters, and what keeps it:
//! * A message is completed or given back at the source only after its claim is
//!   settled: only [`Planner::handle_claims`] makes a [`ForSource`], from the batches
//!   whose settlements that call carried.
//! * A batch's claims are settled before those of the batch two later are taken, so
//!   a message that went back and is received again meets `done` or nothing: every
//!   claim call first settles each batch whose step has ended, and only the batch in
//!   its step may be left (asserted in `claim_call`).
//! * Batch k+1 is received only once one of batch k's messages has completed, so a
//!   batch that all goes back (the claim store or the target refusing everything)
//!   ends the drain: a [`Receive`] permit comes only from [`Planner::next`] and
//!   [`Planner::poll_receive`], which check it (`may_receive`), one at a time.
//! * Any claim-store failure (claim On) stops the receiving after the batch in hand:
//!   `may_receive` again. When the call that settles batch k-1 fails, batch k+1 was
//!   received already and goes back: one batch per failure.
//! * A stop or a lost lease abandons what was not submitted: [`Planner::start`].
//!   Submits already in flight end by their own outcomes, as at any end of a step.
//!
//! How many messages a receive asks for, and a step has in flight, is the window's
//! (`window.rs`), told of each step's submits and their duration in
//! [`Planner::end_submit`]: the duration is the loop's clock reading, an input.
//!
//! A message whose id is in batch k and again in batch k+1 finds batch k's claim
//! pending: ours. Once batch k has submitted it, the copy is completed as a duplicate
//! after the claims are settled; when that submit failed, the copy is released,
//! uncounted, for a later receive (`meet_own_claims`). With the claim Shadow the
//! planner submits as Off does and counts, with mode Shadow, what On would decide.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use crate::error::{ErrorKind, PortError};
use crate::event::MessageOutcome;
use crate::ports::{
    ClaimState, Delivery, DeliveryHandle, Message, MessageId, SettleAction, SettleResult, SettledThenClaimed,
    Settlement,
};
use crate::switch::Switch;
use crate::tick::window::Window;
use crate::tick::{ClaimHealth, DrainStats};

mod types;

#[cfg(test)]
mod tests;

pub(super) use types::{
    ClaimCall, DrainOutcome, ForSource, Job, Next, Prepared, Receive, SourceOp, Start, Stop, ToSource,
};
use types::{Fate, Slot};

/// The decisions of one drain (see the module docs).
#[derive(Debug)]
pub(super) struct Planner {
    /// The claim switch.
    mode: Switch,
    max_batches: Option<u32>,
    /// Non-empty batches received.
    batches: u32,
    stop: Option<Stop>,
    /// Why the source ended the receiving, if it did.
    end: Option<End>,
    /// The claim store failed, or was known down, in this tick.
    claims_failed: bool,
    /// How the claim store fared, all told.
    claims: ClaimHealth,
    /// Every message of the last batch whose step ended went back to the source.
    all_back: bool,
    /// A [`Receive`] is out.
    receiving: bool,
    /// The batch whose claim call is out.
    claiming: Option<Triaged>,
    /// The batches whose settlements are in the claim call out.
    settling: Vec<Submitted>,
    /// The batch claimed, waiting for its step.
    ahead: Option<Claimed>,
    /// The batch in its step.
    step: Option<Step>,
    /// Batches whose step ended, claims not yet settled, oldest first.
    unsettled: Vec<Submitted>,
    /// The last claim call (settlements only) is out or answered.
    finished: bool,
    /// Ids of claim calls that failed but may still have run, in call order.
    maybe_claimed: Vec<MessageId>,
    stale_claims: Vec<MessageId>,
    stats: DrainStats,
    events: VecDeque<(MessageOutcome, Switch)>,
    /// How many messages to ask for and to submit at once.
    window: Window,
}

/// Why the source ended the receiving.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Empty,
    Failed(String),
}

/// What to do with one message once its claim state is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Submit; `claimed` says we hold its pending claim and must settle it.
    Submit { claimed: bool },
    /// Complete without submitting: an earlier submit is recorded as done.
    CompleteDuplicate,
    /// Give it back to the source.
    Abandon(MessageOutcome),
}

/// A message to submit (or decide), with its id (`None`: it has none, or it is a
/// later copy of an id in the batch, which Off and Shadow submit unclaimed).
#[derive(Debug)]
struct Work {
    handle: DeliveryHandle,
    id: Option<MessageId>,
}

/// A batch received and sorted, its claim call out.
#[derive(Debug)]
struct Triaged {
    no: u32,
    received: usize,
    work: Vec<Work>,
    messages: Vec<Message>,
    /// Later copies of an id seen earlier in the batch (claim On): decided by what
    /// becomes of the first copy.
    repeats: Vec<(DeliveryHandle, MessageId)>,
    /// Claim Shadow: the ids of the later copies Shadow submits anyway; each counts
    /// what On would decide once the first copy's fate is known.
    shadow_repeats: Vec<MessageId>,
}

/// A batch with its claims answered: a plan per message of its work.
#[derive(Debug)]
struct Claimed {
    batch: Triaged,
    plans: Vec<Plan>,
    /// Claim Shadow: what On would do with each message (Shadow submits as Off
    /// does); empty in the other modes.
    would: Vec<Plan>,
}

/// The batch being submitted.
#[derive(Debug)]
struct Step {
    claimed: Claimed,
    /// The fate `start` decided for a job it skipped.
    skipped: Vec<Option<Fate>>,
    /// Each job's fate, in the order the jobs ended.
    ended: Vec<(usize, Fate)>,
    /// One of its messages completed: the next batch may be received.
    completed_one: bool,
    /// Set by `end_submit`.
    submitted: Option<Submitted>,
}

/// A submitted batch, its claims to settle.
#[derive(Debug)]
struct Submitted {
    received: usize,
    /// The claims it holds, by what became of each message (moved into the claim
    /// call that settles them).
    settlements: Vec<Settlement>,
    for_source: ForSource,
}

impl Planner {
    /// A drain with the claim at `mode`, receiving at most `max_batches`;
    /// `claims_down`: the claim store timed out before the drain (as the lease store,
    /// when one object serves both).
    /// `window` sizes its receives and steps.
    pub(super) fn new(mode: Switch, max_batches: Option<u32>, claims_down: bool, window: Window) -> Self {
        Planner {
            mode,
            max_batches,
            batches: 0,
            stop: None,
            end: None,
            claims_failed: claims_down,
            claims: ClaimHealth::NotAsked,
            all_back: false,
            receiving: false,
            claiming: None,
            settling: Vec::new(),
            ahead: None,
            step: None,
            unsettled: Vec::new(),
            finished: false,
            maybe_claimed: Vec::new(),
            stale_claims: Vec::new(),
            stats: DrainStats::default(),
            events: VecDeque::new(),
            window,
        }
    }

    /// Submits to keep in flight in a step, and settlements at the source at once.
    pub(super) fn in_flight(&self) -> usize {
        self.window.in_flight()
    }

    /// A stop from outside, or the lease lost: nothing more is received, and what
    /// was not submitted is given back.
    pub(super) fn handle_stop(&mut self, stop: Stop) {
        self.stop.get_or_insert(stop);
    }

    /// Between two steps: submit the batch claimed beside the last one, else receive
    /// one if the rules allow, else finish.
    pub(super) fn next(&mut self) -> Next {
        debug_assert!(self.step.is_none() && self.claiming.is_none() && !self.finished, "between steps");
        if let Some(claimed) = self.ahead.take() {
            return Next::Submit(self.begin_step(claimed));
        }
        if let Some(permit) = self.poll_receive() {
            return Next::Receive(permit);
        }
        self.finished = true;
        Next::Finish(self.claim_call(Vec::new()))
    }

    /// Beside a step, once one of its messages has completed: leave to receive the
    /// next batch, if the rules allow.
    pub(super) fn poll_receive(&mut self) -> Option<Receive> {
        if !self.may_receive() {
            return None;
        }
        self.receiving = true;
        Some(Receive(self.window.batch()))
    }

    /// Receiving more is wanted and allowed.
    fn may_receive(&self) -> bool {
        let stopping = self.stop.is_some()
            || self.end.is_some()
            || (self.mode.enforces() && self.claims_failed)
            || self.max_batches.is_some_and(|max| self.batches >= max);
        if stopping || self.receiving || self.claiming.is_some() || self.ahead.is_some() || self.finished {
            return false;
        }
        match &self.step {
            Some(step) => step.completed_one,
            // Every message of the last batch went back to the source, which offers
            // them again at once: receiving them again in this tick cannot go better
            // (the claim store fails, other holders' claims stand, the target
            // refuses), and would burn delivery counts for as long as that lasts.
            None => !self.all_back,
        }
    }

    /// Receive nothing more; what was received is still submitted and settled.
    pub(super) fn receive_no_more(&mut self) {
        self.max_batches = Some(self.batches);
    }

    /// The receive failed: the drain ends with `error`.
    pub(super) fn handle_receive_failed(&mut self, permit: Receive, error: &PortError) {
        let Receive(_) = permit;
        self.receiving = false;
        self.end = Some(End::Failed(format!("receive failed: {error}")));
    }

    /// A batch received (`None`: the queue is empty, which ends the drain). Sorted:
    /// with the claim On, a message without an id is dead-lettered and a later copy
    /// of an id in the batch waits for the first; Off and Shadow submit both (Shadow
    /// counts what On would do).
    pub(super) fn handle_received(&mut self, permit: Receive, batch: Vec<Delivery>) -> Option<Prepared> {
        let Receive(_) = permit;
        self.receiving = false;
        if batch.is_empty() {
            self.end = Some(End::Empty);
            return None;
        }
        self.batches += 1;
        self.stats.received += batch.len() as u64;
        let mode = self.mode;
        let received = batch.len();
        let mut triaged = Triaged {
            no: self.batches,
            received,
            work: Vec::with_capacity(received),
            messages: Vec::with_capacity(received),
            repeats: Vec::new(),
            shadow_repeats: Vec::new(),
        };
        let mut dead_letters = Vec::new();
        let mut seen = HashSet::new();
        for d in batch {
            let id = match d.message.message_id.clone() {
                None if mode.enforces() => {
                    dead_letters.push(d.handle);
                    continue;
                }
                None => {
                    if mode == Switch::Shadow {
                        self.events.push_back((MessageOutcome::DeadLettered, mode));
                    }
                    None
                }
                Some(id) if !seen.insert(id.clone()) => {
                    if mode.enforces() {
                        triaged.repeats.push((d.handle, id));
                        continue;
                    }
                    if mode == Switch::Shadow {
                        triaged.shadow_repeats.push(id);
                    }
                    None
                }
                Some(id) => Some(id),
            };
            triaged.work.push(Work { handle: d.handle, id });
            triaged.messages.push(d.message);
        }
        let ids = if mode.computes() { triaged.work.iter().filter_map(|w| w.id.clone()).collect() } else { Vec::new() };
        let call = self.claim_call(ids);
        self.claiming = Some(triaged);
        Some(Prepared { dead_letters, call })
    }

    /// One of [`Prepared::dead_letters`] is done (`ok`: the source took it).
    pub(super) fn handle_dead_lettered(&mut self, ok: bool) {
        self.stats.dead_lettered += 1;
        self.events.push_back((MessageOutcome::DeadLettered, self.mode));
        if !ok {
            self.stats.settle_errors += 1;
            self.events.push_back((MessageOutcome::SettleFailed, self.mode));
        }
    }

    /// The claim call settling every batch whose step ended, then claiming `ids`.
    fn claim_call(&mut self, ids: Vec<MessageId>) -> ClaimCall {
        debug_assert!(self.settling.is_empty(), "one claim call at a time");
        // Batch n's claims are taken once every batch before n-1 is settled: those
        // are all settled in this call, first; only batch n-1, in its step, is left.
        let n = self.batches;
        debug_assert!(self.step.as_ref().is_none_or(|s| s.claimed.batch.no + 1 == n), "a claim call skipped a batch");
        self.settling = std::mem::take(&mut self.unsettled);
        let settle = self.settling.iter_mut().flat_map(|b| std::mem::take(&mut b.settlements)).collect();
        ClaimCall { settle, claim: ids }
    }

    /// The store's answer to `call`: how the settlements fared (counted), the plan of
    /// the batch whose claims it took, and the batches it settled, for the source.
    pub(super) fn handle_claims(&mut self, call: ClaimCall, answer: SettledThenClaimed) -> Vec<ForSource> {
        let ClaimCall { settle, claim } = call;
        // A claim call that failed may still run (a frozen store thaws and runs it),
        // taking pending claims with our token for messages given back: the report
        // names them for release once the store answers again.
        let may_have_claimed = match &answer.claimed {
            Ok(states) => states.len() != claim.len(),
            Err(e) => e.may_have_run(),
        };
        if may_have_claimed {
            self.maybe_claimed.extend(claim.iter().cloned());
        }
        self.judge_settlements(settle.len(), of_length(answer.settled, settle.len(), "settlements"));
        if let Some(batch) = self.claiming.take() {
            let claimed = self.judge_claims(batch, of_length(answer.claimed, claim.len(), "claims"));
            self.ahead = Some(claimed);
        }
        if self.finished {
            self.stale_claims = self.stale(&settle);
        }
        self.settling.drain(..).map(|b| b.for_source).collect()
    }

    /// What became of the claims we held (marked done after a submit, released after
    /// a failed one). A settlement answered `NotOwner` found
    /// the claim no longer ours (the pending TTL ran out during the submit): after a
    /// submit the message is a possible duplicate, counted. A failed call leaves the
    /// claims pending until the pending TTL: completed messages stay completed
    /// (never submitted twice), abandoned ones wait out the claim.
    fn judge_settlements(&mut self, n: usize, answer: Result<Vec<SettleResult>, PortError>) {
        if n == 0 {
            return;
        }
        match answer {
            Ok(answers) => {
                for _ in answers.iter().filter(|a| **a == SettleResult::NotOwner) {
                    self.stats.claims_expired += 1;
                    self.events.push_back((MessageOutcome::ClaimExpired, self.mode));
                }
                self.claims = self.claims.max(ClaimHealth::Answered);
            }
            Err(_) => {
                self.claims_failed = true;
                self.stats.claim_settle_errors += n as u64;
                for _ in 0..n {
                    self.events.push_back((MessageOutcome::ClaimSettleFailed, self.mode));
                }
                self.claims = ClaimHealth::Failed;
            }
        }
    }

    /// Each message's plan from its claim state, per switch. A failed call fails
    /// closed (On): nothing of the batch is submitted.
    fn judge_claims(&mut self, batch: Triaged, answer: Result<Vec<ClaimState>, PortError>) -> Claimed {
        let mode = self.mode;
        let mut plans = vec![Plan::Submit { claimed: false }; batch.work.len()];
        let mut would = if mode == Switch::Shadow { plans.clone() } else { Vec::new() };
        let asked: Vec<usize> = if mode.computes() {
            (0..batch.work.len()).filter(|&i| batch.work[i].id.is_some()).collect()
        } else {
            Vec::new()
        };
        if asked.is_empty() {
            return Claimed { batch, plans, would };
        }
        let states = match answer {
            Ok(states) => states,
            Err(_) => {
                self.claims_failed = true;
                self.claims = ClaimHealth::Failed;
                for &i in &asked {
                    if mode.enforces() {
                        plans[i] = Plan::Abandon(MessageOutcome::ClaimError);
                    } else {
                        self.events.push_back((MessageOutcome::ClaimError, Switch::Shadow));
                        would[i] = Plan::Abandon(MessageOutcome::ClaimError);
                    }
                }
                return Claimed { batch, plans, would };
            }
        };
        self.claims = self.claims.max(ClaimHealth::Answered);
        for (&i, state) in asked.iter().zip(states) {
            let on = match state {
                ClaimState::Claimed => Plan::Submit { claimed: true },
                ClaimState::Done => Plan::CompleteDuplicate,
                ClaimState::PendingElsewhere { .. } => Plan::Abandon(MessageOutcome::ClaimedElsewhere),
            };
            // Shadow submits as Off does, settling only the claims it took; what On
            // would do is counted when the step begins, once a pending claim of our
            // own earlier batch has been met.
            plans[i] = if mode.enforces() || on == (Plan::Submit { claimed: true }) {
                on
            } else {
                Plan::Submit { claimed: false }
            };
            if let Some(w) = would.get_mut(i) {
                *w = on;
            }
        }
        Claimed { batch, plans, would }
    }

    /// The step of the batch claimed: its own pending claims met, what Shadow would
    /// decide counted, its work as jobs.
    fn begin_step(&mut self, mut claimed: Claimed) -> Vec<Job> {
        meet_own_claims(&mut claimed, &self.unsettled);
        for plan in &claimed.would {
            match plan {
                Plan::CompleteDuplicate => self.events.push_back((MessageOutcome::Duplicate, Switch::Shadow)),
                Plan::Abandon(MessageOutcome::ClaimedElsewhere) => {
                    self.events.push_back((MessageOutcome::ClaimedElsewhere, Switch::Shadow));
                }
                _ => {}
            }
        }
        let batch = claimed.batch.no;
        let messages = std::mem::take(&mut claimed.batch.messages);
        let jobs = messages.into_iter().enumerate().map(|(at, message)| Job { slot: Slot { batch, at }, message });
        let jobs: Vec<Job> = jobs.collect();
        let skipped = vec![None; jobs.len()];
        self.step = Some(Step { claimed, skipped, ended: Vec::new(), completed_one: false, submitted: None });
        jobs
    }

    /// Whether to submit `job` now: a duplicate is completed and a message given back
    /// without a submit; once the drain stops, nothing more is submitted.
    pub(super) fn start(&mut self, job: Slot) -> Start {
        let stopping = self.stop.is_some();
        let step = self.step.as_mut().expect("a job starts in its step");
        debug_assert_eq!(job.batch, step.claimed.batch.no, "a job of another step");
        let fate = match step.claimed.plans[job.at] {
            Plan::CompleteDuplicate => Fate::Complete(MessageOutcome::Duplicate),
            Plan::Abandon(why) => Fate::Abandon(why),
            Plan::Submit { .. } if stopping => Fate::Abandon(MessageOutcome::Cancelled),
            Plan::Submit { .. } => return Start::Submit,
        };
        step.skipped[job.at] = Some(fate);
        Start::Skip
    }

    /// `job` ended: `submitted` is the submit's success, `None` when it was skipped.
    /// True for the step's first completed message: the next batch may be received.
    pub(super) fn handle_submitted(&mut self, job: Slot, submitted: Option<bool>) -> bool {
        let step = self.step.as_mut().expect("a job ends in its step");
        debug_assert_eq!(job.batch, step.claimed.batch.no, "a job of another step");
        let fate = match submitted {
            None => step.skipped[job.at].take().expect("`start` skipped it"),
            Some(true) => Fate::Complete(MessageOutcome::Submitted),
            Some(false) => Fate::Abandon(MessageOutcome::SubmitFailed),
        };
        step.ended.push((job.at, fate));
        let first = matches!(fate, Fate::Complete(_)) && !step.completed_one;
        step.completed_one |= first;
        first
    }

    /// Every job of the step ended, the submits in `took`: the claims to settle by
    /// what became of each message, each message's fate at the source, and the
    /// window told how the target fared.
    pub(super) fn end_submit(&mut self, took: Duration) {
        let step = self.step.as_mut().expect("a step");
        debug_assert_eq!(step.ended.len(), step.claimed.plans.len(), "every job of the step ended");
        let Claimed { batch, plans, would } = &step.claimed;
        let ended = std::mem::take(&mut step.ended);
        let count =
            |o: MessageOutcome| ended.iter().filter(|(_, f)| *f == Fate::Complete(o) || *f == Fate::Abandon(o)).count();
        let (submitted, failed) = (count(MessageOutcome::Submitted), count(MessageOutcome::SubmitFailed));
        self.window.handle_step(ended.len(), submitted as u64, failed as u64, took);
        let settlements: Vec<Settlement> = ended
            .iter()
            .filter(|(i, _)| matches!(plans[*i], Plan::Submit { claimed: true }))
            .filter_map(|(i, fate)| {
                let id = batch.work[*i].id.clone()?;
                let action = match fate {
                    Fate::Complete(_) => SettleAction::Done,
                    Fate::Abandon(_) => SettleAction::Release,
                };
                Some(Settlement { id, action })
            })
            .collect();
        // A later copy of an id in this batch follows the first: a duplicate once that
        // completed (it is completed after the batch's claims are settled), released
        // otherwise (the first copy's claim, pending or released, decides it later).
        // Shadow, which submitted every copy, counts the same for its later copies,
        // from what On would have done with the first.
        let completed: HashSet<&MessageId> = ended
            .iter()
            .filter(|(i, fate)| match would.get(*i) {
                Some(Plan::CompleteDuplicate) => true,
                Some(Plan::Abandon(_)) => false,
                Some(Plan::Submit { .. }) | None => matches!(fate, Fate::Complete(_)),
            })
            .filter_map(|(i, _)| batch.work[*i].id.as_ref())
            .collect();
        let repeat = |id: &MessageId| {
            if completed.contains(id) { MessageOutcome::Duplicate } else { MessageOutcome::ClaimedElsewhere }
        };
        for id in &batch.shadow_repeats {
            self.events.push_back((repeat(id), Switch::Shadow));
        }
        let mut fates: Vec<ToSource> = batch
            .repeats
            .iter()
            .map(|(handle, id)| {
                let fate = match repeat(id) {
                    MessageOutcome::Duplicate => Fate::Complete(MessageOutcome::Duplicate),
                    other => Fate::Abandon(other),
                };
                ToSource { handle: *handle, fate }
            })
            .collect();
        fates.extend(ended.iter().map(|&(i, fate)| ToSource { handle: batch.work[i].handle, fate }));
        let (abandons, completes) = fates.into_iter().partition(|m| matches!(m.fate, Fate::Abandon(_)));
        let received = batch.received;
        step.submitted = Some(Submitted { received, settlements, for_source: ForSource { abandons, completes } });
    }

    /// The step ended (its submits, and the receive and claim call beside them): its
    /// batch waits for the next claim call to settle its claims.
    pub(super) fn end_step(&mut self) {
        let step = self.step.take().expect("a step");
        let submitted = step.submitted.expect("`end_submit` ends the submits first");
        self.all_back = submitted.for_source.abandons.len() == submitted.received;
        self.unsettled.push(submitted);
    }

    /// Messages settled at the source (`true`: the source took the settlement):
    /// counted. Answers how many of them were submitted.
    pub(super) fn handle_at_source(&mut self, settled: &[(ToSource, bool)]) -> u64 {
        let mode = self.mode;
        let st = &mut self.stats;
        let submitted_before = st.submitted;
        for &(m, ok) in settled {
            let outcome = match m.fate {
                Fate::Complete(o) => {
                    match o {
                        MessageOutcome::Duplicate => st.duplicates += 1,
                        _ => st.submitted += 1,
                    }
                    o
                }
                Fate::Abandon(o) => {
                    st.abandoned += 1;
                    match o {
                        MessageOutcome::ClaimError => st.claim_errors += 1,
                        MessageOutcome::SubmitFailed => st.submit_failures += 1,
                        _ => {}
                    }
                    o
                }
            };
            self.events.push_back((outcome, mode));
            if !ok {
                st.settle_errors += 1;
                self.events.push_back((MessageOutcome::SettleFailed, mode));
            }
        }
        st.submitted - submitted_before
    }

    /// The next decision to observe, as the outcome and the switch it was taken under.
    pub(super) fn poll_event(&mut self) -> Option<(MessageOutcome, Switch)> {
        self.events.pop_front()
    }

    /// The claims a failed call may still take, once each, to be released with this
    /// tick's token when the store answers again; `last` is the tick's last
    /// settlements. An id this tick submitted whose `done` mark is among them is left
    /// out: it holds the pending claim of an earlier call, which stands for the submit
    /// until its mark lands or the pending TTL ends, and releasing it would let a
    /// redelivered copy be submitted a second time. (The `done` marks sent in the failed
    /// call itself run before its claims, so a late claim of such an id finds `done`.)
    fn stale(&mut self, last: &[Settlement]) -> Vec<MessageId> {
        let ids = std::mem::take(&mut self.maybe_claimed);
        if ids.is_empty() {
            return ids;
        }
        let mut skip: HashSet<&MessageId> =
            last.iter().filter(|s| s.action == SettleAction::Done).map(|s| &s.id).collect();
        ids.iter().filter(|id| skip.insert(*id)).cloned().collect()
    }

    /// What the drain did, once its last claim call is answered.
    pub(super) fn into_outcome(self) -> DrainOutcome {
        debug_assert!(self.finished && self.settling.is_empty(), "the drain finished");
        let error = match self.end {
            Some(End::Failed(e)) => Some(e),
            Some(End::Empty) | None => None,
        };
        let claims = if self.claims_failed { ClaimHealth::Failed } else { self.claims };
        DrainOutcome { stats: self.stats, error, claims, stale_claims: self.stale_claims }
    }
}

/// A batch claimed while the one before was submitted can find that batch's claims
/// pending: ours. Once `earlier` (the batches whose steps ended, claims not yet
/// settled) has submitted such a message, this batch's copy is a duplicate,
/// completed after the claims are settled; a copy whose earlier submit failed goes
/// back for a later receive. Shadow's `would` meets them as On's plans do.
fn meet_own_claims(claimed: &mut Claimed, earlier: &[Submitted]) {
    let busy = Plan::Abandon(MessageOutcome::ClaimedElsewhere);
    if !claimed.plans.contains(&busy) && !claimed.would.contains(&busy) {
        return;
    }
    let submitted: HashSet<&MessageId> =
        earlier.iter().flat_map(|b| &b.settlements).filter(|s| s.action == SettleAction::Done).map(|s| &s.id).collect();
    let work = &claimed.batch.work;
    for plans in [&mut claimed.plans, &mut claimed.would] {
        for (plan, w) in plans.iter_mut().zip(work) {
            if *plan == busy && w.id.as_ref().is_some_and(|id| submitted.contains(id)) {
                *plan = Plan::CompleteDuplicate;
            }
        }
    }
}

/// `answer` when it has `n` entries, else a protocol error: an answer of the wrong
/// length cannot be trusted.
pub(super) fn of_length<T>(answer: Result<Vec<T>, PortError>, n: usize, what: &str) -> Result<Vec<T>, PortError> {
    match answer {
        Ok(v) if v.len() == n => Ok(v),
        Ok(v) => Err(PortError::new(ErrorKind::Protocol, format!("{} answers to {n} {what}", v.len()))),
        Err(e) => Err(e),
    }
}

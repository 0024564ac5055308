//! The drain loop of one tick: receive batches, take their claims, submit with
//! bounded concurrency, settle the claims, then settle each message at the source.
//!
//! Three batches overlap. While batch k is submitted, batch k+1 is received and its
//! claims taken, in the same store call that settles batch k-1's (one round trip
//! with a store that overrides `ClaimStore::settle_then_claim`); batch k-1's
//! messages then go to the source, completed or given back, on a settler of their
//! own. So the submits of one batch follow the last of the batch before with no
//! receive or claim call between them. The order that matters is kept: a message is
//! completed (or given back) at the source only after its claim is settled; a batch's
//! claims are settled before those of the batch two later are taken, so a message
//! that went back and is received again meets `done` or nothing; and batch k+1 is
//! received only once one of batch k's messages has completed, so a batch that all
//! goes back (a claim store or a target refusing everything) stops the drain before
//! another receive. Any claim-store failure stops the receiving after the batch in
//! hand. When the call that settles batch k-1 fails, batch k+1 has been received
//! already and goes back (its claims could not be taken either): one batch per
//! failure, as when a claim call fails. A message whose id is in batch k and again in
//! batch k+1 finds batch k's claim pending; once batch k has submitted it, the copy
//! is completed as a duplicate after the claims are settled (when batch k's submit
//! failed, the copy is released, uncounted, for a later receive).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::SinkExt;
use futures::channel::{mpsc, oneshot};
use futures::stream::{self, StreamExt};

use crate::error::{ErrorKind, PortError};
use crate::event::{Event, MessageOutcome};
use crate::guard::Held;
use crate::ports::{
    ClaimState, ClaimTtls, Delivery, DeliveryHandle, MessageId, SettleAction, SettleResult, SettledThenClaimed,
    Settlement, SubmitContext,
};
use crate::switch::Switch;
use crate::tick::health::Health;
use crate::tick::{ClaimHealth, DrainStats, TickConfig, TickControl, TickPorts};
use crate::token::LeaseToken;

/// Reason given when dead-lettering a message that has no message id.
pub const MISSING_ID_REASON: &str = "MissingMessageId";
const MISSING_ID_DESCRIPTION: &str =
    "the message has no message-id; drain keys its single-submit claim on it and cannot process it safely";

pub(super) struct DrainOutcome {
    pub(super) stats: DrainStats,
    pub(super) error: Option<String>,
    pub(super) claims: ClaimHealth,
    pub(super) stale_claims: Vec<MessageId>,
}

/// Everything one drain needs, borrowed.
pub(super) struct Drain<'a> {
    pub(super) cfg: &'a TickConfig,
    pub(super) ports: &'a TickPorts<'a>,
    pub(super) token: &'a LeaseToken,
    /// The lease, as the guard keeps it: its fence goes to the submitter (`None`
    /// unless single-flight is On and we hold the lease), its loss stops the drain.
    pub(super) held: &'a Held,
    /// A stop from outside (shutdown), and counts so far for whoever watches the tick.
    pub(super) control: &'a TickControl,
    /// What this tick learnt about its stores.
    pub(super) health: &'a Health,
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

/// The drain's counters, shared by the two batches in flight (held only between
/// awaits, never across one).
fn count(stats: &Mutex<DrainStats>) -> MutexGuard<'_, DrainStats> {
    stats.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A later copy of an id in a batch: a duplicate once the first copy `completed`,
/// claimed elsewhere (given back, uncounted where the source can) otherwise.
fn repeat_outcome(completed: &HashSet<&MessageId>, id: &MessageId) -> MessageOutcome {
    if completed.contains(id) { MessageOutcome::Duplicate } else { MessageOutcome::ClaimedElsewhere }
}

/// A received batch with its claims taken.
struct Claimed {
    received: usize,
    work: Vec<(Delivery, Option<MessageId>)>,
    plans: Vec<Plan>,
    /// Later copies of an id seen earlier in the batch (claim On): decided by what
    /// becomes of the first copy.
    repeats: Vec<(DeliveryHandle, MessageId)>,
    /// Claim Shadow: what On would do with each message of `work` (which Shadow
    /// submits as Off does), counted in `submit`; empty in the other modes.
    would: Vec<Plan>,
    /// Claim Shadow: the ids of the later copies Shadow submits anyway; each counts
    /// what On would decide once the first copy's fate is known.
    shadow_repeats: Vec<MessageId>,
    /// How the claim store fared with the batch's claims.
    health: ClaimHealth,
}

impl Claimed {
    /// A batch claimed while the one before was submitted can find that batch's
    /// claims pending: ours. Once `earlier` (the batches submitted since, claims not
    /// yet settled) has submitted such a message, this batch's copy is a duplicate,
    /// completed after the claims are settled; a copy whose earlier submit failed
    /// goes back for a later receive.
    /// Shadow's `would` meets them as On's plans do.
    fn meet_own_claims(&mut self, earlier: &[Submitted]) {
        let busy = Plan::Abandon(MessageOutcome::ClaimedElsewhere);
        if !self.plans.contains(&busy) && !self.would.contains(&busy) {
            return;
        }
        let submitted: HashSet<&MessageId> = earlier
            .iter()
            .flat_map(|b| &b.settlements)
            .filter(|s| s.action == SettleAction::MarkDone)
            .map(|s| &s.id)
            .collect();
        for plans in [&mut self.plans, &mut self.would] {
            for (plan, (_, id)) in plans.iter_mut().zip(&self.work) {
                if *plan == busy && id.as_ref().is_some_and(|id| submitted.contains(id)) {
                    *plan = Plan::CompleteDuplicate;
                }
            }
        }
    }
}

/// A submitted batch, waiting for its settlements.
struct Submitted {
    received: usize,
    /// The claims it holds, by what became of each message.
    settlements: Vec<Settlement>,
    /// Messages going back to the source.
    abandons: Vec<(DeliveryHandle, Fate)>,
    /// Messages to complete at the source.
    completes: Vec<(DeliveryHandle, Fate)>,
    health: ClaimHealth,
}

impl Submitted {
    /// Every message of the batch goes back to the source.
    fn all_abandoned(&self) -> bool {
        self.abandons.len() == self.received
    }
}

/// What came of receiving the next batch beside a batch's submits.
enum Ahead {
    /// Received and claimed, in the call that settled the batches behind (how those
    /// settlements fared).
    Claimed { batch: Claimed, settled: ClaimHealth },
    /// Not received: no message of the batch submitted completed, or the drain is
    /// stopping.
    NotTried,
    /// The queue is empty.
    Empty,
    /// The receive failed.
    Failed(String),
}

/// How a message ended, before settling at the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Complete(MessageOutcome),
    Abandon(MessageOutcome),
}

impl Drain<'_> {
    fn cancelled(&self) -> bool {
        self.held.is_lost() || self.control.is_stopped()
    }

    /// Receiving more cannot succeed: the claim store failed (or is known down)
    /// while the claim decides (On). What was received is abandoned; receiving more
    /// would only abandon more, each costing its message a delivery at the broker.
    fn claims_failed(&self) -> bool {
        self.cfg.atomic_claim.enforces() && self.health.claims_failed()
    }

    pub(super) async fn run(&self) -> DrainOutcome {
        let stats = Mutex::new(DrainStats::default());
        // One batch waits while the settler works on another: a source slow to settle
        // slows the receiving instead of piling up held messages.
        let (to_source, settled) = mpsc::channel(0);
        let ((error, mut claims, stale_claims), ()) =
            futures::join!(self.pipeline(to_source, &stats), self.settle_at_source_in_turn(settled, &stats));
        if self.health.claims_failed() {
            claims = ClaimHealth::Failed;
        }
        let stats = stats.into_inner().unwrap_or_else(PoisonError::into_inner);
        DrainOutcome { stats, error, claims, stale_claims }
    }

    /// Receive, claim and submit batch after batch; each batch, once its claims are
    /// settled, goes to `to_source`. The receive error that ended it, if any, how
    /// the claim store fared, and the claims a failed call may still take.
    async fn pipeline(
        &self,
        mut to_source: mpsc::Sender<Submitted>,
        stats: &Mutex<DrainStats>,
    ) -> (Option<String>, ClaimHealth, Vec<MessageId>) {
        let mut batches = 0u32;
        let mut claims = ClaimHealth::NotAsked;
        // Batches submitted whose claims are not settled yet, oldest first: settled in
        // the next claim-store call that takes claims, or in one of their own at the end.
        let mut unsettled: Vec<Submitted> = Vec::new();
        // The next batch, received and claimed while the one before was submitted.
        let mut ahead: Option<Claimed> = None;
        let mut all_back = false;
        let error = loop {
            let claimed = match ahead.take() {
                Some(mut claimed) => {
                    claimed.meet_own_claims(&unsettled);
                    claimed
                }
                None => {
                    if all_back || self.stopping(batches) {
                        // Every message of the last batch went back to the source, which
                        // offers abandoned messages again at once: receiving them again in
                        // this tick cannot go better (the claim store fails, other holders'
                        // claims stand, the target refuses). Stop; the next tick retries.
                        // Otherwise an outage spins receive/abandon for as long as it
                        // lasts, holding a worker and burning delivery counts.
                        break None;
                    }
                    let batch = match self.receive(stats).await {
                        Ok(Some(batch)) => batch,
                        Ok(None) => break None,
                        Err(e) => break Some(format!("receive failed: {e}")),
                    };
                    batches += 1;
                    let (claimed, settled) = self.prepare(batch, &settlements_of(&unsettled), stats).await;
                    let behind = std::mem::take(&mut unsettled);
                    claims = claims.max(self.hand_over(behind, settled, &mut to_source).await);
                    claimed
                }
            };
            // Batch k is submitted; beside it, once one of its messages has completed,
            // batch k+1 is received and claimed in the call that settles batch k-1.
            let (completed, first_completed) = oneshot::channel();
            let behind = std::mem::take(&mut unsettled);
            let (submitted, (next, still_unsettled, settled)) = futures::join!(
                self.submit(claimed, completed),
                self.beside(behind, first_completed, batches, &mut to_source, stats)
            );
            claims = claims.max(settled);
            all_back = submitted.all_abandoned();
            unsettled = still_unsettled;
            unsettled.push(submitted);
            match next {
                Ahead::Claimed { batch, .. } => {
                    batches += 1;
                    ahead = Some(batch);
                }
                Ahead::NotTried => {}
                Ahead::Empty => break None,
                Ahead::Failed(e) => break Some(e),
            }
        };
        // What is left: settled in one call, then at the source.
        let settlements = settlements_of(&unsettled);
        let answer = self.settle_then_claim(&settlements, &[]).await;
        let settled = self.settled(&settlements, answer.settled, stats);
        let stale = self.stale_claims(&settlements);
        drop(settlements);
        claims = claims.max(self.hand_over(unsettled, settled, &mut to_source).await);
        (error, claims, stale)
    }

    /// The claims a failed call may still take, once each, to be released with this
    /// tick's token when the store answers again; `last` is the tick's last
    /// settlements. An id this tick submitted whose `done` mark is among them is left
    /// out: it holds the pending claim of an earlier call, which stands for the submit
    /// until its mark lands or the pending TTL ends, and releasing it would let a
    /// redelivered copy be submitted a second time. (The `done` marks sent in the failed
    /// call itself run before its claims, so a late claim of such an id finds `done`.)
    fn stale_claims(&self, last: &[Settlement]) -> Vec<MessageId> {
        let ids = self.health.take_maybe_claimed();
        if ids.is_empty() {
            return ids;
        }
        // Ids not to name: those marked done, and each one named already.
        let mut skip: HashSet<&MessageId> =
            last.iter().filter(|s| s.action == SettleAction::MarkDone).map(|s| &s.id).collect();
        let mut stale: Vec<MessageId> = Vec::with_capacity(ids.len());
        for id in &ids {
            if skip.insert(id) {
                stale.push(id.clone());
            }
        }
        stale
    }

    /// Receiving more is not wanted: cancelled, the claim store failed, or the
    /// batches allowed were received.
    fn stopping(&self, batches: u32) -> bool {
        self.cancelled() || self.claims_failed() || self.cfg.max_batches.is_some_and(|max| batches >= max)
    }

    /// Beside batch k's submits: once `first_completed` says one of batch k's
    /// messages completed (a batch that all goes back never says it), receive batch
    /// k+1 and take its claims in the call that settles the batches `behind` (batch
    /// k-1), which then go to the source. What came of batch k+1, the batches left
    /// unsettled (no batch k+1 came: the next call settles them), and how the
    /// settled ones fared.
    async fn beside(
        &self,
        behind: Vec<Submitted>,
        first_completed: oneshot::Receiver<()>,
        batches: u32,
        to_source: &mut mpsc::Sender<Submitted>,
        stats: &Mutex<DrainStats>,
    ) -> (Ahead, Vec<Submitted>, ClaimHealth) {
        let next = self.ahead(first_completed, &settlements_of(&behind), batches, stats).await;
        match next {
            Ahead::Claimed { settled, .. } => {
                let health = self.hand_over(behind, settled, to_source).await;
                (next, Vec::new(), health)
            }
            _ => (next, behind, ClaimHealth::NotAsked),
        }
    }

    /// Once `first_completed` fires, and unless the drain is stopping: receive the
    /// next batch and take its claims in the call that settles `settlements`.
    async fn ahead(
        &self,
        first_completed: oneshot::Receiver<()>,
        settlements: &[Settlement],
        batches: u32,
        stats: &Mutex<DrainStats>,
    ) -> Ahead {
        if first_completed.await.is_err() || self.stopping(batches) {
            return Ahead::NotTried;
        }
        match self.receive(stats).await {
            Ok(Some(batch)) => {
                let (batch, settled) = self.prepare(batch, settlements, stats).await;
                Ahead::Claimed { batch, settled }
            }
            Ok(None) => Ahead::Empty,
            Err(e) => Ahead::Failed(format!("receive failed: {e}")),
        }
    }

    /// Batches whose claims were just settled (`settled` says how that went) go to
    /// the source: how their claims fared, all told.
    async fn hand_over(
        &self,
        batches: Vec<Submitted>,
        settled: ClaimHealth,
        to_source: &mut mpsc::Sender<Submitted>,
    ) -> ClaimHealth {
        let mut health = settled;
        for batch in batches {
            health = health.max(batch.health);
            // The settler reads until the pipeline drops its sender, so the send
            // cannot find it gone.
            let _ = to_source.send(batch).await;
        }
        health
    }

    /// Settle at the source, batch after batch, what `settled` brings (batches whose
    /// claims are settled), until the pipeline ends.
    async fn settle_at_source_in_turn(&self, mut settled: mpsc::Receiver<Submitted>, stats: &Mutex<DrainStats>) {
        while let Some(batch) = settled.next().await {
            futures::join!(self.settle_at_source(batch.abandons, stats), self.settle_at_source(batch.completes, stats));
        }
    }

    fn observe(&self, outcome: MessageOutcome, mode: Switch) {
        self.ports.observer.observe(&Event::Message { queue: &self.cfg.queue, outcome, mode });
    }

    /// Receive a batch: `None` when the queue is empty.
    async fn receive(&self, stats: &Mutex<DrainStats>) -> Result<Option<Vec<Delivery>>, PortError> {
        let batch = self.ports.source.receive(self.cfg.batch.max(1), self.cfg.max_wait).await?;
        if batch.is_empty() {
            return Ok(None);
        }
        let received = batch.len() as u64;
        count(stats).received += received;
        self.control.add_received(received);
        Ok(Some(batch))
    }

    /// Triage a received batch, settle the previous batch's claims and take this
    /// one's (one call): the batch, and how the settlement fared.
    async fn prepare(
        &self,
        batch: Vec<Delivery>,
        settlements: &[Settlement],
        stats: &Mutex<DrainStats>,
    ) -> (Claimed, ClaimHealth) {
        let received = batch.len();
        let mode = self.cfg.atomic_claim;
        // 1. Triage. With the claim On: no id -> dead-letter (the claim is keyed on
        //    it); an id seen earlier in this batch -> set aside: a duplicate once the
        //    first copy completes, released for a later receive otherwise (see
        //    `submit`). Off and Shadow behave as without the claim: both are submitted
        //    (Shadow counts what On would have done).
        let mut seen = HashSet::new();
        let mut work: Vec<(Delivery, Option<MessageId>)> = Vec::with_capacity(received);
        let mut repeats: Vec<(DeliveryHandle, MessageId)> = Vec::new();
        let mut shadow_repeats: Vec<MessageId> = Vec::new();
        for d in batch {
            match d.message.message_id.clone() {
                None if mode.enforces() => {
                    let r = self.ports.source.dead_letter(d.handle, MISSING_ID_REASON, MISSING_ID_DESCRIPTION).await;
                    let mut st = count(stats);
                    st.dead_lettered += 1;
                    self.observe(MessageOutcome::DeadLettered, mode);
                    if r.is_err() {
                        st.settle_errors += 1;
                        self.observe(MessageOutcome::SettleFailed, mode);
                    }
                }
                None => {
                    if mode == Switch::Shadow {
                        self.observe(MessageOutcome::DeadLettered, mode);
                    }
                    work.push((d, None));
                }
                Some(id) if !seen.insert(id.clone()) => {
                    if mode.enforces() {
                        repeats.push((d.handle, id));
                    } else {
                        if mode == Switch::Shadow {
                            shadow_repeats.push(id);
                        }
                        work.push((d, None));
                    }
                }
                Some(id) => work.push((d, Some(id))),
            }
        }

        // 2. Claims: one call for the whole batch, which first settles the previous one's.
        let (plans, would, health, settled) = self.plan(&work, mode, settlements, stats).await;
        (Claimed { received, work, plans, repeats, would, shadow_repeats, health }, settled)
    }

    /// Step 3: submit, bounded by the concurrency: each message's fate, and the
    /// claims to settle by what became of each message.
    /// `completed` is told when the first message of the batch completes (submitted,
    /// or a duplicate of one done), and dropped unsent when none does.
    async fn submit(&self, claimed: Claimed, completed: oneshot::Sender<()>) -> Submitted {
        let Claimed { received, work, plans, repeats, would, shadow_repeats, health } = claimed;
        for plan in &would {
            match plan {
                Plan::CompleteDuplicate => self.observe(MessageOutcome::Duplicate, Switch::Shadow),
                Plan::Abandon(MessageOutcome::ClaimedElsewhere) => {
                    self.observe(MessageOutcome::ClaimedElsewhere, Switch::Shadow);
                }
                _ => {}
            }
        }
        let ctx = SubmitContext { queue: &self.cfg.queue, fence: self.held.fence() };
        let jobs: Vec<(usize, Plan)> = plans.iter().copied().enumerate().collect();
        let work_ref = &work;
        let ctx_ref = &ctx;
        let mut outcomes = stream::iter(jobs)
            .map(|(i, plan)| async move {
                let fate = match plan {
                    Plan::CompleteDuplicate => Fate::Complete(MessageOutcome::Duplicate),
                    Plan::Abandon(why) => Fate::Abandon(why),
                    Plan::Submit { .. } if self.cancelled() => Fate::Abandon(MessageOutcome::Cancelled),
                    Plan::Submit { .. } => match self.ports.target.submit(&work_ref[i].0.message, ctx_ref).await {
                        Ok(()) => Fate::Complete(MessageOutcome::Submitted),
                        Err(_) => Fate::Abandon(MessageOutcome::SubmitFailed),
                    },
                };
                (i, fate)
            })
            .buffer_unordered(self.cfg.concurrency.max(1));
        let mut completed = Some(completed);
        let mut results: Vec<(usize, Fate)> = Vec::with_capacity(plans.len());
        while let Some((i, fate)) = outcomes.next().await {
            if matches!(fate, Fate::Complete(_))
                && let Some(tell) = completed.take()
            {
                // The other half may have stopped listening; nothing to do then.
                let _ = tell.send(());
            }
            results.push((i, fate));
        }
        let settlements: Vec<Settlement> = results
            .iter()
            .filter(|(i, _)| matches!(plans[*i], Plan::Submit { claimed: true }))
            .filter_map(|(i, fate)| {
                let id = work[*i].1.clone()?;
                let action = match fate {
                    Fate::Complete(_) => SettleAction::MarkDone,
                    Fate::Abandon(_) => SettleAction::Release,
                };
                Some(Settlement { id, action })
            })
            .collect();
        // A later copy of an id in this batch follows the first: a duplicate once that
        // completed (it is completed after the batch's claims are settled), released
        // otherwise (the first copy's claim, pending or released, decides it later).
        // Shadow, which submitted every copy, counts the same for its later copies,
        // from what On would have done with the first: completed it as a duplicate,
        // given it back, or submitted it as Shadow did.
        let completed: HashSet<&MessageId> = results
            .iter()
            .filter(|(i, fate)| match would.get(*i) {
                Some(Plan::CompleteDuplicate) => true,
                Some(Plan::Abandon(_)) => false,
                Some(Plan::Submit { .. }) | None => matches!(fate, Fate::Complete(_)),
            })
            .filter_map(|(i, _)| work[*i].1.as_ref())
            .collect();
        for id in &shadow_repeats {
            self.observe(repeat_outcome(&completed, id), Switch::Shadow);
        }
        let mut fates: Vec<(DeliveryHandle, Fate)> = repeats
            .into_iter()
            .map(|(handle, id)| {
                let fate = match repeat_outcome(&completed, &id) {
                    MessageOutcome::Duplicate => Fate::Complete(MessageOutcome::Duplicate),
                    other => Fate::Abandon(other),
                };
                (handle, fate)
            })
            .collect();
        fates.extend(results.into_iter().map(|(i, fate)| (work[i].0.handle, fate)));
        let (abandons, completes) = fates.into_iter().partition(|(_, f)| matches!(f, Fate::Abandon(_)));
        Submitted { received, settlements, abandons, completes, health }
    }

    /// Step 5: settle messages at the source, once their claims are settled
    /// ([`Self::settle_then_claim`] or [`Self::finish`] has answered for their batch): complete, abandon, or,
    /// for a message whose claim another holder has pending, release when the source
    /// can (no delivery counted).
    async fn settle_at_source(&self, fates: Vec<(DeliveryHandle, Fate)>, stats: &Mutex<DrainStats>) {
        if fates.is_empty() {
            return;
        }
        let mode = self.cfg.atomic_claim;
        let release = self.ports.source.capabilities().release;
        let settled: Vec<(Fate, bool)> = stream::iter(fates)
            .map(|(handle, fate)| async move {
                let ok = match fate {
                    Fate::Complete(_) => self.ports.source.complete(handle).await.is_ok(),
                    // Claim-busy: another holder's claim is pending, the message did not
                    // fail. Where the source can, it goes back uncounted, so that a
                    // broker's maximum delivery count never dead-letters a message
                    // only for having met its own redelivery in flight.
                    Fate::Abandon(MessageOutcome::ClaimedElsewhere) if release => {
                        self.ports.source.release(handle).await.is_ok()
                    }
                    Fate::Abandon(_) => self.ports.source.abandon(handle).await.is_ok(),
                };
                (fate, ok)
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await;
        let mut st = count(stats);
        let submitted_before = st.submitted;
        for (fate, ok) in settled {
            let outcome = match fate {
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
            self.observe(outcome, mode);
            if !ok {
                st.settle_errors += 1;
                self.observe(MessageOutcome::SettleFailed, mode);
            }
        }
        self.control.add_submitted(st.submitted - submitted_before);
    }

    /// Step 4: what became of the claims we held (marked done after a submit,
    /// released after a failed one), checked answer by answer: a settlement answered
    /// `NotOwner` found the claim no longer ours (the pending TTL ran out during the
    /// submit), so after a submit the message is a possible duplicate (another holder
    /// may have taken it over); it is counted and reported. A failed call leaves the
    /// claims `pending` until the pending TTL: completed messages stay completed
    /// (never submitted twice), abandoned ones wait out the claim.
    fn settled(
        &self,
        settlements: &[Settlement],
        answer: Result<Vec<SettleResult>, PortError>,
        stats: &Mutex<DrainStats>,
    ) -> ClaimHealth {
        let mode = self.cfg.atomic_claim;
        if settlements.is_empty() {
            return ClaimHealth::NotAsked;
        }
        match answer {
            Ok(answers) => {
                let mut st = count(stats);
                for _ in answers.iter().filter(|a| **a == SettleResult::NotOwner) {
                    st.claims_expired += 1;
                    self.observe(MessageOutcome::ClaimExpired, mode);
                }
                ClaimHealth::Answered
            }
            Err(e) => {
                self.health.claims_error(&e);
                count(stats).claim_settle_errors += settlements.len() as u64;
                for _ in settlements {
                    self.observe(MessageOutcome::ClaimSettleFailed, mode);
                }
                ClaimHealth::Failed
            }
        }
    }

    /// Settle the previous batch's claims and decide each message's plan from its
    /// claim state (one store call), per switch: the plans, what On would plan
    /// (Shadow only; empty otherwise), how the claims fared, how the settlements fared.
    async fn plan(
        &self,
        work: &[(Delivery, Option<MessageId>)],
        mode: Switch,
        settlements: &[Settlement],
        stats: &Mutex<DrainStats>,
    ) -> (Vec<Plan>, Vec<Plan>, ClaimHealth, ClaimHealth) {
        let mut plans = vec![Plan::Submit { claimed: false }; work.len()];
        let mut would = if mode == Switch::Shadow { plans.clone() } else { Vec::new() };
        let claimed: Vec<usize> =
            if mode.computes() { (0..work.len()).filter(|&i| work[i].1.is_some()).collect() } else { Vec::new() };
        let ids: Vec<MessageId> = claimed.iter().filter_map(|&i| work[i].1.clone()).collect();
        let answer = self.settle_then_claim(settlements, &ids).await;
        let settled = self.settled(settlements, answer.settled, stats);
        if claimed.is_empty() {
            return (plans, would, ClaimHealth::NotAsked, settled);
        }
        let states = match answer.claimed {
            Ok(states) => states,
            // Fail closed: submit nothing.
            Err(e) => {
                self.health.claims_error(&e);
                if mode.enforces() {
                    for &i in &claimed {
                        plans[i] = Plan::Abandon(MessageOutcome::ClaimError);
                    }
                } else {
                    for &i in &claimed {
                        self.observe(MessageOutcome::ClaimError, Switch::Shadow);
                        would[i] = Plan::Abandon(MessageOutcome::ClaimError);
                    }
                }
                return (plans, would, ClaimHealth::Failed, settled);
            }
        };
        for (&i, state) in claimed.iter().zip(states) {
            let on = match state {
                ClaimState::Claimed => Plan::Submit { claimed: true },
                ClaimState::Done => Plan::CompleteDuplicate,
                ClaimState::PendingElsewhere { .. } => Plan::Abandon(MessageOutcome::ClaimedElsewhere),
            };
            // Shadow submits as Off does, settling only the claims it took; what On
            // would do is counted in `submit`, after a pending claim of our own
            // earlier batch has been met (`Claimed::meet_own_claims`).
            plans[i] = if mode.enforces() || on == (Plan::Submit { claimed: true }) {
                on
            } else {
                Plan::Submit { claimed: false }
            };
            if let Some(w) = would.get_mut(i) {
                *w = on;
            }
        }
        (plans, would, ClaimHealth::Answered, settled)
    }

    /// Settle `settlements`, then take the claims of `ids`: one store call (none when
    /// both are empty), or fail as an unreachable store would when there is no claim
    /// store or it timed out earlier in this tick. An answer of the wrong length is
    /// an error: it cannot be trusted.
    async fn settle_then_claim(&self, settlements: &[Settlement], ids: &[MessageId]) -> SettledThenClaimed {
        if settlements.is_empty() && ids.is_empty() {
            return SettledThenClaimed { settled: Ok(Vec::new()), claimed: Ok(Vec::new()) };
        }
        let Some(store) = self.ports.claims else {
            return SettledThenClaimed::failed(PortError::new(ErrorKind::Config, "no claim store configured"));
        };
        if self.health.claims_down() {
            let e = PortError::new(ErrorKind::Timeout, "the claim store timed out earlier in this tick").never_sent();
            return SettledThenClaimed::failed(e);
        }
        let (queue, token) = (self.cfg.queue.as_str(), self.token);
        let ttls = ClaimTtls { pending: self.cfg.claim_pending_ttl, done: self.cfg.claim_done_ttl };
        let answer = if settlements.is_empty() {
            SettledThenClaimed {
                settled: Ok(Vec::new()),
                claimed: store.claim_batch(queue, ids, token, ttls.pending).await,
            }
        } else if ids.is_empty() {
            SettledThenClaimed {
                settled: store.settle_batch(queue, settlements, token, ttls.done).await,
                claimed: Ok(Vec::new()),
            }
        } else {
            store.settle_then_claim(queue, settlements, ids, token, ttls).await
        };
        // A claim call that failed may still run (a frozen store thaws and runs it),
        // taking pending claims with our token for messages given back: the caller
        // releases them once the store answers again (see `TickReport::stale_claims`).
        let may_have_claimed = match &answer.claimed {
            Ok(states) => states.len() != ids.len(),
            Err(e) => e.may_have_run(),
        };
        if may_have_claimed {
            self.health.maybe_claimed(ids);
        }
        SettledThenClaimed {
            settled: of_length(answer.settled, settlements.len(), "settlements"),
            claimed: of_length(answer.claimed, ids.len(), "claims"),
        }
    }
}

/// The settlements of `batches`, oldest first: borrowed when there is one batch.
fn settlements_of(batches: &[Submitted]) -> Cow<'_, [Settlement]> {
    match batches {
        [] => Cow::Borrowed(&[]),
        [one] => Cow::Borrowed(&one.settlements),
        many => Cow::Owned(many.iter().flat_map(|b| b.settlements.iter().cloned()).collect()),
    }
}

/// `answer` when it has `n` entries, else a protocol error.
pub(super) fn of_length<T>(answer: Result<Vec<T>, PortError>, n: usize, what: &str) -> Result<Vec<T>, PortError> {
    match answer {
        Ok(v) if v.len() == n => Ok(v),
        Ok(v) => Err(PortError::new(ErrorKind::Protocol, format!("{} answers to {n} {what}", v.len()))),
        Err(e) => Err(e),
    }
}

//! The drain loop of one tick: receive batches, settle the previous batch's claims
//! and take this batch's in one call, submit with bounded concurrency, then settle
//! each message at the source.
//!
//! Two batches overlap: batch k's claims are settled in the same store call that
//! takes batch k+1's (one round trip with a store that overrides
//! `ClaimStore::settle_then_claim`), and batch k's messages are completed or given
//! back at the source while batch k+1 is submitted; so of the claim store's work
//! only that one call per batch stands outside the submits. The order that matters
//! is kept: a message is completed (or given back) at the source only after its
//! claim is settled; batch k's claims are settled before batch k+1's are taken (a
//! redelivered copy in k+1 meets `done`); batch k+1 is received only once every
//! submit of batch k has ended (a batch that all went back stops the drain first);
//! and any claim-store failure stops the receiving after the batch in hand.
//! When the call that settles batch k fails, batch k+1 has been received already
//! and goes back with it (its claims could not be taken either): one batch per
//! failure, as when a claim call fails.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::stream::{self, StreamExt};

use crate::error::{ErrorKind, PortError};
use crate::event::{Event, MessageOutcome};
use crate::ports::{
    ClaimState, ClaimTtls, Delivery, DeliveryHandle, MessageId, SettleAction, SettleResult, SettledThenClaimed,
    Settlement, SubmitContext,
};
use crate::switch::Switch;
use crate::tick::health::Health;
use crate::tick::{ClaimHealth, DrainStats, TickConfig, TickPorts, TickProgress};
use crate::token::LeaseToken;

/// Reason given when dead-lettering a message that has no message id.
pub const MISSING_ID_REASON: &str = "MissingMessageId";
const MISSING_ID_DESCRIPTION: &str =
    "the message has no message-id; drain keys its single-submit claim on it and cannot process it safely";

pub(super) struct DrainOutcome {
    pub(super) stats: DrainStats,
    pub(super) error: Option<String>,
    pub(super) claims: ClaimHealth,
}

/// Everything one drain needs, borrowed.
pub(super) struct Drain<'a> {
    pub(super) cfg: &'a TickConfig,
    pub(super) ports: &'a TickPorts<'a>,
    pub(super) token: &'a LeaseToken,
    /// Passed to the submitter; `None` unless single-flight is On and we hold the lease.
    pub(super) fence: Option<u64>,
    pub(super) cancel: &'a AtomicBool,
    /// Set from outside (shutdown).
    pub(super) stop: &'a AtomicBool,
    /// What this tick learnt about its stores.
    pub(super) health: &'a Health,
    /// Counts so far, for whoever watches the tick.
    pub(super) progress: &'a TickProgress,
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

/// A received batch with its claims taken.
struct Claimed {
    received: usize,
    work: Vec<(Delivery, Option<MessageId>)>,
    plans: Vec<Plan>,
    /// Messages whose fate triage already decided (ids seen twice in the batch).
    fates: Vec<(DeliveryHandle, Fate)>,
    /// How the claim store fared with the batch's claims.
    health: ClaimHealth,
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

/// How a message ended, before settling at the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Complete(MessageOutcome),
    Abandon(MessageOutcome),
}

impl Drain<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire) || self.stop.load(Ordering::Acquire)
    }

    /// Receiving more cannot succeed: the claim store failed (or is known down)
    /// while the claim decides (On). What was received is abandoned; receiving more
    /// would only abandon more, each costing its message a delivery at the broker.
    fn claims_failed(&self) -> bool {
        self.cfg.atomic_claim.enforces() && self.health.claims_failed()
    }

    pub(super) async fn run(&self) -> DrainOutcome {
        let stats = Mutex::new(DrainStats::default());
        let mut batches = 0u32;
        let mut error = None;
        let mut claims = ClaimHealth::NotAsked;
        // The previous batch, submitted, its claims not settled yet.
        let mut settling: Option<Submitted> = None;
        let mut all_back = false;
        loop {
            let done = all_back
                || self.cancelled()
                || self.claims_failed()
                || self.cfg.max_batches.is_some_and(|max| batches >= max);
            if done {
                // Every message of the last batch went back to the source, which offers
                // abandoned messages again at once: receiving them again in this tick
                // cannot go better (the claim store fails, other holders' claims stand,
                // the target refuses). Stop; the next tick retries. Otherwise an outage
                // spins receive/abandon for as long as it lasts, holding a worker and
                // burning delivery counts.
                claims = claims.max(self.finish(settling.take(), &stats).await);
                break;
            }
            let batch = match self.receive(&stats).await {
                Ok(Some(batch)) => batch,
                Ok(None) => {
                    claims = claims.max(self.finish(settling.take(), &stats).await);
                    break;
                }
                Err(e) => {
                    error = Some(format!("receive failed: {e}"));
                    claims = claims.max(self.finish(settling.take(), &stats).await);
                    break;
                }
            };
            batches += 1;
            let previous = settling.take();
            let settlements = previous.as_ref().map_or(&[][..], |p| p.settlements.as_slice());
            let (claimed, settled) = self.prepare(batch, settlements, &stats).await;
            let (abandons, completes) = match previous {
                Some(p) => {
                    claims = claims.max(p.health).max(settled);
                    (p.abandons, p.completes)
                }
                None => (Vec::new(), Vec::new()),
            };
            // Batch k's claims are settled: its messages go back or are completed at
            // the source while batch k+1 is submitted.
            let (submitted, (), ()) = futures::join!(
                self.submit(claimed),
                self.settle_at_source(abandons, &stats),
                self.settle_at_source(completes, &stats)
            );
            all_back = submitted.all_abandoned();
            settling = Some(submitted);
        }
        if self.health.claims_failed() {
            claims = ClaimHealth::Failed;
        }
        let stats = stats.into_inner().unwrap_or_else(PoisonError::into_inner);
        DrainOutcome { stats, error, claims }
    }

    /// The last batch: settle its claims alone, then its messages at the source.
    async fn finish(&self, last: Option<Submitted>, stats: &Mutex<DrainStats>) -> ClaimHealth {
        let Some(last) = last else { return ClaimHealth::NotAsked };
        let answer = self.settle_then_claim(&last.settlements, &[]).await;
        let health = last.health.max(self.settled(&last.settlements, answer.settled, stats));
        self.settle_at_source(last.abandons, stats).await;
        self.settle_at_source(last.completes, stats).await;
        health
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
        self.progress.add_received(received);
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
        //    it); an id seen earlier in this batch -> abandon (the redelivery will find
        //    the first one's claim). Off and Shadow behave as without the claim: both
        //    are submitted (Shadow counts what On would have done).
        let mut seen = HashSet::new();
        let mut work: Vec<(Delivery, Option<MessageId>)> = Vec::with_capacity(received);
        let mut fates: Vec<(DeliveryHandle, Fate)> = Vec::with_capacity(received);
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
                        fates.push((d.handle, Fate::Abandon(MessageOutcome::ClaimedElsewhere)));
                    } else {
                        if mode == Switch::Shadow {
                            self.observe(MessageOutcome::ClaimedElsewhere, mode);
                        }
                        work.push((d, None));
                    }
                }
                Some(id) => work.push((d, Some(id))),
            }
        }

        // 2. Claims: one call for the whole batch, which first settles the previous one's.
        let (plans, health, settled) = self.plan(&work, mode, settlements, stats).await;
        (Claimed { received, work, plans, fates, health }, settled)
    }

    /// Step 3: submit, bounded by the concurrency: each message's fate, and the
    /// claims to settle by what became of each message.
    async fn submit(&self, claimed: Claimed) -> Submitted {
        let Claimed { received, work, plans, mut fates, health } = claimed;
        let ctx = SubmitContext { queue: &self.cfg.queue, fence: self.fence };
        let jobs: Vec<(usize, Plan)> = plans.iter().copied().enumerate().collect();
        let work_ref = &work;
        let ctx_ref = &ctx;
        let results: Vec<(usize, Fate)> = stream::iter(jobs)
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
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await;
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
        self.progress.add_submitted(st.submitted - submitted_before);
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
    /// claim state (one store call), per switch: the plans, how the claims fared,
    /// how the settlements fared.
    async fn plan(
        &self,
        work: &[(Delivery, Option<MessageId>)],
        mode: Switch,
        settlements: &[Settlement],
        stats: &Mutex<DrainStats>,
    ) -> (Vec<Plan>, ClaimHealth, ClaimHealth) {
        let mut plans = vec![Plan::Submit { claimed: false }; work.len()];
        let claimed: Vec<usize> =
            if mode.computes() { (0..work.len()).filter(|&i| work[i].1.is_some()).collect() } else { Vec::new() };
        let ids: Vec<MessageId> = claimed.iter().filter_map(|&i| work[i].1.clone()).collect();
        let answer = self.settle_then_claim(settlements, &ids).await;
        let settled = self.settled(settlements, answer.settled, stats);
        if claimed.is_empty() {
            return (plans, ClaimHealth::NotAsked, settled);
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
                    for _ in &claimed {
                        self.observe(MessageOutcome::ClaimError, Switch::Shadow);
                    }
                }
                return (plans, ClaimHealth::Failed, settled);
            }
        };
        for (&i, state) in claimed.iter().zip(states) {
            plans[i] = match (state, mode.enforces()) {
                (ClaimState::Claimed, _) => Plan::Submit { claimed: true },
                (ClaimState::Done, true) => Plan::CompleteDuplicate,
                (ClaimState::PendingElsewhere { .. }, true) => Plan::Abandon(MessageOutcome::ClaimedElsewhere),
                (ClaimState::Done, false) => {
                    self.observe(MessageOutcome::Duplicate, Switch::Shadow);
                    Plan::Submit { claimed: false }
                }
                (ClaimState::PendingElsewhere { .. }, false) => {
                    self.observe(MessageOutcome::ClaimedElsewhere, Switch::Shadow);
                    Plan::Submit { claimed: false }
                }
            };
        }
        (plans, ClaimHealth::Answered, settled)
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
            let e = PortError::new(ErrorKind::Timeout, "the claim store timed out earlier in this tick");
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
        SettledThenClaimed {
            settled: of_length(answer.settled, settlements.len(), "settlements"),
            claimed: of_length(answer.claimed, ids.len(), "claims"),
        }
    }
}

/// `answer` when it has `n` entries, else a protocol error.
fn of_length<T>(answer: Result<Vec<T>, PortError>, n: usize, what: &str) -> Result<Vec<T>, PortError> {
    match answer {
        Ok(v) if v.len() == n => Ok(v),
        Ok(v) => Err(PortError::new(ErrorKind::Protocol, format!("{} answers to {n} {what}", v.len()))),
        Err(e) => Err(e),
    }
}

//! The drain loop of one tick: receive batches, take the batch's claims in one
//! call, submit with bounded concurrency, settle the claims in one call, then
//! settle each message at the source.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::{self, StreamExt};

use crate::error::{ErrorKind, PortError};
use crate::event::{Event, MessageOutcome};
use crate::ports::{
    ClaimState, Delivery, DeliveryHandle, MessageId, SettleAction, SettleResult, Settlement, SubmitContext,
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
        let mut stats = DrainStats::default();
        let mut batches = 0u32;
        let mut error = None;
        let mut claims = ClaimHealth::NotAsked;
        loop {
            if self.cancelled() || self.claims_failed() {
                break;
            }
            if self.cfg.max_batches.is_some_and(|max| batches >= max) {
                break;
            }
            let batch = match self.ports.source.receive(self.cfg.batch.max(1), self.cfg.max_wait).await {
                Ok(batch) => batch,
                Err(e) => {
                    error = Some(format!("receive failed: {e}"));
                    break;
                }
            };
            batches += 1;
            if batch.is_empty() {
                break;
            }
            let received = batch.len() as u64;
            stats.received += received;
            self.progress.add_received(received);
            let (abandoned_before, submitted_before) = (stats.abandoned, stats.submitted);
            claims = claims.max(self.process_batch(batch, &mut stats).await);
            self.progress.add_submitted(stats.submitted - submitted_before);
            if stats.abandoned - abandoned_before == received {
                // Every message went back to the source, which offers abandoned messages
                // again at once: receiving them again in this tick cannot go better (the
                // claim store fails, other holders' claims stand, the target refuses).
                // Stop; the next tick retries. Otherwise an outage spins receive/abandon
                // for as long as it lasts, holding a worker and burning delivery counts.
                break;
            }
        }
        if self.health.claims_failed() {
            claims = ClaimHealth::Failed;
        }
        DrainOutcome { stats, error, claims }
    }

    fn observe(&self, outcome: MessageOutcome, mode: Switch) {
        self.ports.observer.observe(&Event::Message { queue: &self.cfg.queue, outcome, mode });
    }

    /// Process one received batch; how the claim store fared with it.
    async fn process_batch(&self, batch: Vec<Delivery>, stats: &mut DrainStats) -> ClaimHealth {
        let mode = self.cfg.atomic_claim;
        // 1. Triage. With the claim On: no id -> dead-letter (the claim is keyed on
        //    it); an id seen earlier in this batch -> abandon (the redelivery will find
        //    the first one's claim). Off and Shadow behave as without the claim: both
        //    are submitted (Shadow counts what On would have done).
        let mut seen = HashSet::new();
        let mut work: Vec<(Delivery, Option<MessageId>)> = Vec::with_capacity(batch.len());
        let mut fates: Vec<(DeliveryHandle, Fate)> = Vec::with_capacity(batch.len());
        for d in batch {
            match d.message.message_id.clone() {
                None if mode.enforces() => {
                    let r = self.ports.source.dead_letter(d.handle, MISSING_ID_REASON, MISSING_ID_DESCRIPTION).await;
                    stats.dead_lettered += 1;
                    self.observe(MessageOutcome::DeadLettered, mode);
                    if r.is_err() {
                        stats.settle_errors += 1;
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

        // 2. Claims: one call for the whole batch.
        let (plans, health) = self.plan(&work, mode).await;

        // 3. Submits, bounded.
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

        // 4. Settle our claims: one call.
        let health = health.max(self.settle_claims(&work, &plans, &results, stats).await);

        // 5. Settle at the source.
        fates.extend(results.into_iter().map(|(i, fate)| (work[i].0.handle, fate)));
        let settled: Vec<(Fate, bool)> = stream::iter(fates)
            .map(|(handle, fate)| async move {
                let ok = match fate {
                    Fate::Complete(_) => self.ports.source.complete(handle).await.is_ok(),
                    Fate::Abandon(_) => self.ports.source.abandon(handle).await.is_ok(),
                };
                (fate, ok)
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await;
        for (fate, ok) in settled {
            let outcome = match fate {
                Fate::Complete(o) => {
                    match o {
                        MessageOutcome::Duplicate => stats.duplicates += 1,
                        _ => stats.submitted += 1,
                    }
                    o
                }
                Fate::Abandon(o) => {
                    stats.abandoned += 1;
                    match o {
                        MessageOutcome::ClaimError => stats.claim_errors += 1,
                        MessageOutcome::SubmitFailed => stats.submit_failures += 1,
                        _ => {}
                    }
                    o
                }
            };
            self.observe(outcome, mode);
            if !ok {
                stats.settle_errors += 1;
                self.observe(MessageOutcome::SettleFailed, mode);
            }
        }
        health
    }

    /// Settle the claims we hold (mark done after a submit, release after a failed
    /// one) in one call, and check every answer: a settlement answered `NotOwner`
    /// found the claim no longer ours (the pending TTL ran out during the submit), so
    /// after a submit the message is a possible duplicate (another holder may have
    /// taken it over); it is counted and reported. A failed call leaves the claims
    /// `pending` until the pending TTL: completed messages stay completed (never
    /// submitted twice), abandoned ones wait out the claim.
    async fn settle_claims(
        &self,
        work: &[(Delivery, Option<MessageId>)],
        plans: &[Plan],
        results: &[(usize, Fate)],
        stats: &mut DrainStats,
    ) -> ClaimHealth {
        let mode = self.cfg.atomic_claim;
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
        if settlements.is_empty() {
            return ClaimHealth::NotAsked;
        }
        let answer = if self.health.claims_down() {
            Err(PortError::new(ErrorKind::Timeout, "the claim store timed out earlier in this tick"))
        } else {
            match self.settle(&settlements).await {
                Ok(r) if r.len() == settlements.len() => Ok(r),
                Ok(r) => Err(PortError::new(
                    ErrorKind::Protocol,
                    format!("{} answers to {} settlements", r.len(), settlements.len()),
                )),
                Err(e) => Err(e),
            }
        };
        match answer {
            Ok(answers) => {
                for _ in answers.iter().filter(|a| **a == SettleResult::NotOwner) {
                    stats.claims_expired += 1;
                    self.observe(MessageOutcome::ClaimExpired, mode);
                }
                ClaimHealth::Answered
            }
            Err(e) => {
                self.health.claims_error(&e);
                stats.claim_settle_errors += settlements.len() as u64;
                for _ in &settlements {
                    self.observe(MessageOutcome::ClaimSettleFailed, mode);
                }
                ClaimHealth::Failed
            }
        }
    }

    /// Decide each message's plan from its claim state (one store call), per switch.
    async fn plan(&self, work: &[(Delivery, Option<MessageId>)], mode: Switch) -> (Vec<Plan>, ClaimHealth) {
        let mut plans = vec![Plan::Submit { claimed: false }; work.len()];
        let claimed: Vec<usize> = (0..work.len()).filter(|&i| work[i].1.is_some()).collect();
        if !mode.computes() || claimed.is_empty() {
            return (plans, ClaimHealth::NotAsked);
        }
        let ids: Vec<MessageId> = claimed.iter().filter_map(|&i| work[i].1.clone()).collect();
        let answer = if self.health.claims_down() {
            Err(PortError::new(ErrorKind::Timeout, "the claim store timed out earlier in this tick"))
        } else {
            match self.claim(&ids).await {
                Ok(states) if states.len() == ids.len() => Ok(states),
                // An answer of the wrong length cannot be trusted.
                Ok(states) => Err(PortError::new(
                    ErrorKind::Protocol,
                    format!("{} answers to {} claims", states.len(), ids.len()),
                )),
                Err(e) => Err(e),
            }
        };
        let states = match answer {
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
                return (plans, ClaimHealth::Failed);
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
        (plans, ClaimHealth::Answered)
    }

    /// Take the batch's claims, or fail as an unreachable store would when there is
    /// no claim store.
    async fn claim(&self, ids: &[MessageId]) -> Result<Vec<ClaimState>, PortError> {
        match self.ports.claims {
            Some(store) => store.claim_batch(&self.cfg.queue, ids, self.token, self.cfg.claim_pending_ttl).await,
            None => Err(PortError::new(ErrorKind::Config, "no claim store configured")),
        }
    }

    /// Settle the batch's claims (only ever called after a claim succeeded).
    async fn settle(&self, settlements: &[Settlement]) -> Result<Vec<SettleResult>, PortError> {
        match self.ports.claims {
            Some(store) => store.settle_batch(&self.cfg.queue, settlements, self.token, self.cfg.claim_done_ttl).await,
            None => Err(PortError::new(ErrorKind::Config, "no claim store configured")),
        }
    }
}

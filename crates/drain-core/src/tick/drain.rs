//! The drain loop of one tick: it carries data between the ports and the
//! [`Planner`] (`planner.rs`), which decides everything; what is left here is when
//! each port call runs, and what runs beside it.
//!
//! Three batches overlap. While batch k is submitted (its *step*), batch k+1 is
//! received, once one of batch k's messages has completed, and claimed in the call
//! that settles batch k-1's claims (one round trip with a store that overrides
//! `ClaimStore::settle_then_claim`); batch k-1's messages then go to the source on a
//! settler of their own. So the submits of one batch follow the last of the batch
//! before with no receive or claim call between them.
//!
//! ```text
//! pipeline: ─ step k: submit k's jobs ───────────────────────────┬─ step k+1 ─ … ─ last claim call
//!             beside: (first completion) receive k+1, dead      │
//!             letters, claim call settling k-1 and claiming k+1 ─┘
//! settler:  ─ … batch k-1 at the source (complete, abandon, release) …
//! ```
//!
//! How many messages a step has in flight, and how many a receive asks for, is the
//! planner's window (`window.rs`): adaptive by default, it grows while the target's
//! throughput rises with it and halves when a submit fails. Each message is
//! submitted under its own claim and completed at the source only after its own
//! target outcome, as with one in flight.
//!
//! What is in flight when the drain ends early:
//! * a stop (shutdown) or a lost lease starts no further submit; the submits in
//!   flight are waited for (each bounded by the submitter's own timeout), and each
//!   message is completed or given back by its own outcome, its claim marked done or
//!   released, as at any other end of a step. A message submitted before a loss
//!   carries the fence it was sent under, which a fenced consumer refuses once a
//!   newer holder's fence reached it;
//! * a target that restarts fails the submits whose outcome it had not sent: those
//!   messages are given back (their claims released) and redelivered, and the window
//!   halves. One the broker took before it went down is then a possible duplicate,
//!   as it was with one in flight; a target that deduplicates on the message id
//!   (Service Bus) keeps it exactly once;
//! * a source that restarts refuses the completes of what it had delivered: those
//!   messages come back and meet their `done` claims, completed as duplicates
//!   without a second submit.
//!
//! The lanes share the planner behind a lock never held across an await, as quinn's
//! tasks share quinn-proto's connection.

use std::sync::{Mutex, PoisonError};

use futures::SinkExt;
use futures::channel::{mpsc, oneshot};
use futures::stream::{self, StreamExt};

use crate::error::{ErrorKind, PortError};
use crate::event::Event;
use crate::guard::LeaseHandle;
use crate::ports::{ClaimTtls, MessageId, SettledThenClaimed, SubmitContext};
use crate::tick::health::Health;
use crate::tick::planner::{
    ClaimCall, DrainOutcome, ForSource, Job, Next, Planner, Receive, SourceOp, Start, Stop, ToSource,
};
use crate::tick::window::Window;
use crate::tick::{TickConfig, TickControl, TickPorts};
use crate::time::Time;
use crate::token::LeaseToken;

const MISSING_ID_DESCRIPTION: &str =
    "the message has no message-id; drain keys its single-submit claim on it and cannot process it safely";

/// Everything one drain needs, borrowed, and its planner.
pub(super) struct Drain<'a> {
    cfg: &'a TickConfig,
    ports: &'a TickPorts<'a>,
    token: &'a LeaseToken,
    /// The lease, as the guard keeps it: its fence goes to the submitter (`None`
    /// unless single-flight is On and we hold the lease), its loss stops the drain.
    held: &'a LeaseHandle,
    /// A stop from outside (shutdown), and counts so far for whoever watches the tick.
    control: &'a TickControl,
    /// What this tick learnt about its stores.
    health: &'a Health,
    /// When the drain receives no more (a tick that failed open on the lease).
    until: Option<Time>,
    planner: Mutex<Planner>,
}

impl<'a> Drain<'a> {
    pub(super) fn new(
        cfg: &'a TickConfig,
        ports: &'a TickPorts<'a>,
        token: &'a LeaseToken,
        held: &'a LeaseHandle,
        control: &'a TickControl,
        health: &'a Health,
        until: Option<Time>,
    ) -> Self {
        let window = Window::new(cfg.in_flight, cfg.concurrency, cfg.batch);
        let planner = Planner::new(cfg.atomic_claim, cfg.max_batches, health.claims_down(), window);
        Drain { cfg, ports, token, held, control, health, until, planner: Mutex::new(planner) }
    }

    pub(super) async fn run(self) -> DrainOutcome {
        // One batch waits while the settler works on another: a source slow to settle
        // slows the receiving instead of piling up held messages.
        let (to_source, for_source) = mpsc::channel(0);
        futures::join!(self.pipeline(to_source), self.settler(for_source));
        self.planner.into_inner().unwrap_or_else(PoisonError::into_inner).into_outcome()
    }

    /// Ask the planner, telling it first of a stop or a lost lease, and observe the
    /// decisions it took.
    fn plan<R>(&self, f: impl FnOnce(&mut Planner) -> R) -> R {
        let mut planner = self.planner.lock().unwrap_or_else(PoisonError::into_inner);
        if self.held.is_lost() {
            planner.handle_stop(Stop::LeaseLost);
        } else if self.control.is_stopped() {
            planner.handle_stop(Stop::Shutdown);
        }
        if self.until.is_some_and(|until| self.ports.clock.now() >= until) {
            planner.receive_no_more();
        }
        let answer = f(&mut planner);
        while let Some((outcome, mode)) = planner.poll_event() {
            self.ports.observer.observe(&Event::Message { queue: &self.cfg.queue, outcome, mode });
        }
        answer
    }

    /// Step after step, then the last claim call; each batch, once its claims are
    /// settled, goes to `to_source`.
    async fn pipeline(&self, mut to_source: mpsc::Sender<ForSource>) {
        loop {
            match self.plan(Planner::next) {
                Next::Receive(permit) => self.receive_and_claim(permit, &mut to_source).await,
                Next::Submit(jobs) => {
                    let (completed, first_completed) = oneshot::channel();
                    futures::join!(self.submit(jobs, completed), self.beside(first_completed, &mut to_source));
                    self.plan(Planner::end_step);
                }
                Next::Finish(call) => {
                    let answer = self.settle_then_claim(&call).await;
                    let settled = self.plan(|p| p.handle_claims(call, answer));
                    self.hand_over(settled, &mut to_source).await;
                    return;
                }
            }
        }
    }

    /// Beside a step: once `first_completed` says one of its messages completed (a
    /// batch that all goes back never says it), receive and claim the next batch if
    /// the planner lets it.
    async fn beside(&self, first_completed: oneshot::Receiver<()>, to_source: &mut mpsc::Sender<ForSource>) {
        if first_completed.await.is_err() {
            return;
        }
        if let Some(permit) = self.plan(Planner::poll_receive) {
            self.receive_and_claim(permit, to_source).await;
        }
    }

    /// Receive a batch, dead-letter what the planner says, then settle the batches
    /// behind and take this one's claims in one call; the batches settled go to the
    /// source.
    async fn receive_and_claim(&self, permit: Receive, to_source: &mut mpsc::Sender<ForSource>) {
        let batch = match self.ports.source.receive(permit.max().max(1), self.cfg.max_wait).await {
            Ok(batch) => batch,
            Err(e) => return self.plan(|p| p.handle_receive_failed(permit, &e)),
        };
        self.control.add_received(batch.len() as u64);
        let Some(prepared) = self.plan(|p| p.handle_received(permit, batch)) else {
            return;
        };
        for handle in prepared.dead_letters {
            let r = self.ports.source.dead_letter(handle, MessageId::MISSING_REASON, MISSING_ID_DESCRIPTION).await;
            self.plan(|p| p.handle_dead_lettered(r.is_ok()));
        }
        let answer = self.settle_then_claim(&prepared.call).await;
        let settled = self.plan(|p| p.handle_claims(prepared.call, answer));
        self.hand_over(settled, to_source).await;
    }

    /// Submit a step's jobs, as many at once as the window says, in their order (the
    /// target takes each submit in the order it starts, so messages of one session
    /// reach it in the order they were received); `completed` is told when the first
    /// message completes (submitted, or a duplicate of one done), and dropped unsent
    /// when none does.
    async fn submit(&self, jobs: Vec<Job>, completed: oneshot::Sender<()>) {
        let ctx = SubmitContext { queue: &self.cfg.queue, fence: self.held.fence() };
        let ctx = &ctx;
        let (began, in_flight) = (self.ports.clock.now(), self.plan(|p| p.in_flight()));
        let mut ended = stream::iter(jobs)
            .map(|job| async move {
                let submitted = match self.plan(|p| p.start(job.slot)) {
                    Start::Skip => None,
                    Start::Submit => Some(self.ports.target.submit(&job.message, ctx).await.is_ok()),
                };
                (job.slot, submitted)
            })
            .buffer_unordered(in_flight.max(1));
        let mut completed = Some(completed);
        while let Some((slot, submitted)) = ended.next().await {
            if self.plan(|p| p.handle_submitted(slot, submitted))
                && let Some(tell) = completed.take()
            {
                // The other half may have stopped listening; nothing to do then.
                let _ = tell.send(());
            }
        }
        let took = self.ports.clock.now().saturating_since(began);
        self.plan(|p| p.end_submit(took));
    }

    /// Batches whose claims were just settled go to the settler, in order.
    async fn hand_over(&self, batches: Vec<ForSource>, to_source: &mut mpsc::Sender<ForSource>) {
        for batch in batches {
            // The settler reads until the pipeline drops its sender, so the send
            // cannot find it gone.
            let _ = to_source.send(batch).await;
        }
    }

    /// Settle at the source, batch after batch, what `for_source` brings, until the
    /// pipeline ends.
    async fn settler(&self, mut for_source: mpsc::Receiver<ForSource>) {
        while let Some(batch) = for_source.next().await {
            futures::join!(self.settle_at_source(batch.abandons), self.settle_at_source(batch.completes));
        }
    }

    /// Complete, abandon or release each message at the source, bounded by the
    /// concurrency, then count them.
    async fn settle_at_source(&self, messages: Vec<ToSource>) {
        if messages.is_empty() {
            return;
        }
        let (release, at_once) = (self.ports.source.capabilities().release, self.plan(|p| p.in_flight()));
        let settled: Vec<(ToSource, bool)> = stream::iter(messages)
            .map(|m| async move {
                let source = self.ports.source;
                let r = match m.op(release) {
                    SourceOp::Complete => source.complete(m.handle).await,
                    SourceOp::Abandon => source.abandon(m.handle).await,
                    SourceOp::Release => source.release(m.handle).await,
                };
                (m, r.is_ok())
            })
            .buffer_unordered(at_once.max(1))
            .collect()
            .await;
        let submitted = self.plan(|p| p.handle_at_source(&settled));
        self.control.add_submitted(submitted);
    }

    /// Make `call`: one store call (none when it is empty), or fail as an unreachable
    /// store would when there is no claim store or it timed out earlier in this tick.
    async fn settle_then_claim(&self, call: &ClaimCall) -> SettledThenClaimed {
        let (settlements, ids) = (call.settlements(), call.ids());
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
        // A timeout marks the store down for the rest of the tick.
        for (asked, half) in
            [(settlements.len(), answer.settled.as_ref().err()), (ids.len(), answer.claimed.as_ref().err())]
        {
            if let Some(e) = half.filter(|_| asked > 0) {
                self.health.claims_error(e);
            }
        }
        answer
    }
}

//! Keeping a lease while the work runs: renewals every TTL/3, the deadline, and the
//! one poll that checks the deadline before the work takes its next step.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{Either, poll_fn, select};

use super::{Begun, LeaseGuard, Loss};
use crate::event::LeaseOp;
use crate::ports::{Fence, Renew};
use crate::token::LeaseToken;

/// How the work ended under the guard.
pub(crate) enum Ended<T> {
    Done(T),
    /// The lease was lost and the work dropped (the guard does not tell on loss).
    Stopped(Loss, Fence),
    Panicked(Box<dyn Any + Send>),
}

impl<'a> LeaseGuard<'a> {
    /// Poll `work` while keeping the lease `begun` holds: renew it, watch its deadline,
    /// and on a loss drop the work or tell it. Returns how the work ended and the
    /// loss, if any (in shadow a loss is counted and the work goes on).
    pub(crate) async fn keep_while<Fut: Future>(
        &self,
        begun: &Begun,
        token: &LeaseToken,
        work: Fut,
    ) -> (Ended<Fut::Output>, Option<Loss>) {
        let held = &begun.held;
        let mut work = pin!(AssertUnwindSafe(work).catch_unwind());
        let keeps = begun.acquired && (self.renew || held.deadline().is_some());
        let mut keeper = pin!(AssertUnwindSafe(self.keep(begun, token)).catch_unwind());
        let mut keeping = keeps;
        let mut loss = None;
        let ended = poll_fn(|cx| {
            if keeping && let Poll::Ready(kept) = keeper.as_mut().poll(cx) {
                keeping = false;
                match kept {
                    Ok(l) => loss = loss.or(Some(l)),
                    Err(panic) => return Poll::Ready(Ended::Panicked(panic)),
                }
            }
            // The deadline before the work's next step: a holder that was frozen past it
            // wakes here, before the work can act on a lease that may be another's.
            if loss.is_none() && held.expired_at(self.clock.now()) {
                loss = Some(Loss::Expired);
            }
            if let Some(l) = loss
                && held.set_lost(l)
            {
                self.lost(l);
                if let (false, Some(fence)) = (self.tell, held.fence()) {
                    return Poll::Ready(Ended::Stopped(l, fence.clone()));
                }
            }
            match work.as_mut().poll(cx) {
                Poll::Ready(Ok(output)) => Poll::Ready(Ended::Done(output)),
                Poll::Ready(Err(panic)) => Poll::Ready(Ended::Panicked(panic)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        (ended, loss)
    }

    /// Renew every TTL/3 from the last renewal sent, moving the deadline on each
    /// confirmed one; resolves with the loss: a renewal answered `Lost`, or the
    /// deadline passed first. A renewal error is counted and the next period tries
    /// again: a blip is not a loss, but the deadline still runs.
    async fn keep(&self, begun: &Begun, token: &LeaseToken) -> Loss {
        let held = &begun.held;
        let period = (self.ttl / 3).max(Duration::from_millis(1));
        let mut next = begun.sent + period;
        loop {
            let deadline = held.deadline();
            let wake = match (self.renew, deadline) {
                (true, Some(d)) => next.min(d),
                (true, None) => next,
                (false, Some(d)) => d,
                (false, None) => return std::future::pending().await,
            };
            self.clock.sleep_until(wake).await;
            let now = self.clock.now();
            if held.expired_at(now) {
                return Loss::Expired;
            }
            let Some(store) = self.store.filter(|_| self.renew && now >= next) else { continue };
            let sent = now;
            next = sent + period;
            let renewal = store.renew(&self.lease, token, self.ttl);
            let answer = match deadline {
                Some(d) => match select(renewal, self.clock.sleep_until(d)).await {
                    Either::Left((answer, _)) => answer,
                    Either::Right(((), _)) => return Loss::Expired,
                },
                None => renewal.await,
            };
            match answer {
                Ok(Renew::Renewed) => {
                    self.op(LeaseOp::Renew, "renewed");
                    if deadline.is_some() {
                        held.extend(self.deadline_after(sent));
                    }
                }
                Ok(Renew::Lost) => {
                    self.op(LeaseOp::Renew, "lost");
                    // In shadow nothing is told; the loss is still counted.
                    if deadline.is_none() {
                        self.lost(Loss::Lost);
                    }
                    return Loss::Lost;
                }
                Err(_) => self.op(LeaseOp::Renew, "error"),
            }
        }
    }
}

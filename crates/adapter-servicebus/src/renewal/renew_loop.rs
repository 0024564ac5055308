//! The one renewal loop, generic over the renew call: [`super::automatic`] runs it
//! for every delivery the source hands out, [`super::by_hand`] for one delivery.

use std::time::Duration;

use drain_core::PortError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::schedule::RenewSchedule;

/// What happened to a renewed lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewEvent {
    /// The lock was renewed and now lasts `lock` more.
    Renewed {
        /// The new remaining lock duration.
        lock: Duration,
    },
    /// Renewing failed; the renewer stopped. The message is redelivered when its lock
    /// expires, and settling it will likely fail with `LockLost`.
    Failed(PortError),
    /// The maximum duration was reached; the renewer stopped and the lock runs out.
    MaxDurationReached,
}

/// Renew a lock with `renew`, whose current lock lasts `remaining` more, on
/// `schedule` (measured from now), telling `report` what happened, until the maximum
/// duration is reached, a renewal fails, or `stop` fires (its sender sent or was
/// dropped). `stop` is checked while waiting and again after each renewal: a renewal
/// in flight is never cancelled halfway (that would leave a request/response link
/// out of step), but once stopped nothing more is reported.
pub(crate) async fn renew_until<F, Fut>(
    mut renew: F,
    remaining: Duration,
    schedule: RenewSchedule,
    mut stop: oneshot::Receiver<()>,
    mut report: impl FnMut(RenewEvent),
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Duration, PortError>>,
{
    let start = Instant::now();
    let mut remaining = remaining;
    let mut at = start;
    loop {
        let Some(wait) = schedule.next(at - start, remaining) else {
            report(RenewEvent::MaxDurationReached);
            return;
        };
        tokio::select! {
            biased;
            _ = &mut stop => return,
            () = tokio::time::sleep_until(at + wait) => {}
        }
        let result = renew().await;
        if !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
            return;
        }
        match result {
            Ok(lock) => {
                at = Instant::now();
                remaining = lock;
                report(RenewEvent::Renewed { lock });
            }
            Err(e) => {
                report(RenewEvent::Failed(e));
                return;
            }
        }
    }
}

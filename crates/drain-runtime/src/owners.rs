//! Requests for admission's driver from passes over a backlog of your own.

use std::future::Future;
use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::{Backoff, PortError};
use futures::channel::mpsc::{UnboundedReceiver, unbounded};

/// Requests for `admission::drive` from passes: every `every`, `pass` names the
/// owners with work (add the ones `OwnerTurns::take_handed_off` gave back), and each
/// is requested. The returned future resolves `Ok` at the first pass that names
/// none, and `Err` at the first permanent error a pass answers (a missing right:
/// passing again cannot help); given to `drive` as its shutdown, it ends the drive
/// once the running turns finish. It also resolves `Ok` once the driver stops
/// listening, which a turn's permanent error does: ask `OwnerTurns::fatal` after the
/// drive before taking its end for "all done". A temporary error is passed again after a
/// jittered back-off from `every` up to 5 s, logged on the 1st, 2nd,
/// 4th, 8th… failure in a row and once when a pass answers again, so an outage
/// of any length costs a few log lines.
///
/// ```
/// # async fn demo() -> Result<(), drain_core::PortError> {
/// use std::time::Duration;
///
/// use drain_core::admission::OwnerId;
/// use drain_runtime::owner_passes;
///
/// let mut left = vec![vec![OwnerId::from("tenant-a")], vec![]];
/// let (requests, all_done) = owner_passes(Duration::from_millis(10), move || {
///     let owners = left.remove(0);
///     async move { Ok(owners) }
/// });
/// // drive(&mut scheduler, ports, requests, async { ended = all_done.await }).await; ended?;
/// all_done.await?;
/// # drop(requests);
/// # Ok(())
/// # }
/// ```
pub fn owner_passes<F, Fut>(
    every: Duration,
    mut pass: F,
) -> (UnboundedReceiver<OwnerId>, impl Future<Output = Result<(), PortError>>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<OwnerId>, PortError>>,
{
    let (tx, rx) = unbounded();
    let backoff = Backoff { initial: every.max(Duration::from_millis(1)), max: PASS_RETRY_CAP.max(every) };
    let all_done = async move {
        let mut failures = 0u32;
        loop {
            let owners = match pass().await {
                Ok(owners) => owners,
                Err(e) if e.is_temporary() => {
                    failures = failures.saturating_add(1);
                    if failures.is_power_of_two() {
                        tracing::warn!(
                            failures,
                            "a pass over the backlogs failed ({e}); passing again after a back-off"
                        );
                    }
                    // Drawn before the await: the thread's generator is not Send.
                    let wait = backoff.delay(failures - 1, &mut rand::rng());
                    tokio::time::sleep(wait).await;
                    continue;
                }
                Err(e) => {
                    tracing::error!("a pass over the backlogs failed permanently; stopping: {e}");
                    return Err(e);
                }
            };
            if failures > 0 {
                tracing::info!(failures, "the backlogs answer again");
                failures = 0;
            }
            if owners.is_empty() {
                return Ok(());
            }
            for owner in owners {
                // The driver stopped listening: nothing is left to request.
                if tx.unbounded_send(owner).is_err() {
                    return Ok(());
                }
            }
            tokio::time::sleep(every).await;
        }
    };
    (rx, all_done)
}

/// The longest wait between passes while they fail with a temporary error.
const PASS_RETRY_CAP: Duration = Duration::from_secs(5);

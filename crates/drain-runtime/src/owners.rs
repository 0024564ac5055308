//! Requests for admission's driver from passes over a backlog of your own.

use std::future::Future;
use std::time::Duration;

use drain_core::admission::OwnerId;
use futures::channel::mpsc::{UnboundedReceiver, unbounded};

/// Requests for `admission::drive` from passes: every `every`, `pass` names the
/// owners with work (add the ones `OwnerTurns::take_handed_off` gave back), and each
/// is requested; the first pass that names none resolves the returned future, which,
/// given to `drive` as its shutdown, ends the drive once the running turns finish.
///
/// ```
/// # async fn demo() {
/// use std::time::Duration;
///
/// use drain_core::admission::OwnerId;
/// use drain_runtime::owner_passes;
///
/// let mut left = vec![vec![OwnerId::from("tenant-a")], vec![]];
/// let (requests, all_done) = owner_passes(Duration::from_millis(10), move || {
///     let owners = left.remove(0);
///     async move { owners }
/// });
/// all_done.await;
/// # drop(requests);
/// # }
/// ```
pub fn owner_passes<F, Fut>(every: Duration, mut pass: F) -> (UnboundedReceiver<OwnerId>, impl Future<Output = ()>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<OwnerId>>,
{
    let (tx, rx) = unbounded();
    let all_done = async move {
        loop {
            let owners = pass().await;
            if owners.is_empty() {
                return;
            }
            for owner in owners {
                // The driver stopped listening: nothing is left to request.
                if tx.unbounded_send(owner).is_err() {
                    return;
                }
            }
            tokio::time::sleep(every).await;
        }
    };
    (rx, all_done)
}

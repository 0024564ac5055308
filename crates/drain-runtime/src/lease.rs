//! drain-core's lease guard as an object: the lease is renewed on a task of its own
//! while you hold the [`HeldLease`], and released when you release or drop it (a
//! panic that unwinds past it drops it too).

use std::sync::Arc;
use std::time::Duration;

use drain_core::guard::{Guarded, LeaseGuard, LeaseHandle, Loss};
use drain_core::ports::{Clock, Fence, LeaseName, LeaseStore, NoopObserver, Observer};
use drain_core::{LeaseToken, PortError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::TokioClock;

/// What [`take`] found.
#[derive(Debug)]
pub enum Taken {
    /// The lease is ours until it is released, dropped or lost.
    Held(HeldLease),
    /// Another holder has it.
    Skipped {
        /// The holder's instance id.
        holder: String,
        /// Time left on its lease.
        remaining: Duration,
    },
    /// The store could not answer: the lease is not ours (fail-closed).
    Refused(PortError),
}

/// A held lease, renewed every TTL/3 on a task until [`HeldLease::release`] or drop.
///
/// Ask [`HeldLease::is_lost`] (or [`HeldLease::check`]) before each step of your work:
/// the lease is lost when a renewal finds it gone, or when no renewal was confirmed by
/// its deadline (the time to live less a tenth, from when the last confirmed renewal
/// was sent), which this handle reads on its own clock, so a process frozen past its
/// time to live learns of the loss before its next step even if the renewal task has
/// not run yet.
#[derive(Debug)]
pub struct HeldLease {
    fence: Fence,
    held: LeaseHandle,
    clock: TokioClock,
    release: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Guarded<()>>>,
}

/// Take `lease` in `store` for `ttl` with `token` (fresh for this holding), renewing
/// it on a task until the returned [`HeldLease`] is released or dropped. Lease
/// operations and losses go to `observer`, when given.
///
/// # Panics
/// When called outside a Tokio runtime with the timer enabled.
pub async fn take(
    store: Arc<dyn LeaseStore>,
    lease: LeaseName,
    ttl: Duration,
    token: LeaseToken,
    observer: Option<Arc<dyn Observer>>,
) -> Taken {
    let clock = TokioClock::new();
    let (started_tx, started_rx) = oneshot::channel::<LeaseHandle>();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let observer: &dyn Observer = observer.as_deref().unwrap_or(&NoopObserver);
        let guard = LeaseGuard::new(&*store, &clock, lease, ttl).observer(observer).tell_on_loss();
        guard
            .run(&token, |held| async move {
                if started_tx.send(held).is_ok() {
                    // Released, or the HeldLease was dropped.
                    let _ = release_rx.await;
                }
            })
            .await
    });
    // An enforced guard hands its work the fence of the lease it took.
    if let Ok(held) = started_rx.await
        && let Some(fence) = held.fence().cloned()
    {
        return Taken::Held(HeldLease { fence, held, clock, release: Some(release_tx), task: Some(task) });
    }
    drop(release_tx);
    match task.await {
        Ok(Guarded::Skipped { holder, remaining }) => Taken::Skipped { holder, remaining },
        Ok(Guarded::Refused(e)) => Taken::Refused(e),
        // The work starts whenever the lease is ours, so nothing else ends the task
        // before it; a panic of the store is raised here.
        Ok(other) => Taken::Refused(PortError::new(drain_core::ErrorKind::Other, format!("{other:?}"))),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

impl HeldLease {
    /// The lease's fence: hand it to whatever receives your writes.
    #[must_use]
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Whether the lease is lost (a renewal found it gone, or its deadline passed).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// Why the lease is lost, once it is.
    #[must_use]
    pub fn loss(&self) -> Option<Loss> {
        self.held.loss().or_else(|| self.held.deadline().filter(|d| self.clock.now() >= *d).map(|_| Loss::Expired))
    }

    /// `Ok` while the lease is ours: call it before each side effect.
    ///
    /// # Errors
    /// The [`Loss`], once the lease is lost.
    pub fn check(&self) -> Result<(), Loss> {
        self.loss().map_or(Ok(()), Err)
    }

    /// Resolves once the lease is lost.
    pub async fn lost(&self) -> Loss {
        if let Some(loss) = self.loss() {
            return loss;
        }
        self.held.lost().await
    }

    /// Stop renewing and release the lease (compare-and-delete with the token); the
    /// loss, if the lease was lost meanwhile.
    pub async fn release(mut self) -> Option<Loss> {
        let _ = self.release.take().map(|tx| tx.send(()));
        let task = self.task.take()?;
        match task.await {
            Ok(Guarded::Ran { loss, .. }) => loss,
            _ => self.held.loss(),
        }
    }
}

/// Dropping a held lease stops its renewal and releases it. On a multi-thread
/// runtime the drop waits for the release (at most [`DROP_RELEASE_WAIT`]), so a
/// lease dropped as `main` returns or a panic unwinds is free when the process
/// exits: the runtime's shutdown would otherwise cancel a release still on its way,
/// and the next run would wait out the whole time to live. On a current-thread
/// runtime the drop cannot wait (the runtime's thread is the one dropping): the
/// release goes on in the background, so call [`HeldLease::release`] there.
impl Drop for HeldLease {
    fn drop(&mut self) {
        // Dropping the sender ends the guarded wait; the task then releases.
        self.release.take();
        let Some(task) = self.task.take() else { return };
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            tokio::task::block_in_place(|| {
                let _ = handle.block_on(tokio::time::timeout(DROP_RELEASE_WAIT, task));
            });
        }
    }
}

/// The longest a dropped [`HeldLease`] waits for its release; the store's own
/// timeouts end a release well before.
pub const DROP_RELEASE_WAIT: Duration = Duration::from_secs(5);

//! The handle the guarded work holds: its fence, and whether the lease is lost.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::outcome::Loss;
use crate::ports::Fence;
use crate::time::Time;

/// What the work under a [`LeaseGuard`](super::LeaseGuard) holds: the lease's fence,
/// and whether the lease is still ours. Cheap to clone; clones share the state.
///
/// The guard checks the lease's deadline each time it polls the work, before it
/// does, so [`LeaseHandle::is_lost`] is current whenever the work runs: a holder that was
/// frozen past its deadline finds it lost before its next step. Work that hands the
/// handle to tasks of its own, polled apart from the guard, may learn it a timer's
/// latency later; such a task can compare its own clock with [`LeaseHandle::deadline`].
#[derive(Clone)]
pub struct LeaseHandle {
    fence: Option<Fence>,
    state: Arc<State>,
}

/// Shared between the guard and every clone of the handle.
pub(crate) struct State {
    /// 0: held; otherwise the loss, `1 + Loss as u8`.
    lost: AtomicU8,
    /// The deadline in milliseconds on the guard's clock (`u64::MAX`: none).
    deadline: AtomicU64,
    /// Whether a loss stops the work (set only under an enforced lease).
    enforced: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl LeaseHandle {
    pub(crate) fn new(fence: Option<Fence>, deadline: Option<Time>) -> Self {
        let state = State {
            lost: AtomicU8::new(0),
            deadline: AtomicU64::new(deadline.map_or(u64::MAX, Time::as_millis)),
            enforced: AtomicBool::new(deadline.is_some()),
            wakers: Mutex::new(Vec::new()),
        };
        LeaseHandle { fence, state: Arc::new(state) }
    }

    /// The lease's fence: `None` when the work runs without holding the lease (the
    /// guard is off or in shadow, or the store failed and the guard fails open).
    #[must_use]
    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    /// Whether the lease is lost (see [`Loss`]); once lost it stays lost.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    /// Why the lease is lost, once it is.
    #[must_use]
    pub fn loss(&self) -> Option<Loss> {
        match self.state.lost.load(Ordering::Acquire) {
            0 => None,
            1 => Some(Loss::Lost),
            _ => Some(Loss::Expired),
        }
    }

    /// `Ok` while the lease is ours: call it before each side effect.
    ///
    /// # Errors
    /// The [`Loss`], once the lease is lost.
    pub fn check(&self) -> Result<(), Loss> {
        self.loss().map_or(Ok(()), Err)
    }

    /// Resolves once the lease is lost (never, when the work does not hold one).
    pub fn lost(&self) -> impl Future<Output = Loss> + Send + 'static {
        LostFuture { state: self.state.clone() }
    }

    /// When the lease counts as lost unless a renewal is confirmed first, on the
    /// clock the guard was given; `None` when the work does not hold the lease.
    #[must_use]
    pub fn deadline(&self) -> Option<Time> {
        match self.state.deadline.load(Ordering::Acquire) {
            u64::MAX => None,
            ms => Some(Time::from_millis(ms)),
        }
    }

    /// A confirmed renewal moved the deadline.
    pub(crate) fn extend(&self, deadline: Time) {
        self.state.deadline.store(deadline.as_millis(), Ordering::Release);
    }

    /// Whether the deadline has passed at `now`.
    pub(crate) fn expired_at(&self, now: Time) -> bool {
        self.deadline().is_some_and(|d| now >= d)
    }

    /// Mark the lease lost (the first loss stays) and wake whoever awaits it; whether
    /// this call lost it. Under a lease that is not enforced (shadow) nothing is told.
    pub(crate) fn set_lost(&self, loss: Loss) -> bool {
        if !self.state.enforced.load(Ordering::Acquire) {
            return false;
        }
        let code = match loss {
            Loss::Lost => 1,
            Loss::Expired => 2,
        };
        let first = self.state.lost.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if first {
            let wakers = std::mem::take(&mut *self.state.wakers.lock().unwrap_or_else(PoisonError::into_inner));
            wakers.into_iter().for_each(Waker::wake);
        }
        first
    }

    /// The work holds no lease whose loss it must learn (shadow): losses are counted
    /// by the guard only.
    pub(crate) fn unenforced(fence: Option<Fence>) -> Self {
        LeaseHandle::new(fence, None)
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("fence", &self.fence)
            .field("loss", &self.loss())
            .field("deadline", &self.deadline())
            .finish()
    }
}

struct LostFuture {
    state: Arc<State>,
}

impl Future for LostFuture {
    type Output = Loss;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Loss> {
        let held = LeaseHandle { fence: None, state: self.state.clone() };
        if let Some(loss) = held.loss() {
            return Poll::Ready(loss);
        }
        let mut wakers = self.state.wakers.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked again under the lock: a loss set between the two reads has taken
        // the wakers already.
        if let Some(loss) = held.loss() {
            return Poll::Ready(loss);
        }
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

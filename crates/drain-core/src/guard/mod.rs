//! The lease guard: run any work under a named lease, so that it never runs twice at
//! once across a fleet, and stops when the lease is no longer surely ours.
//!
//! ```text
//! acquire ─┬─ Acquired{fence} ─► work(held) ∥ renew every TTL/3 ∥ deadline ─► release ─► Ran
//!          ├─ Busy ────────────► Skipped { holder, remaining }     (the work does not run)
//!          └─ Err ─────────────► fail-closed: Refused(error)       (a job's choice)
//!                                fail-open:   work without the lease ─► Ran (status FailOpen)
//! ```
//!
//! The lease is **lost** when a renewal answers `Lost`, or when no renewal has been
//! confirmed by the *deadline*: the time to live less a safety margin, counted on the
//! holder's clock from when the last confirmed renewal (or the acquire) was *sent*.
//! The store set the lease's expiry no earlier than that send, so up to the deadline
//! the lease is ours, whatever became of the answers; a holder frozen past it (a
//! pause, a stopped process) learns of the loss before its next step, since the guard
//! checks the deadline every time it polls the work, before it does. A loss stops the
//! work: it is dropped, or, with [`LeaseGuard::tell_on_loss`], told through its
//! [`LeaseHandle`] and left to stop itself.
//!
//! The lease is released on every path: the work's end, its loss, a panic (re-raised
//! after the release). A lease can be lost without the guard knowing only while the
//! store itself cannot answer; a resource that refuses stale fences closes that gap
//! (docs/reliability.md, "Fencing").
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use drain_core::guard::{Guarded, LeaseGuard};
//! use drain_core::memory::{ManualClock, MemoryStore, block_on};
//! use drain_core::ports::{Clock, LeaseName};
//! use drain_core::LeaseToken;
//!
//! let clock = Arc::new(ManualClock::new());
//! let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
//! let guard = LeaseGuard::new(&store, &*clock, LeaseName::job("nightly-report"), Duration::from_secs(30));
//! let token = LeaseToken::from_random("worker-1", [7; 16]);
//! let outcome = block_on(&clock, guard.run(&token, |held| async move {
//!     // Hand the fence to whatever receives the writes; check the lease before each one.
//!     held.check()?;
//!     Ok::<u64, drain_core::guard::Loss>(held.fence().map_or(0, |f| f.number()))
//! }));
//! match outcome {
//!     Guarded::Ran { output, .. } => assert_eq!(output, Ok(1)),
//!     other => panic!("{other:?}"),
//! }
//! ```

mod handle;
mod keep;

use std::future::Future;
use std::panic::resume_unwind;
use std::time::Duration;

pub use crate::outcome::Loss;
pub use handle::LeaseHandle;
pub(crate) use keep::Ended;

use crate::error::{ErrorKind, PortError};
use crate::event::{Event, LeaseOp};
use crate::ports::{Acquire, Clock, Fence, LeaseName, LeaseStore, NoopObserver, Observer, Release};
use crate::switch::Switch;
use crate::time::Time;
use crate::token::LeaseToken;

/// How the work related to the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// The guard is off: the lease store was not touched.
    Off,
    /// The work held the lease.
    Held,
    /// The store failed on acquire and the guard fails open: the work ran without
    /// the lease.
    FailOpen,
    /// Shadow: the lease was taken (and released), but the work would have run anyway.
    ShadowAcquired,
    /// Shadow: another holder had the lease; On would have skipped. The work ran.
    ShadowWouldSkip,
}

impl LeaseStatus {
    /// A short stable name (`off`, `held`, `fail_open`, `shadow_acquired`,
    /// `shadow_would_skip`), as the tick report's JSON shows it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseStatus::Off => "off",
            LeaseStatus::Held => "held",
            LeaseStatus::FailOpen => "fail_open",
            LeaseStatus::ShadowAcquired => "shadow_acquired",
            LeaseStatus::ShadowWouldSkip => "shadow_would_skip",
        }
    }
}

/// How guarded work ended.
#[derive(Debug)]
pub enum Guarded<T> {
    /// The work ran to its end.
    Ran {
        /// What the work returned.
        output: T,
        /// How it related to the lease.
        status: LeaseStatus,
        /// The fence it held; `None` unless `status` is [`LeaseStatus::Held`].
        fence: Option<Fence>,
        /// The lease was lost while the work ran (it was told, and finished anyway;
        /// in shadow, only counted).
        loss: Option<Loss>,
    },
    /// Another holder has the lease: the work did not run.
    Skipped {
        /// The holder's instance id.
        holder: String,
        /// Time left on its lease.
        remaining: Duration,
    },
    /// The store failed on acquire and the guard fails closed: the work did not run.
    Refused(PortError),
    /// The lease was lost and the work was dropped before its end.
    Stopped {
        /// The fence the work held.
        fence: Fence,
        /// Why.
        loss: Loss,
    },
}

/// Runs work under a lease; see the module docs. Built per use: it borrows the store,
/// the clock and the observer.
#[derive(Clone)]
pub struct LeaseGuard<'a> {
    store: Option<&'a dyn LeaseStore>,
    clock: &'a dyn Clock,
    observer: &'a dyn Observer,
    lease: LeaseName,
    ttl: Duration,
    margin: Option<Duration>,
    mode: Switch,
    renew: bool,
    fail_open: bool,
    tell: bool,
}

/// What the acquire decided.
pub(crate) enum Start {
    Run(Begun),
    Skipped {
        holder: String,
        remaining: Duration,
    },
    /// Fail-closed; `timed_out`: the acquire may have landed, release with the token.
    Refused {
        error: PortError,
        timed_out: bool,
    },
}

/// Work about to run: its handle and how it holds the lease.
pub(crate) struct Begun {
    pub(crate) held: LeaseHandle,
    pub(crate) status: LeaseStatus,
    /// The store answered `Acquired`: renew, and release at the end.
    pub(crate) acquired: bool,
    /// The acquire timed out: it may have landed late, so release with the token.
    pub(crate) timed_out: bool,
    /// When the acquire was sent: the first renewal is due a period later.
    pub(crate) sent: Time,
}

impl<'a> LeaseGuard<'a> {
    /// A guard of `lease` in `store` for `ttl`, on `clock`: enforced, renewed every
    /// `ttl / 3`, failing closed when the store fails at acquire, dropping the work
    /// when the lease is lost, with a safety margin of `ttl / 10`.
    #[must_use]
    pub fn new(store: &'a dyn LeaseStore, clock: &'a dyn Clock, lease: LeaseName, ttl: Duration) -> Self {
        Self::over(Some(store), clock, lease, ttl)
    }

    pub(crate) fn over(
        store: Option<&'a dyn LeaseStore>,
        clock: &'a dyn Clock,
        lease: LeaseName,
        ttl: Duration,
    ) -> Self {
        LeaseGuard {
            store,
            clock,
            observer: &NoopObserver,
            lease,
            ttl,
            margin: None,
            mode: Switch::On,
            renew: true,
            fail_open: false,
            tell: false,
        }
    }

    /// Report lease operations and losses to `observer`.
    #[must_use]
    pub fn observer(mut self, observer: &'a dyn Observer) -> Self {
        self.observer = observer;
        self
    }

    /// When the store fails at acquire, run the work anyway, without the lease
    /// (status [`LeaseStatus::FailOpen`]): for work that overlapping runs cost only
    /// waste, never harm. The default fails closed: the work does not run.
    #[must_use]
    pub fn fail_open(mut self) -> Self {
        self.fail_open = true;
        self
    }

    /// On loss, tell the work through [`LeaseHandle`] and let it finish, instead of dropping it.
    #[must_use]
    pub fn tell_on_loss(mut self) -> Self {
        self.tell = true;
        self
    }

    /// The safety margin: the lease counts as lost this long before its time to
    /// live would run out without a confirmed renewal (default `ttl / 10`; at most
    /// half the time to live). It covers what the holder cannot see: a write in
    /// flight, a store whose clock runs fast.
    #[must_use]
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// The single-flight switch: Off runs the work without touching the store;
    /// Shadow takes the lease and counts what On would do, but runs the work as Off
    /// does (no skip, no stop). Default On.
    #[must_use]
    pub fn mode(mut self, mode: Switch) -> Self {
        self.mode = mode;
        self
    }

    /// Do not renew: the lease is lost at its first deadline.
    #[must_use]
    pub fn without_renewal(mut self) -> Self {
        self.renew = false;
        self
    }

    /// The lease guarded.
    #[must_use]
    pub fn lease(&self) -> &LeaseName {
        &self.lease
    }

    /// Run `work` under the lease with `token` (fresh for this run:
    /// [`LeaseToken::generate`]). `work` is given the [`LeaseHandle`]; its future is
    /// polled only by the future `run` returns. A panic of the work is re-raised
    /// after the release.
    pub async fn run<F, Fut, T>(&self, token: &LeaseToken, work: F) -> Guarded<T>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let begun = match self.begin(token).await {
            Start::Run(begun) => begun,
            Start::Skipped { holder, remaining } => return Guarded::Skipped { holder, remaining },
            Start::Refused { error, timed_out } => {
                if timed_out {
                    self.release(token).await;
                }
                return Guarded::Refused(error);
            }
        };
        let (ended, loss) = self.keep_while(&begun, token, work(begun.held.clone())).await;
        if begun.acquired || begun.timed_out {
            self.release(token).await;
        }
        match ended {
            Ended::Done(output) => {
                let fence = begun.held.fence().cloned();
                Guarded::Ran { output, status: begun.status, fence, loss }
            }
            Ended::Stopped(loss, fence) => Guarded::Stopped { fence, loss },
            Ended::Panicked(panic) => resume_unwind(panic),
        }
    }

    /// Acquire (unless Off) and decide.
    pub(crate) async fn begin(&self, token: &LeaseToken) -> Start {
        if self.mode == Switch::Off {
            return self.start(None, Time::ZERO);
        }
        let sent = self.clock.now();
        let answer = match self.store {
            Some(store) => store.acquire(&self.lease, token, self.ttl).await,
            None => Err(PortError::new(ErrorKind::Config, "no lease store configured")),
        };
        self.start(Some(answer), sent)
    }

    /// Decide on an acquire's `answer` (`None`: the guard is off), sent at `sent`.
    pub(crate) fn start(&self, answer: Option<Result<Acquire, PortError>>, sent: Time) -> Start {
        let enforced = self.mode.enforces();
        let run = |held, status, acquired, timed_out| Start::Run(Begun { held, status, acquired, timed_out, sent });
        match answer {
            None => run(LeaseHandle::unenforced(None), LeaseStatus::Off, false, false),
            Some(Ok(Acquire::Acquired { fence })) => {
                self.op(LeaseOp::Acquire, "acquired");
                if enforced {
                    let fence = Fence::new(self.lease.clone(), fence);
                    run(LeaseHandle::new(Some(fence), Some(self.deadline_after(sent))), LeaseStatus::Held, true, false)
                } else {
                    run(LeaseHandle::unenforced(None), LeaseStatus::ShadowAcquired, true, false)
                }
            }
            Some(Ok(Acquire::Busy { holder, remaining })) => {
                self.op(LeaseOp::Acquire, "held");
                if enforced {
                    Start::Skipped { holder, remaining }
                } else {
                    run(LeaseHandle::unenforced(None), LeaseStatus::ShadowWouldSkip, false, false)
                }
            }
            Some(Err(error)) => {
                self.op(LeaseOp::Acquire, "error");
                let timed_out = error.kind == ErrorKind::Timeout;
                if enforced && !self.fail_open {
                    Start::Refused { error, timed_out }
                } else {
                    run(LeaseHandle::unenforced(None), LeaseStatus::FailOpen, false, timed_out)
                }
            }
        }
    }

    /// Release with `token`, counted; its answer.
    pub(crate) async fn release(&self, token: &LeaseToken) -> Option<Release> {
        let Some(store) = self.store else {
            self.op(LeaseOp::Release, "error");
            return None;
        };
        let answer = store.release(&self.lease, token).await;
        self.op(
            LeaseOp::Release,
            match answer {
                Ok(Release::Released) => "released",
                Ok(Release::NotOwner) => "not_owner",
                Err(_) => "error",
            },
        );
        answer.ok()
    }

    /// The deadline of a lease whose last confirmed renewal (or acquire) was sent at `sent`.
    fn deadline_after(&self, sent: Time) -> Time {
        let margin = self.margin.unwrap_or(self.ttl / 10).min(self.ttl / 2);
        sent + self.ttl.saturating_sub(margin)
    }

    fn op(&self, op: LeaseOp, result: &'static str) {
        self.observer.observe(&Event::LeaseOp { op, result, mode: self.mode });
    }

    fn lost(&self, loss: Loss) {
        self.observer.observe(&Event::LeaseLost { lease: self.lease.name(), loss });
    }
}

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;

use crate::ports::Clock;
use crate::time::Time;

/// A clock that moves only when told to: by [`ManualClock::advance`], or by
/// [`super::block_on`], which jumps to the next sleeper's deadline whenever every
/// task is waiting. Hours of protocol run in milliseconds, deterministically.
#[derive(Debug, Default)]
pub struct ManualClock {
    state: Mutex<ClockState>,
}

#[derive(Debug, Default)]
struct ClockState {
    now: Time,
    next_id: u64,
    sleepers: BTreeMap<(Time, u64), Waker>,
}

impl ManualClock {
    /// A clock at [`Time::ZERO`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Move time forward by `d`, waking every sleeper whose deadline passed.
    pub fn advance(&self, d: Duration) {
        let to = self.lock().now + d;
        self.advance_to(to);
    }

    /// Move time forward to `t` (never backwards), waking due sleepers.
    pub fn advance_to(&self, t: Time) {
        let due: Vec<Waker> = {
            let mut s = self.lock();
            if t > s.now {
                s.now = t;
            }
            let now = s.now;
            let later = s.sleepers.split_off(&(now.saturating_add(Duration::from_millis(1)), 0));
            std::mem::replace(&mut s.sleepers, later).into_values().collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// The earliest deadline anyone sleeps until.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Time> {
        self.lock().sleepers.keys().next().map(|(t, _)| *t)
    }
}

struct Sleep<'a> {
    clock: &'a ManualClock,
    deadline: Time,
    id: Option<u64>,
}

impl Future for Sleep<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.clock.lock();
        if s.now >= self.deadline {
            if let Some(id) = self.id {
                s.sleepers.remove(&(self.deadline, id));
            }
            return Poll::Ready(());
        }
        let id = match self.id {
            Some(id) => id,
            None => {
                s.next_id += 1;
                s.next_id
            }
        };
        s.sleepers.insert((self.deadline, id), cx.waker().clone());
        drop(s);
        self.id = Some(id);
        Poll::Pending
    }
}

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.clock.lock().sleepers.remove(&(self.deadline, id));
        }
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> Time {
        self.lock().now
    }

    async fn sleep_until(&self, deadline: Time) {
        Sleep { clock: self, deadline, id: None }.await;
    }
}

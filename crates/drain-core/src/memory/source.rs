use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::select;

use crate::error::{ErrorKind, PortError};
use crate::ports::{Capabilities, Clock, Delivery, DeliveryHandle, Message, MessageSource, SubmitContext, Submitter};
use crate::time::Time;

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<(Message, u32)>,
    locked: BTreeMap<u64, (Message, u32, Time)>,
    completed: Vec<Message>,
    dead: Vec<(Message, String, String)>,
    next_handle: u64,
    version: u64,
    waiters: Vec<Waker>,
    failing: Option<ErrorKind>,
    receives: u64,
}

/// An in-memory peek-lock queue: receive locks messages for `lock_duration`; complete
/// removes, abandon redelivers (delivery count + 1), dead-letter moves to a
/// dead-letter list; an expired lock redelivers and makes a late settlement fail
/// with `LockLost`. It is also a [`Submitter`] (submitting enqueues), so it can be a
/// target or a test's feed.
pub struct MemorySource {
    clock: Arc<dyn Clock>,
    lock_duration: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("MemorySource").field("ready", &s.ready.len()).field("locked", &s.locked.len()).finish()
    }
}

impl MemorySource {
    /// An empty queue whose locks last `lock_duration` on `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>, lock_duration: Duration) -> Self {
        MemorySource { clock, lock_duration, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Enqueue a message.
    pub fn push(&self, message: Message) {
        let waiters = {
            let mut s = self.lock();
            s.ready.push_back((message, 0));
            s.version += 1;
            std::mem::take(&mut s.waiters)
        };
        for w in waiters {
            w.wake();
        }
    }

    /// Make every call fail with `kind` (`None` heals).
    pub fn set_failing(&self, kind: Option<ErrorKind>) {
        self.lock().failing = kind;
    }

    /// Messages waiting (not locked).
    #[must_use]
    pub fn ready_len(&self) -> usize {
        self.lock().ready.len()
    }

    /// Messages locked by a receiver (expired locks included until the next receive).
    #[must_use]
    pub fn locked_len(&self) -> usize {
        self.lock().locked.len()
    }

    /// Completed messages, in completion order.
    #[must_use]
    pub fn completed(&self) -> Vec<Message> {
        self.lock().completed.clone()
    }

    /// Dead-lettered messages with reason and description.
    #[must_use]
    pub fn dead_letters(&self) -> Vec<(Message, String, String)> {
        self.lock().dead.clone()
    }

    /// How many times `receive` was called.
    #[must_use]
    pub fn receive_calls(&self) -> u64 {
        self.lock().receives
    }

    fn check(&self, s: &State, op: &str) -> Result<(), PortError> {
        match s.failing {
            Some(kind) => Err(PortError::new(kind, format!("memory source: injected {kind} failure on {op}"))),
            None => Ok(()),
        }
    }

    /// Return expired locks to the front of the queue; the earliest lock expiry left.
    fn expire(s: &mut State, now: Time) -> Option<Time> {
        let expired: Vec<u64> = s.locked.iter().filter(|(_, (_, _, until))| *until <= now).map(|(h, _)| *h).collect();
        for h in expired.into_iter().rev() {
            if let Some((m, count, _)) = s.locked.remove(&h) {
                s.ready.push_front((m, count + 1));
            }
        }
        s.locked.values().map(|(_, _, until)| *until).min()
    }

    fn settle(&self, handle: DeliveryHandle, op: &str) -> Result<(Message, u32), PortError> {
        let now = self.clock.now();
        let mut s = self.lock();
        self.check(&s, op)?;
        match s.locked.remove(&handle.0) {
            Some((m, count, until)) if until > now => Ok((m, count)),
            Some((m, count, until)) => {
                s.locked.insert(handle.0, (m, count, until));
                Err(lock_lost(handle))
            }
            None => Err(lock_lost(handle)),
        }
    }

    fn notify(&self) {
        let waiters = {
            let mut s = self.lock();
            s.version += 1;
            std::mem::take(&mut s.waiters)
        };
        for w in waiters {
            w.wake();
        }
    }
}

fn lock_lost(handle: DeliveryHandle) -> PortError {
    PortError::new(
        ErrorKind::LockLost,
        format!("delivery {} is not locked by us (expired or already settled)", handle.0),
    )
}

/// Resolves when the source's version moves past `seen`.
struct Changed<'a> {
    source: &'a MemorySource,
    seen: u64,
}

impl Future for Changed<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.source.lock();
        if s.version != self.seen {
            return Poll::Ready(());
        }
        s.waiters.push(cx.waker().clone());
        Poll::Pending
    }
}

#[async_trait]
impl MessageSource for MemorySource {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: true, release: true }
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        let deadline = self.clock.now() + max_wait;
        {
            let mut s = self.lock();
            s.receives += 1;
        }
        loop {
            let now = self.clock.now();
            let (out, seen, wake_at) = {
                let mut s = self.lock();
                self.check(&s, "receive")?;
                let next_expiry = Self::expire(&mut s, now);
                let mut out = Vec::new();
                while out.len() < max {
                    let Some((message, count)) = s.ready.pop_front() else { break };
                    s.next_handle += 1;
                    let handle = s.next_handle;
                    s.locked.insert(handle, (message.clone(), count, now + self.lock_duration));
                    out.push(Delivery { handle: DeliveryHandle(handle), message, delivery_count: count });
                }
                let wake_at = next_expiry.map_or(deadline, |t| t.min(deadline));
                (out, s.version, wake_at)
            };
            if !out.is_empty() || now >= deadline {
                return Ok(out);
            }
            let sleep = self.clock.sleep_until(wake_at);
            let changed = Changed { source: self, seen };
            futures::pin_mut!(changed);
            // Either a push/abandon, a lock expiry or the deadline: look again.
            let _ = select(sleep, changed).await;
        }
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (m, _) = self.settle(handle, "complete")?;
        self.lock().completed.push(m);
        Ok(())
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (m, count) = self.settle(handle, "abandon")?;
        self.lock().ready.push_back((m, count + 1));
        self.notify();
        Ok(())
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (m, count) = self.settle(handle, "release")?;
        self.lock().ready.push_back((m, count));
        self.notify();
        Ok(())
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        let (m, _) = self.settle(handle, "dead_letter")?;
        self.lock().dead.push((m, reason.to_owned(), description.to_owned()));
        Ok(())
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        let now = self.clock.now();
        let mut s = self.lock();
        self.check(&s, "renew_lock")?;
        match s.locked.get_mut(&handle.0) {
            Some((_, _, until)) if *until > now => {
                *until = now + self.lock_duration;
                Ok(self.lock_duration)
            }
            _ => Err(lock_lost(handle)),
        }
    }
}

#[async_trait]
impl Submitter for MemorySource {
    async fn submit(&self, message: &Message, _ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        {
            let s = self.lock();
            self.check(&s, "submit")?;
        }
        self.push(message.clone());
        Ok(())
    }
}

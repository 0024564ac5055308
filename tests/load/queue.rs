//! The queues the ticks drain: in-memory peek-lock queues that keep nothing they
//! have settled, and the target that checks every message is submitted once.
//!
//! drain-core's `testkit::MemorySource` keeps every completed message (tests read
//! them back), so a minute of load would grow the process by the messages it moved
//! and hide what the memory check is for. This queue holds only sequence numbers
//! that are waiting or locked; a message is built when it is received. Locks do not
//! expire (no fault is injected here; the fault suite covers redeliveries).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::ports::{
    Capabilities, Delivery, DeliveryHandle, Message, MessageId, MessageSource, SubmitContext, Submitter,
};
use drain_core::{ErrorKind, PortError};
use tokio::sync::Notify;

use crate::parts::lock;

#[derive(Default)]
struct State {
    ready: VecDeque<(u64, u32)>,
    locked: HashMap<u64, (u64, u32)>,
    next_handle: u64,
    next_seq: u64,
}

/// One queue.
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    pushed: Notify,
    pub(crate) completed: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) dead: AtomicU64,
}

impl Queue {
    /// Enqueue `n` new messages.
    pub(crate) fn produce(&self, n: u64) {
        {
            let mut s = lock(&self.state);
            for _ in 0..n {
                let seq = s.next_seq;
                s.next_seq += 1;
                s.ready.push_back((seq, 0));
            }
        }
        self.pushed.notify_waiters();
    }

    /// Messages produced so far.
    pub(crate) fn produced(&self) -> u64 {
        lock(&self.state).next_seq
    }

    /// Messages waiting or locked.
    pub(crate) fn backlog(&self) -> usize {
        let s = lock(&self.state);
        s.ready.len() + s.locked.len()
    }

    fn take(&self, max: usize) -> Vec<Delivery> {
        let mut s = lock(&self.state);
        let mut out = Vec::new();
        while out.len() < max {
            let Some((seq, count)) = s.ready.pop_front() else { break };
            s.next_handle += 1;
            let handle = s.next_handle;
            s.locked.insert(handle, (seq, count));
            // Numbered ids, as a producer of ulong message ids sends them.
            let message = {
                let mut m = Message::default();
                m.message_id = Some(MessageId::Ulong(seq));
                m.body = b"load".to_vec();
                m
            };
            out.push(Delivery { handle: DeliveryHandle(handle), message, delivery_count: count });
        }
        out
    }

    fn settle(&self, handle: DeliveryHandle) -> Result<(u64, u32), PortError> {
        lock(&self.state)
            .locked
            .remove(&handle.0)
            .ok_or_else(|| PortError::new(ErrorKind::LockLost, format!("delivery {} is not locked", handle.0)))
    }
}

#[async_trait]
impl MessageSource for Queue {
    fn capabilities(&self) -> Capabilities {
        Capabilities { lock_renewal: true, release: true }
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let notified = self.pushed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let got = self.take(max.max(1));
            if !got.is_empty() {
                return Ok(got);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.settle(handle)?;
        self.completed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (seq, count) = self.settle(handle)?;
        lock(&self.state).ready.push_front((seq, count + 1));
        self.abandoned.fetch_add(1, Ordering::Relaxed);
        self.pushed.notify_waiters();
        Ok(())
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        let (seq, count) = self.settle(handle)?;
        lock(&self.state).ready.push_front((seq, count));
        self.abandoned.fetch_add(1, Ordering::Relaxed);
        self.pushed.notify_waiters();
        Ok(())
    }

    async fn dead_letter(&self, handle: DeliveryHandle, _reason: &str, _description: &str) -> Result<(), PortError> {
        self.settle(handle)?;
        self.dead.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn renew_lock(&self, _handle: DeliveryHandle) -> Result<Duration, PortError> {
        Ok(Duration::from_secs(300))
    }
}

/// The target of every queue: a bit per message (a second submit of one message is
/// counted), the highest fence seen per queue (a submit under a lower fence than one
/// already seen would be a stale holder), and a short delay per submit so that
/// ticks last long enough to overlap and renew.
pub(crate) struct Target {
    seen: Vec<Mutex<Vec<u64>>>,
    fences: Vec<AtomicU64>,
    delay: Duration,
    pub(crate) submitted: AtomicU64,
    pub(crate) twice: AtomicU64,
    pub(crate) stale_fence: AtomicU64,
    pub(crate) no_fence: AtomicU64,
}

impl Target {
    pub(crate) fn new(queues: usize, delay: Duration) -> Self {
        Target {
            seen: (0..queues).map(|_| Mutex::new(Vec::new())).collect(),
            fences: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            delay,
            submitted: AtomicU64::new(0),
            twice: AtomicU64::new(0),
            stale_fence: AtomicU64::new(0),
            no_fence: AtomicU64::new(0),
        }
    }
}

/// The name of queue `i`.
pub(crate) fn queue_name(i: usize) -> String {
    format!("q{i:02}")
}

#[async_trait]
impl Submitter for Target {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let q: usize = ctx.queue.trim_start_matches('q').parse().unwrap_or(0);
        let seq: u64 = match message.message_id {
            Some(MessageId::Ulong(n)) => n,
            _ => 0,
        };
        match ctx.fence.map(drain_core::ports::Fence::number) {
            Some(f) => {
                if self.fences[q].fetch_max(f, Ordering::Relaxed) > f {
                    self.stale_fence.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.no_fence.fetch_add(1, Ordering::Relaxed);
            }
        }
        {
            let mut bits = lock(&self.seen[q]);
            let (word, bit) = (usize::try_from(seq / 64).unwrap_or(usize::MAX), seq % 64);
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            if bits[word] & (1 << bit) != 0 {
                self.twice.fetch_add(1, Ordering::Relaxed);
            }
            bits[word] |= 1 << bit;
        }
        self.submitted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

//! The embedded demo: an in-memory queue fed by a synthetic producer and a slow
//! in-memory target, so `drain run` on a fresh machine shows ticks draining,
//! overlapping ticks, duplicates suppressed by the claim, and live metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::memory::MemorySource;
use drain_core::ports::{Clock, Message, SubmitContext, Submitter};
use drain_core::{PortError, Time};

/// The demo queue's name.
pub(crate) const DEMO_QUEUE: &str = "requests";
/// Messages in the opening burst: at 100 ms per submit, four at a time, its drain
/// (about 12 s) outlasts a 10 s beat.
const BURST: u64 = 450;
/// The burst of `drain run --once`, which has no beat to outlast.
const ONCE_BURST: u64 = 30;
/// Then this many every `TRICKLE_EVERY`.
const TRICKLE: u64 = 20;
const TRICKLE_EVERY: Duration = Duration::from_secs(5);
/// One message in this many is sent twice, as a broker redelivery would.
const DUPLICATE_EVERY: u64 = 10;

/// Messages the demo target works on at once.
const TARGET_SLOTS: usize = 4;

/// A target that takes `delay` per message, [`TARGET_SLOTS`] messages at a time, and
/// counts: a slow target, which more messages in flight do not make faster (so the
/// in-flight window stays small and a drain of the burst lasts seconds).
pub(crate) struct DemoTarget {
    clock: Arc<dyn Clock>,
    delay: Duration,
    accepted: AtomicU64,
    /// When each slot is done with the messages it was given so far.
    free_at: Mutex<[Time; TARGET_SLOTS]>,
}

impl DemoTarget {
    pub(crate) fn new(clock: Arc<dyn Clock>, delay: Duration) -> Self {
        let free_at = Mutex::new([Time::ZERO; TARGET_SLOTS]);
        DemoTarget { clock, delay, accepted: AtomicU64::new(0), free_at }
    }
}

#[async_trait]
impl Submitter for DemoTarget {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let until = {
            let mut slots = self.free_at.lock().unwrap_or_else(PoisonError::into_inner);
            let slot = slots.iter_mut().min().expect("slots");
            *slot = (*slot).max(self.clock.now()) + self.delay;
            *slot
        };
        self.clock.sleep_until(until).await;
        let n = self.accepted.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::trace!(id = %message.message_id.as_ref().map(ToString::to_string).unwrap_or_default(), fence = ?ctx.fence, total = n, "demo target accepted");
        Ok(())
    }
}

fn demo_message(n: u64) -> Message {
    {
        let mut m = Message::default();
        m.message_id = Some(format!("demo-{n}").into());
        m.body = format!("{{\"n\":{n}}}").into_bytes();
        m.content_type = Some("application/json".to_owned());
        m
    }
}

/// Feed `source`: a burst at once, then (with `trickle`) more every few seconds,
/// with some duplicates. Runs until the task is dropped. `drain run --once` feeds the
/// burst only, so its one tick ends when the queue is empty.
pub(crate) async fn produce(source: Arc<MemorySource>, clock: Arc<dyn Clock>, trickle: bool) {
    let mut n = 0u64;
    let mut push = |count: u64| {
        for _ in 0..count {
            n += 1;
            source.push(demo_message(n));
            if n.is_multiple_of(DUPLICATE_EVERY) {
                source.push(demo_message(n));
            }
        }
    };
    let burst = if trickle { BURST } else { ONCE_BURST };
    push(burst);
    tracing::info!(messages = burst, "demo producer: opening burst queued");
    if !trickle {
        return;
    }
    loop {
        let next = clock.now() + TRICKLE_EVERY;
        clock.sleep_until(next).await;
        push(TRICKLE);
    }
}

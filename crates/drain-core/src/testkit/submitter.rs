use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{ErrorKind, PortError};
use crate::ports::{Clock, Message, MessageId, SubmitContext, Submitter};

#[derive(Debug, Default)]
struct State {
    submitted: Vec<(Message, Option<u64>)>,
    fail_ids: HashSet<MessageId>,
    fail_all: bool,
    in_flight: usize,
    max_in_flight: usize,
    attempts: u64,
}

/// A [`Submitter`] that records what it accepted (with the fence it was given),
/// can be told to fail, and can take virtual time per submit so concurrency is
/// observable ([`RecordingSubmitter::max_in_flight`]).
pub struct RecordingSubmitter {
    clock: Arc<dyn Clock>,
    delay: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for RecordingSubmitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingSubmitter").field("submitted", &self.lock().submitted.len()).finish()
    }
}

impl RecordingSubmitter {
    /// A submitter that answers at once.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_delay(clock, Duration::ZERO)
    }

    /// A submitter that takes `delay` on `clock` per submit.
    #[must_use]
    pub fn with_delay(clock: Arc<dyn Clock>, delay: Duration) -> Self {
        RecordingSubmitter { clock, delay, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fail submits of the message with this id.
    pub fn fail_id(&self, id: impl Into<MessageId>) {
        self.lock().fail_ids.insert(id.into());
    }

    /// Fail every submit (`false` heals).
    pub fn set_fail_all(&self, fail: bool) {
        self.lock().fail_all = fail;
    }

    /// Accepted messages with the fence each was submitted under.
    #[must_use]
    pub fn submitted(&self) -> Vec<(Message, Option<u64>)> {
        self.lock().submitted.clone()
    }

    /// Ids of accepted messages as text ([`MessageId`]'s `Display`), in acceptance
    /// order.
    #[must_use]
    pub fn submitted_ids(&self) -> Vec<String> {
        self.lock().submitted.iter().filter_map(|(m, _)| m.message_id.as_ref().map(ToString::to_string)).collect()
    }

    /// Every call, accepted or not.
    #[must_use]
    pub fn attempts(&self) -> u64 {
        self.lock().attempts
    }

    /// The most submits that were in progress at once.
    #[must_use]
    pub fn max_in_flight(&self) -> usize {
        self.lock().max_in_flight
    }
}

#[async_trait]
impl Submitter for RecordingSubmitter {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        {
            let mut s = self.lock();
            s.attempts += 1;
            s.in_flight += 1;
            s.max_in_flight = s.max_in_flight.max(s.in_flight);
        }
        if !self.delay.is_zero() {
            let until = self.clock.now() + self.delay;
            self.clock.sleep_until(until).await;
        }
        let mut s = self.lock();
        s.in_flight -= 1;
        let failing = message.message_id.as_ref().is_some_and(|id| s.fail_ids.contains(id));
        let id = message.message_id.as_ref().map(ToString::to_string).unwrap_or_default();
        if s.fail_all || failing {
            return Err(PortError::new(ErrorKind::Connection, format!("recording submitter: told to fail {id}")));
        }
        s.submitted.push((message.clone(), ctx.fence.map(crate::ports::Fence::number)));
        Ok(())
    }
}

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::event::Event;
use crate::ports::Observer;

/// An [`Observer`] that keeps every event, for assertions.
#[derive(Debug, Default)]
pub struct RecordingObserver {
    events: Mutex<Vec<Event<'static>>>,
    names: Mutex<HashMap<String, &'static str>>,
}

impl RecordingObserver {
    /// An empty recorder.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Event<'static>>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every event so far.
    #[must_use]
    pub fn events(&self) -> Vec<Event<'static>> {
        self.lock().clone()
    }

    /// How many events match.
    #[must_use]
    pub fn count(&self, pred: impl Fn(&Event<'static>) -> bool) -> usize {
        self.lock().iter().filter(|e| pred(e)).count()
    }

    /// Forget what was recorded.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Queue names are interned so events can be kept as `Event<'static>`; a test
    /// uses a handful of names, so the set stays tiny.
    fn intern(&self, name: &str) -> &'static str {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = names.get(name) {
            return s;
        }
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        names.insert(name.to_owned(), leaked);
        leaked
    }
}

impl Observer for RecordingObserver {
    fn observe(&self, event: &Event<'_>) {
        let owned: Event<'static> = match *event {
            Event::Tick { queue, outcome, mode, kind, duration } => {
                Event::Tick { queue: self.intern(queue), outcome, mode, kind, duration }
            }
            Event::LeaseLost { lease, loss } => Event::LeaseLost { lease: self.intern(lease), loss },
            Event::Message { queue, outcome, mode } => Event::Message { queue: self.intern(queue), outcome, mode },
            Event::LeaseOp { op, result, mode } => Event::LeaseOp { op, result, mode },
            Event::OwnerSkipped { reason, mode } => Event::OwnerSkipped { reason, mode },
            Event::ClaimBusyBackoff { mode } => Event::ClaimBusyBackoff { mode },
            Event::ReleaseWake { mode } => Event::ReleaseWake { mode },
            Event::RetryOverflow => Event::RetryOverflow,
            Event::PeekError => Event::PeekError,
            Event::OwnerTurn { outcome } => Event::OwnerTurn { outcome },
            Event::OwnerQueueDepth(n) => Event::OwnerQueueDepth(n),
            Event::RetryTimers(n) => Event::RetryTimers(n),
            Event::StoreOp { op, duration } => Event::StoreOp { op, duration },
            Event::SwitchMode { switch, mode } => Event::SwitchMode { switch, mode },
        };
        self.lock().push(owned);
    }
}

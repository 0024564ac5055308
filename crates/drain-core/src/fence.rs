//! The consumer's side of fencing: [`FenceCheck`] reads the fence a message carries
//! and asks a [`FenceMarks`] store whether the message must be refused.
//!
//! drain's target can send every message a tick submits under its lease with the
//! tick's fence as an application property (the `drain` binary's
//! `DRAIN_TARGET_FENCE_PROPERTY`). A tick that lost its lease while paused still
//! submits what it holds, with its old fence, after the next holder's messages went
//! out with a larger one; the consumer that keeps the highest fence seen per queue
//! refuses those.

use crate::error::PortError;
use crate::ports::{FenceMarks, FenceVerdict, Message, PropertyValue};

/// What [`FenceCheck::check`] decided about one message.
#[derive(Debug, Clone, PartialEq)]
pub enum FenceDecision {
    /// Process the message: its fence is not below the mark (which is now at least
    /// its fence), or it carries none and unfenced messages are accepted
    /// (`fence: None`).
    Accept {
        /// The message's fence.
        fence: Option<u64>,
    },
    /// Refuse it: a larger fence was seen on this queue before, so a holder that
    /// lost its lease sent it.
    Stale {
        /// The message's fence.
        fence: u64,
        /// The highest fence accepted on the queue.
        mark: u64,
    },
    /// Refuse it: the message carries no fence, and [`FenceCheck::refuse_unfenced`]
    /// was asked for.
    Unfenced,
    /// Refuse it: the property holds something that is not a fence (a negative or
    /// fractional number, text that is not a whole number, another type): someone
    /// else set it.
    NotAFence(PropertyValue),
}

impl FenceDecision {
    /// Whether the message must be refused (drop it, or dead-letter it to keep a
    /// record).
    #[must_use]
    pub fn must_refuse(&self) -> bool {
        !matches!(self, FenceDecision::Accept { .. })
    }
}

/// Checks the fence of each message a consumer receives against the highest fence
/// seen on its queue, kept in a [`FenceMarks`] store (drain-core's `MemoryStore` in
/// one process, adapter-redis or adapter-postgres for consumers on several).
///
/// The fence is read from the application property named at construction, as an
/// unsigned or a non-negative signed integer of any width, or as text of decimal
/// digits. A message without it is accepted (`Accept { fence: None }`) unless
/// [`FenceCheck::refuse_unfenced`] is set: a tick submits without a fence when it
/// holds no lease (single-flight off, or failing open while the lease store is
/// down), and such messages are as good as any; refuse them only where every writer
/// must be fenced. An accepted fence raises the queue's mark, so check a message
/// once, when you are about to apply it.
///
/// ```
/// use std::sync::Arc;
///
/// use drain_core::fence::{FenceCheck, FenceDecision};
/// use drain_core::memory::{ManualClock, MemoryStore, block_on};
/// use drain_core::ports::{Clock, Message, PropertyValue};
///
/// let clock = Arc::new(ManualClock::new());
/// let marks = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
/// let check = FenceCheck::new(&marks, "drain-fence");
/// let with_fence = |fence: i64| {
///     let mut m = Message::default();
///     m.properties.insert("drain-fence".to_owned(), PropertyValue::Long(fence));
///     m
/// };
/// block_on(&clock, async {
///     // The holder of fence 8 submitted, then the paused holder of fence 7 woke up.
///     assert_eq!(check.check("work", &with_fence(8)).await.unwrap(), FenceDecision::Accept { fence: Some(8) });
///     let late = check.check("work", &with_fence(7)).await.unwrap();
///     assert_eq!(late, FenceDecision::Stale { fence: 7, mark: 8 });
///     assert!(late.must_refuse());
///     // A message sent without the lease carries no fence.
///     assert!(!check.check("work", &Message::default()).await.unwrap().must_refuse());
/// });
/// ```
#[derive(Debug)]
pub struct FenceCheck<'a, M: ?Sized> {
    marks: &'a M,
    property: String,
    refuse_unfenced: bool,
}

impl<'a, M: FenceMarks + ?Sized> FenceCheck<'a, M> {
    /// A check that reads the fence from the application property `property` and
    /// keeps the marks in `marks`.
    #[must_use]
    pub fn new(marks: &'a M, property: impl Into<String>) -> Self {
        FenceCheck { marks, property: property.into(), refuse_unfenced: false }
    }

    /// Refuse messages that carry no fence too.
    #[must_use]
    pub fn refuse_unfenced(mut self) -> Self {
        self.refuse_unfenced = true;
        self
    }

    /// The fence `message` carries: `Ok(None)` without the property, `Err` with the
    /// value when it is not a fence.
    ///
    /// # Errors
    /// The property's value when it is not a whole number from 0 to `u64::MAX`.
    pub fn fence_of(&self, message: &Message) -> Result<Option<u64>, PropertyValue> {
        let Some(value) = message.properties.get(&self.property) else { return Ok(None) };
        let number = match value {
            PropertyValue::Ulong(n) => Some(*n),
            PropertyValue::Long(n) => u64::try_from(*n).ok(),
            PropertyValue::String(s) | PropertyValue::Symbol(s) => parse_fence(s),
            _ => None,
        };
        number.map(Some).ok_or_else(|| value.clone())
    }

    /// Decide about `message`, received from `queue` (the resource whose mark is
    /// kept): accept it and raise the mark, or refuse it. One call of the store for a
    /// message with a fence, none for one without.
    ///
    /// # Errors
    /// The store's error when it cannot answer: neither accept nor refuse the message
    /// then (give it back to the queue).
    pub async fn check(&self, queue: &str, message: &Message) -> Result<FenceDecision, PortError> {
        let fence = match self.fence_of(message) {
            Ok(Some(fence)) => fence,
            Ok(None) if self.refuse_unfenced => return Ok(FenceDecision::Unfenced),
            Ok(None) => return Ok(FenceDecision::Accept { fence: None }),
            Err(value) => return Ok(FenceDecision::NotAFence(value)),
        };
        Ok(match self.marks.admit(queue, fence).await? {
            FenceVerdict::Accepted => FenceDecision::Accept { fence: Some(fence) },
            FenceVerdict::Stale { mark } => FenceDecision::Stale { fence, mark },
        })
    }
}

/// Decimal digits only (no sign, no spaces), as a fence.
fn parse_fence(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ErrorKind;
    use crate::memory::{ManualClock, MemoryStore, block_on};
    use crate::ports::Clock;

    fn message(value: Option<PropertyValue>) -> Message {
        let mut m = Message::default();
        if let Some(v) = value {
            m.properties.insert("fence".to_owned(), v);
        }
        m
    }

    #[track_caller]
    fn check_fence(value: Option<PropertyValue>, want: Result<Option<u64>, ()>) {
        let clock = Arc::new(ManualClock::new());
        let store = MemoryStore::new(clock as Arc<dyn Clock>);
        let got = FenceCheck::new(&store, "fence").fence_of(&message(value.clone()));
        assert_eq!(got.map_err(|_| ()), want, "{value:?}");
    }

    #[test]
    fn the_fence_is_read_from_every_integer_and_decimal_text() {
        use PropertyValue as P;
        check_fence(None, Ok(None));
        check_fence(Some(P::Long(7)), Ok(Some(7)));
        check_fence(Some(P::Long(0)), Ok(Some(0)));
        check_fence(Some(P::Ulong(u64::MAX)), Ok(Some(u64::MAX)));
        check_fence(Some(P::String("42".into())), Ok(Some(42)));
        check_fence(Some(P::Symbol("42".into())), Ok(Some(42)));
        check_fence(Some(P::Long(-1)), Err(()));
        check_fence(Some(P::String("-1".into())), Err(()));
        check_fence(Some(P::String("+1".into())), Err(()));
        check_fence(Some(P::String(" 1".into())), Err(()));
        check_fence(Some(P::String(String::new())), Err(()));
        check_fence(Some(P::String("18446744073709551616".into())), Err(()));
        check_fence(Some(P::Double(3.0)), Err(()));
        check_fence(Some(P::Bool(true)), Err(()));
        check_fence(Some(P::Binary(vec![7])), Err(()));
    }

    #[test]
    fn decisions() {
        let clock = Arc::new(ManualClock::new());
        let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
        let lenient = FenceCheck::new(&store, "fence");
        let strict = FenceCheck::new(&store, "fence").refuse_unfenced();
        let long = |n| message(Some(PropertyValue::Long(n)));
        block_on(&clock, async {
            let got = lenient.check("q", &long(3)).await.unwrap();
            assert_eq!(got, FenceDecision::Accept { fence: Some(3) });
            assert_eq!(lenient.check("q", &long(3)).await.unwrap(), got, "the same holder sends many");
            assert_eq!(strict.check("q", &long(2)).await.unwrap(), FenceDecision::Stale { fence: 2, mark: 3 });
            assert_eq!(lenient.check("other", &long(2)).await.unwrap(), FenceDecision::Accept { fence: Some(2) });
            assert_eq!(lenient.check("q", &message(None)).await.unwrap(), FenceDecision::Accept { fence: None });
            assert_eq!(strict.check("q", &message(None)).await.unwrap(), FenceDecision::Unfenced);
            let odd = message(Some(PropertyValue::Bool(true)));
            assert_eq!(lenient.check("q", &odd).await.unwrap(), FenceDecision::NotAFence(PropertyValue::Bool(true)));
            // Only fenced messages cost a call.
            assert_eq!(store.calls().get("admit"), Some(&4));
            assert_eq!(store.mark("q"), Some(3));
            store.set_failing(Some(ErrorKind::Connection));
            assert!(lenient.check("q", &long(9)).await.is_err(), "an outage decides nothing");
            store.set_failing(None);
            assert_eq!(store.mark("q"), Some(3));
        });
    }
}

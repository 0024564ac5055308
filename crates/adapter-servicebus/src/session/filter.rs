//! A session receiver's attach: the `com.microsoft:session-filter` source filter it
//! sends (the session's id, or null for the next available one, as Microsoft's SDKs
//! send it), and what the broker answers (the session it locked and until when).

use fe2o3_amqp::types::messaging::{FilterSet, Source};
use fe2o3_amqp::types::primitives::{Symbol, Value};

/// The source filter that names a session.
pub(crate) const SESSION_FILTER: &str = "com.microsoft:session-filter";
/// The attach property with the session lock's expiry, in .NET ticks.
pub(crate) const LOCKED_UNTIL_UTC: &str = "com.microsoft:locked-until-utc";

/// .NET ticks (100 ns since 0001-01-01) at the Unix epoch.
const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;

/// Which session a session receiver locks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionFilter {
    /// Whichever session the broker offers: one with messages that nobody holds.
    NextAvailable,
    /// This session, by its id (`Message::group_id`).
    Named(String),
}

/// A session a receiver holds: its id and when its lock expires (Unix ms; `None` when
/// the broker did not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionLock {
    pub(crate) id: String,
    pub(crate) locked_until_ms: Option<i64>,
}

/// The source terminus of a receiver on `address`, with the session filter when one
/// is asked for.
pub(crate) fn source(address: String, filter: Option<&SessionFilter>) -> Source {
    let mut source = Source::builder().address(address).build();
    if let Some(filter) = filter {
        let value = match filter {
            SessionFilter::NextAvailable => Value::Null,
            SessionFilter::Named(id) => Value::String(id.clone()),
        };
        let mut set = FilterSet::new();
        set.insert(Symbol::from(SESSION_FILTER), value);
        source.filter = Some(set);
    }
    source
}

/// The session the broker locked, from its attach answer: the filter's value and the
/// `locked-until-utc` property. `None` when the answer names no session.
pub(crate) fn answered(source: Option<&Source>, locked_until_ticks: Option<&Value>) -> Option<SessionLock> {
    let id = match source?.filter.as_ref()?.get(&Symbol::from(SESSION_FILTER))? {
        Value::String(id) => id.clone(),
        Value::Described(d) => match &d.value {
            Value::String(id) => id.clone(),
            _ => return None,
        },
        _ => return None,
    };
    let locked_until_ms = match locked_until_ticks {
        Some(Value::Long(ticks)) => Some(ticks_to_unix_ms(*ticks)),
        Some(Value::Timestamp(t)) => Some(t.milliseconds()),
        _ => None,
    };
    Some(SessionLock { id, locked_until_ms })
}

/// Unix milliseconds of .NET ticks.
pub(crate) fn ticks_to_unix_ms(ticks: i64) -> i64 {
    ticks.saturating_sub(UNIX_EPOCH_TICKS) / 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_names_the_session_or_asks_for_any() {
        let check = |filter: Option<SessionFilter>, want: Option<Value>| {
            let s = source("q".to_owned(), filter.as_ref());
            assert_eq!(s.filter.and_then(|f| f.get(&Symbol::from(SESSION_FILTER)).cloned()), want, "{filter:?}");
        };
        check(None, None);
        check(Some(SessionFilter::NextAvailable), Some(Value::Null));
        check(Some(SessionFilter::Named("s1".into())), Some(Value::String("s1".into())));
    }

    #[test]
    fn the_answer_names_the_session_and_its_lock() {
        let s = source("q".to_owned(), Some(&SessionFilter::Named("s1".into())));
        let ticks = Value::Long(UNIX_EPOCH_TICKS + 1_700_000_000_000 * 10_000);
        assert_eq!(
            answered(Some(&s), Some(&ticks)),
            Some(SessionLock { id: "s1".into(), locked_until_ms: Some(1_700_000_000_000) })
        );
        assert_eq!(answered(Some(&s), None).map(|l| l.locked_until_ms), Some(None));
        let any = source("q".to_owned(), Some(&SessionFilter::NextAvailable));
        assert_eq!(answered(Some(&any), Some(&ticks)), None, "a null filter names no session");
        assert_eq!(answered(None, None), None);
    }
}

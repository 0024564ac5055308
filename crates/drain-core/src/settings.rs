//! Pure parsing and validation of every setting (docs/flags.md lists them).
//!
//! Each function takes the variable's name and its raw value (`None` when unset)
//! and returns the effective value with at most one [`Warning`]. Nothing here reads
//! the environment: the configuration layer of the binary does that, once, and
//! hands the raw strings in. A bad value never panics and never silently disables
//! a safety feature.

use std::fmt;

use serde::Serialize;

/// An effective value and the warning, if any, that explains why it is not the raw one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Parsed<T> {
    /// The value to use.
    pub value: T,
    /// Why the raw value was not taken as it stands.
    pub warning: Option<Warning>,
}

impl<T> Parsed<T> {
    /// A value taken as given.
    pub fn clean(value: T) -> Self {
        Parsed { value, warning: None }
    }

    /// A value substituted or adjusted, with the reason.
    pub fn warned(value: T, warning: Warning) -> Self {
        Parsed { value, warning: Some(warning) }
    }
}

/// One warning about one variable's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// The variable's name, e.g. `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`.
    pub variable: String,
    /// The offending raw value, shortened for display. Never a secret: settings that
    /// hold secrets are not parsed here.
    pub value: String,
    /// What was done about it.
    pub message: String,
}

impl Warning {
    /// A warning about `variable` holding `value`.
    pub fn new(variable: &str, value: &str, message: impl Into<String>) -> Self {
        Warning { variable: variable.to_owned(), value: shorten(value), message: message.into() }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.variable, self.value, self.message)
    }
}

fn shorten(value: &str) -> String {
    const MAX: usize = 64;
    if value.chars().count() <= MAX {
        value.to_owned()
    } else {
        let mut s: String = value.chars().take(MAX).collect();
        s.push('…');
        s
    }
}

/// The rule for one integer setting: default, floor and ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IntRule {
    /// Used when the value is unset, empty, negative or not an integer.
    pub default: u64,
    /// Smaller values are raised to this, with a warning.
    pub min: u64,
    /// Larger values are lowered to this, with a warning.
    pub max: u64,
}

impl IntRule {
    /// Parse `raw` with this rule.
    ///
    /// Unset -> default, silently. Empty, negative or unparsable -> default with a
    /// warning. Below `min` -> `min`, above `max` -> `max`, each with a warning.
    pub fn parse(&self, name: &str, raw: Option<&str>) -> Parsed<u64> {
        let Some(raw) = raw else {
            return Parsed::clean(self.default);
        };
        let trimmed = raw.trim();
        let fallback = |why: &str| {
            Parsed::warned(self.default, Warning::new(name, raw, format!("{why}; using the default {}", self.default)))
        };
        if trimmed.is_empty() {
            return fallback("empty");
        }
        if trimmed.starts_with('-') {
            return fallback("negative");
        }
        let digits = trimmed.strip_prefix('+').unwrap_or(trimmed);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return fallback("not a whole number");
        }
        // All digits: the only parse failure left is overflow, which is "above max".
        let value = digits.parse::<u64>().unwrap_or(u64::MAX);
        if value < self.min {
            Parsed::warned(
                self.min,
                Warning::new(name, raw, format!("below the floor {}; using {}", self.min, self.min)),
            )
        } else if value > self.max {
            Parsed::warned(
                self.max,
                Warning::new(name, raw, format!("above the ceiling {}; using {}", self.max, self.max)),
            )
        } else {
            Parsed::clean(value)
        }
    }
}

/// `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`: lease TTL (default 120, floor 10, ceiling 86400).
pub const LEASE_TTL_SECONDS: IntRule = IntRule { default: 120, min: 10, max: 86_400 };
/// `SERVICEBUS_ATOMIC_CLAIM_TTL_SECONDS`: how long a `done` claim suppresses duplicates.
pub const CLAIM_TTL_SECONDS: IntRule = IntRule { default: 86_400, min: 60, max: 30 * 86_400 };
/// `SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS`: lifetime of a `pending` claim.
pub const CLAIM_PENDING_SECONDS: IntRule = IntRule { default: 300, min: 10, max: 86_400 };
/// `SERVICEBUS_DRAIN_CONCURRENCY`: messages processed at once within a tick.
pub const DRAIN_CONCURRENCY: IntRule = IntRule { default: 1, min: 1, max: 256 };
/// `SERVICEBUS_DRAIN_BATCH`: messages requested per receive.
pub const DRAIN_BATCH: IntRule = IntRule { default: 32, min: 1, max: 1_000 };
/// `SERVICEBUS_DRAIN_MAX_WAIT_MS`: longest wait of one receive.
pub const DRAIN_MAX_WAIT_MS: IntRule = IntRule { default: 1_000, min: 1, max: 60_000 };
/// `SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS`: how long a received message's lock
/// is renewed automatically (Service Bus); 0 turns automatic renewal off.
pub const MAX_LOCK_RENEWAL_SECONDS: IntRule = IntRule { default: 300, min: 0, max: 86_400 };
/// `PROJECTION_DRAIN_BACKOFF_MIN_SECONDS`: lower end of the claim-busy jitter window.
pub const BACKOFF_MIN_SECONDS: IntRule = IntRule { default: 5, min: 1, max: 3_600 };
/// `PROJECTION_DRAIN_BACKOFF_MAX_SECONDS`: upper end of the claim-busy jitter window.
pub const BACKOFF_MAX_SECONDS: IntRule = IntRule { default: 15, min: 1, max: 3_600 };
/// `PROJECTION_DRAIN_MAX_RETRY_TIMERS`: cap on pending retry timers.
pub const MAX_RETRY_TIMERS: IntRule = IntRule { default: 1_024, min: 1, max: 1_000_000 };
/// `DRAIN_BEAT_INTERVAL_SECONDS`: beat tick interval.
pub const BEAT_INTERVAL_SECONDS: IntRule = IntRule { default: 10, min: 1, max: 86_400 };
/// `DRAIN_WORKER_CONCURRENCY`: ticks that may run at once.
pub const WORKER_CONCURRENCY: IntRule = IntRule { default: 4, min: 1, max: 256 };
/// `DRAIN_SHUTDOWN_GRACE_SECONDS`: how long running ticks may finish at shutdown.
pub const SHUTDOWN_GRACE_SECONDS: IntRule = IntRule { default: 30, min: 0, max: 3_600 };

/// The lease TTL rule, in seconds.
pub fn lease_ttl_seconds(raw: Option<&str>) -> Parsed<u64> {
    LEASE_TTL_SECONDS.parse("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", raw)
}

/// The claim-busy jitter window `[min, max]` in seconds.
///
/// Each end follows its own [`IntRule`]; when the effective `min` exceeds `max`
/// the two are swapped, with a warning on the max variable, so the window is never
/// empty and never silently widened to zero.
pub fn backoff_window_seconds(raw_min: Option<&str>, raw_max: Option<&str>) -> (Parsed<u64>, Parsed<u64>) {
    const MIN_VAR: &str = "PROJECTION_DRAIN_BACKOFF_MIN_SECONDS";
    const MAX_VAR: &str = "PROJECTION_DRAIN_BACKOFF_MAX_SECONDS";
    let min = BACKOFF_MIN_SECONDS.parse(MIN_VAR, raw_min);
    let max = BACKOFF_MAX_SECONDS.parse(MAX_VAR, raw_max);
    if min.value > max.value {
        let (lo, hi) = (max.value, min.value);
        let warning = Warning::new(
            MAX_VAR,
            raw_max.unwrap_or(""),
            format!("smaller than {MIN_VAR}; using the window [{lo}, {hi}]"),
        );
        return (Parsed { value: lo, warning: min.warning }, Parsed::warned(hi, warning));
    }
    (min, max)
}

/// `DRAIN_KEY_PREFIX`: non-empty, at most 64 bytes of ASCII letters, digits, `-`, `_`,
/// `.` and `:`. A bad prefix falls back to `drain` with a warning (a brace or a space
/// would break a store's key layout).
pub fn key_prefix(raw: Option<&str>) -> Parsed<String> {
    const DEFAULT: &str = "drain";
    let Some(raw) = raw else {
        return Parsed::clean(DEFAULT.to_owned());
    };
    let p = raw.trim();
    let ok = !p.is_empty()
        && p.len() <= 64
        && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok {
        Parsed::clean(p.to_owned())
    } else {
        Parsed::warned(
            DEFAULT.to_owned(),
            Warning::new("DRAIN_KEY_PREFIX", raw, "must be 1-64 of A-Z a-z 0-9 - _ . :; using `drain`"),
        )
    }
}

/// `DRAIN_INSTANCE_ID`: 1-128 visible ASCII characters; otherwise `default`
/// (the binary passes host-pid) with a warning.
pub fn instance_id(raw: Option<&str>, default: &str) -> Parsed<String> {
    let Some(raw) = raw else {
        return Parsed::clean(default.to_owned());
    };
    let id = raw.trim();
    if !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()) {
        Parsed::clean(id.to_owned())
    } else {
        Parsed::warned(
            default.to_owned(),
            Warning::new(
                "DRAIN_INSTANCE_ID",
                raw,
                format!("must be 1-128 visible ASCII characters; using `{default}`"),
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn ttl(raw: Option<&str>, expected: u64, warns: bool) {
        let p = lease_ttl_seconds(raw);
        assert_eq!(p.value, expected, "ttl for {raw:?}");
        assert_eq!(p.warning.is_some(), warns, "warning for {raw:?}: {:?}", p.warning);
    }

    #[test]
    fn lease_ttl_fail_safe_floor_and_ceiling() {
        ttl(None, 120, false);
        ttl(Some("120"), 120, false);
        ttl(Some(" 45 "), 45, false);
        ttl(Some("+30"), 30, false);
        ttl(Some("10"), 10, false);
        ttl(Some("9"), 10, true);
        ttl(Some("0"), 10, true);
        ttl(Some("86400"), 86_400, false);
        ttl(Some("86401"), 86_400, true);
        ttl(Some("99999999999999999999999999"), 86_400, true);
        ttl(Some(""), 120, true);
        ttl(Some("   "), 120, true);
        ttl(Some("-5"), 120, true);
        ttl(Some("-0"), 120, true);
        ttl(Some("abc"), 120, true);
        ttl(Some("12s"), 120, true);
        ttl(Some("1.5"), 120, true);
        ttl(Some("+"), 120, true);
        ttl(Some("٣"), 120, true);
    }

    #[test]
    fn warnings_name_the_variable_and_value() {
        let w = lease_ttl_seconds(Some("9")).warning.expect("warning");
        assert_eq!(w.variable, "SERVICEBUS_DRAIN_LOCK_TTL_SECONDS");
        assert_eq!(w.value, "9");
        assert!(w.to_string().contains("floor 10"), "{w}");
        let long = "x".repeat(1000);
        let w = lease_ttl_seconds(Some(&long)).warning.expect("warning");
        assert!(w.value.chars().count() <= 65);
    }

    #[test]
    fn backoff_window_is_never_inverted() {
        let (lo, hi) = backoff_window_seconds(None, None);
        assert_eq!((lo.value, hi.value), (5, 15));
        assert!(lo.warning.is_none() && hi.warning.is_none());
        let (lo, hi) = backoff_window_seconds(Some("20"), Some("3"));
        assert_eq!((lo.value, hi.value), (3, 20));
        assert!(hi.warning.is_some());
        let (lo, hi) = backoff_window_seconds(Some("7"), Some("7"));
        assert_eq!((lo.value, hi.value), (7, 7));
        assert!(hi.warning.is_none());
    }

    #[test]
    fn prefix_and_instance() {
        assert_eq!(key_prefix(None).value, "drain");
        assert_eq!(key_prefix(Some("tenant-a")).value, "tenant-a");
        for bad in ["", "a{b}", "a b", "é", &"p".repeat(65)] {
            let p = key_prefix(Some(bad));
            assert_eq!(p.value, "drain", "{bad:?}");
            assert!(p.warning.is_some());
        }
        assert_eq!(instance_id(None, "host-1").value, "host-1");
        assert_eq!(instance_id(Some("w-7"), "host-1").value, "w-7");
        assert!(instance_id(Some("a b"), "host-1").warning.is_some());
        assert_eq!(instance_id(Some(""), "host-1").value, "host-1");
    }
}

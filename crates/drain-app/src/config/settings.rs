//! The rules every setting follows: integers with a default, a floor and a
//! ceiling; ordered windows; key prefixes; instance ids; and the switch grammar.
//!
//! Each rule takes the variable's name and its raw value (`None` when unset) and
//! returns the effective value with at most one [`Warning`]. Nothing here reads the
//! environment, and nothing here names a variable: the configuration layer of the
//! binary (drain-app's registry) declares its variables with their rules and
//! defaults, reads them once, and hands the raw strings in. A bad value never panics
//! and never silently disables a safety feature.

use std::fmt;

use drain_core::Switch;
use serde::Serialize;

/// An effective value and the warning, if any, that explains why it is not the raw one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub(crate) struct Parsed<T> {
    /// The value to use.
    pub(crate) value: T,
    /// Why the raw value was not taken as it stands.
    pub(crate) warning: Option<Warning>,
    /// The raw value could not be used at all and `value` is the rule's default, so
    /// the value comes from the default, not from where the raw value was set. (A
    /// clamped value still comes from the raw value.)
    pub(crate) defaulted: bool,
}

impl<T> Parsed<T> {
    /// A value taken as given.
    pub(crate) fn clean(value: T) -> Self {
        Parsed { value, warning: None, defaulted: false }
    }

    /// A value adjusted (clamped, reordered), with the reason.
    pub(crate) fn warned(value: T, warning: Warning) -> Self {
        Parsed { value, warning: Some(warning), defaulted: false }
    }

    /// The default, used because the raw value could not be, with the reason.
    pub(crate) fn fallback(value: T, warning: Warning) -> Self {
        Parsed { value, warning: Some(warning), defaulted: true }
    }
}

/// One warning about one variable's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Warning {
    /// The variable's name, e.g. `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`.
    pub(crate) variable: String,
    /// The offending raw value, shortened for display. Never a secret: settings that
    /// hold secrets are not parsed here.
    pub(crate) value: String,
    /// What was done about it.
    pub(crate) message: String,
}

impl Warning {
    /// A warning about `variable` holding `value`.
    pub(crate) fn new(variable: &str, value: &str, message: impl Into<String>) -> Self {
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
pub(crate) struct IntRule {
    /// Used when the value is unset, empty, negative or not an integer.
    pub(crate) default: u64,
    /// Smaller values are raised to this, with a warning.
    pub(crate) min: u64,
    /// Larger values are lowered to this, with a warning.
    pub(crate) max: u64,
}

impl IntRule {
    /// Parse `raw` with this rule.
    ///
    /// Unset -> default, silently. Empty, negative or unparsable -> default with a
    /// warning. Below `min` -> `min`, above `max` -> `max`, each with a warning.
    pub(crate) fn parse(&self, name: &str, raw: Option<&str>) -> Parsed<u64> {
        let Some(raw) = raw else {
            return Parsed::clean(self.default);
        };
        let trimmed = raw.trim();
        let fallback = |why: &str| {
            Parsed::fallback(
                self.default,
                Warning::new(name, raw, format!("{why}; using the default {}", self.default)),
            )
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

/// An ordered window `[low, high]` from two integer settings (the claim-busy jitter
/// window of owner admission is one).
///
/// Each end follows its own [`IntRule`]. When the effective low end exceeds the high
/// end the two are swapped, so the window is never empty and never silently widened
/// to zero, and the warning names the variable that was actually set: the low end's
/// when only it was set (a lone low end above the high end's default), the high
/// end's otherwise (both set, or only the high end, below the low end's value).
/// Each argument is `(variable, rule, raw value)`.
pub(crate) fn ordered_window(
    low: (&str, IntRule, Option<&str>),
    high: (&str, IntRule, Option<&str>),
) -> (Parsed<u64>, Parsed<u64>) {
    let (low_var, low_rule, low_raw) = low;
    let (high_var, high_rule, high_raw) = high;
    let lo = low_rule.parse(low_var, low_raw);
    let hi = high_rule.parse(high_var, high_raw);
    if lo.value <= hi.value {
        return (lo, hi);
    }
    let (a, b) = (hi.value, lo.value);
    let swapped = format!("using the window [{a}, {b}]");
    // Blame the end that was set; say so in its own warning if it has one already.
    let blame = |p: Parsed<u64>, value: u64, var: &str, raw: Option<&str>, why: String| {
        let warning = match p.warning {
            Some(mut w) => {
                w.message = format!("{}; {why}", w.message);
                w
            }
            None => Warning::new(var, raw.unwrap_or(""), why),
        };
        Parsed { value, warning: Some(warning), defaulted: false }
    };
    if high_raw.is_none() {
        let lo = blame(lo, a, low_var, low_raw, format!("above {high_var} ({a}); {swapped}"));
        (lo, Parsed { value: b, ..hi })
    } else {
        let hi = blame(hi, b, high_var, high_raw, format!("below {low_var} ({b}); {swapped}"));
        (Parsed { value: a, ..lo }, hi)
    }
}

/// A key prefix (the namespace every key starts with, e.g. `drain` in
/// `drain:lease:{q}`): trimmed, 1-64 bytes of ASCII letters, digits, `-`, `_`, `.`
/// and `:`.
///
/// # Errors
/// The reason, when `raw` is not such a prefix. There is no fallback: a prefix that
/// cannot be used must stop the caller, because replacing it with a shared default
/// would silently merge tenants (and complete one tenant's messages as the other's
/// duplicates). A brace or a space would also break a store's key layout.
pub(crate) fn key_prefix(raw: &str) -> Result<String, String> {
    let p = raw.trim();
    if p.is_empty() {
        return Err("empty; a key prefix must be 1-64 of A-Z a-z 0-9 - _ . :".to_owned());
    }
    if p.len() > 64 {
        return Err(format!("{} bytes; a key prefix must be 1-64 of A-Z a-z 0-9 - _ . :", p.len()));
    }
    match p.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))) {
        Some(c) => Err(format!("{c:?} is not allowed; a key prefix must be 1-64 of A-Z a-z 0-9 - _ . :")),
        None => Ok(p.to_owned()),
    }
}

/// An instance id (the holder identity written into lease and claim tokens):
/// 1-128 visible ASCII characters; otherwise `default` with a warning on `name`.
pub(crate) fn instance_id(name: &str, raw: Option<&str>, default: &str) -> Parsed<String> {
    let Some(raw) = raw else {
        return Parsed::clean(default.to_owned());
    };
    let id = raw.trim();
    if !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()) {
        Parsed::clean(id.to_owned())
    } else {
        Parsed::fallback(
            default.to_owned(),
            Warning::new(name, raw, format!("must be 1-128 visible ASCII characters; using `{default}`")),
        )
    }
}

/// Parse a raw value with the switch grammar.
///
/// Trimmed and case-insensitive: `off` is Off; `on`, `serve`, `true`, `1`, `yes`
/// are On; `shadow` is Shadow. An absent value is the default without a
/// warning; anything else (including an empty string) is the default with one
/// warning naming the variable and the bad value. So only `off` disables a
/// default-on switch.
pub(crate) fn parse_switch(name: &str, raw: Option<&str>, default: Switch) -> Parsed<Switch> {
    let Some(raw) = raw else {
        return Parsed::clean(default);
    };
    match raw.trim().to_ascii_lowercase().as_str() {
        "off" => Parsed::clean(Switch::Off),
        "on" | "serve" | "true" | "1" | "yes" => Parsed::clean(Switch::On),
        "shadow" => Parsed::clean(Switch::Shadow),
        _ => Parsed::fallback(
            default,
            Warning::new(
                name,
                raw,
                format!("not a switch value (off, on, shadow); using the default `{}`", default.as_str()),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: IntRule = IntRule { default: 120, min: 10, max: 86_400 };
    const LOW: IntRule = IntRule { default: 5, min: 1, max: 3_600 };
    const HIGH: IntRule = IntRule { default: 15, min: 1, max: 3_600 };

    #[track_caller]
    fn ttl(raw: Option<&str>, expected: u64, warns: bool) {
        let p = TTL.parse("TTL", raw);
        assert_eq!(p.value, expected, "ttl for {raw:?}");
        assert_eq!(p.warning.is_some(), warns, "warning for {raw:?}: {:?}", p.warning);
        let fell_back = warns && expected == TTL.default;
        assert_eq!(p.defaulted, fell_back, "defaulted for {raw:?}");
    }

    #[test]
    fn int_rule_fail_safe_floor_and_ceiling() {
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
        let w = TTL.parse("SOME_TTL", Some("9")).warning.expect("warning");
        assert_eq!(w.variable, "SOME_TTL");
        assert_eq!(w.value, "9");
        assert!(w.to_string().contains("floor 10"), "{w}");
        let long = "x".repeat(1000);
        let w = TTL.parse("SOME_TTL", Some(&long)).warning.expect("warning");
        assert!(w.value.chars().count() <= 65);
    }

    /// `(low raw, high raw)` -> the window and which variable a warning names (with
    /// which value).
    #[track_caller]
    fn window(raw: (Option<&str>, Option<&str>), expected: (u64, u64), blamed: Option<(&str, &str)>) {
        let (lo, hi) = ordered_window(("LOW", LOW, raw.0), ("HIGH", HIGH, raw.1));
        assert_eq!((lo.value, hi.value), expected, "{raw:?}");
        let warnings: Vec<&Warning> = lo.warning.iter().chain(&hi.warning).collect();
        match blamed {
            None => assert!(warnings.is_empty(), "{raw:?}: {warnings:?}"),
            Some((var, value)) => {
                assert_eq!(warnings.len(), 1, "{raw:?}: one warning: {warnings:?}");
                assert_eq!((warnings[0].variable.as_str(), warnings[0].value.as_str()), (var, value), "{raw:?}");
                let shown = expected.0.to_string() + ", " + &expected.1.to_string();
                assert!(warnings[0].message.contains(&shown), "{raw:?}: {}", warnings[0]);
            }
        }
    }

    #[test]
    fn an_inverted_window_is_swapped_and_blames_the_end_that_was_set() {
        window((None, None), (5, 15), None);
        window((Some("7"), Some("7")), (7, 7), None);
        window((Some("20"), Some("3")), (3, 20), Some(("HIGH", "3")));
        // A lone low end above the high end's default: the low end is what is wrong.
        window((Some("20"), None), (15, 20), Some(("LOW", "20")));
        // A lone high end below the low end's default.
        window((None, Some("3")), (3, 5), Some(("HIGH", "3")));
        // A high end that was garbage (default 15) below a low end of 20: one
        // warning on the high end that says both things.
        window((Some("20"), Some("abc")), (15, 20), Some(("HIGH", "abc")));
    }

    #[test]
    fn prefixes_are_valid_or_an_error() {
        assert_eq!(key_prefix("drain").as_deref(), Ok("drain"));
        assert_eq!(key_prefix(" tenant-a.eu:1 ").as_deref(), Ok("tenant-a.eu:1"));
        for bad in ["", "  ", "a{b}", "a b", "é", &"p".repeat(65)] {
            let e = key_prefix(bad).expect_err(bad);
            assert!(e.contains("1-64"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn instance_ids() {
        assert_eq!(instance_id("ID", None, "host-1").value, "host-1");
        assert_eq!(instance_id("ID", Some("w-7"), "host-1").value, "w-7");
        let p = instance_id("ID", Some("a b"), "host-1");
        assert_eq!((p.value.as_str(), p.defaulted), ("host-1", true));
        assert_eq!(p.warning.map(|w| w.variable), Some("ID".to_owned()));
        assert_eq!(instance_id("ID", Some(""), "host-1").value, "host-1");
    }
}

#[cfg(test)]
mod switch_tests {
    use drain_core::Switch::{self, Off, On, Shadow};

    use super::parse_switch;

    #[track_caller]
    fn check(raw: Option<&str>, default: Switch, expected: Switch, warns: bool) {
        let parsed = parse_switch("X_SWITCH", raw, default);
        assert_eq!(parsed.value, expected, "value for {raw:?} default {default}");
        assert_eq!(parsed.warning.is_some(), warns, "warning for {raw:?}");
        if let Some(w) = parsed.warning {
            assert_eq!(w.variable, "X_SWITCH");
            assert!(w.to_string().contains("X_SWITCH"));
        }
    }

    #[test]
    fn grammar() {
        check(None, On, On, false);
        check(None, Off, Off, false);
        check(Some("off"), On, Off, false);
        check(Some("  OFF "), On, Off, false);
        check(Some("Off"), Shadow, Off, false);
        for on in ["on", "serve", "true", "1", "yes", " YES", "Serve", "TRUE"] {
            check(Some(on), Off, On, false);
        }
        check(Some("shadow"), Off, Shadow, false);
        check(Some(" Shadow\t"), On, Shadow, false);
    }

    #[test]
    fn only_off_disables_a_default_on_switch() {
        for bad in ["", " ", "0", "false", "no", "disable", "of", "offf", "nein", "\u{0}"] {
            check(Some(bad), On, On, true);
        }
    }

    #[test]
    fn unknown_falls_back_to_an_off_default_with_warning() {
        check(Some("maybe"), Off, Off, true);
        check(Some("2"), Shadow, Shadow, true);
    }
}

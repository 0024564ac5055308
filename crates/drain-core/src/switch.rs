//! The three-position switch and its grammar.

use std::fmt;

use serde::Serialize;

use crate::settings::{Parsed, Warning};

/// How a feature behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    /// The feature is not used at all; for the lease this means the store is never touched.
    Off,
    /// The decision is computed and counted (`mode="shadow"`), but the behaviour is Off.
    Shadow,
    /// The feature decides.
    On,
}

impl Switch {
    /// Whether the feature's decision changes behaviour.
    #[must_use]
    pub fn enforces(self) -> bool {
        self == Switch::On
    }

    /// Whether the decision is computed at all (On or Shadow).
    #[must_use]
    pub fn computes(self) -> bool {
        self != Switch::Off
    }

    /// The lowercase name used in config output and metric labels.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Switch::Off => "off",
            Switch::Shadow => "shadow",
            Switch::On => "on",
        }
    }

    /// Parse a raw value with the switch grammar.
    ///
    /// Trimmed and case-insensitive: `off` is Off; `on`, `serve`, `true`, `1`, `yes`
    /// are On; `shadow` is Shadow. An absent value is the default without a
    /// warning; anything else (including an empty string) is the default with one
    /// warning naming the variable and the bad value. So only `off` disables a
    /// default-on switch.
    pub fn parse(name: &str, raw: Option<&str>, default: Switch) -> Parsed<Switch> {
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
}

impl fmt::Display for Switch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Switch::{self, Off, On, Shadow};

    #[track_caller]
    fn check(raw: Option<&str>, default: Switch, expected: Switch, warns: bool) {
        let parsed = Switch::parse("X_SWITCH", raw, default);
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

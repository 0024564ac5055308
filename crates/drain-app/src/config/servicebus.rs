//! The Service Bus source settings that are not numbers: which sessions to take,
//! and what a dead-letter re-drive does with the dead-letter properties.

use super::{Parsed, Resolver, Warning};

impl Resolver<'_> {
    /// `DRAIN_SOURCE_SESSIONS`: `off` (`None`), `any` (`Some(empty)`), or a
    /// comma-separated list of session ids. A list with an empty id falls back to
    /// `off` with a warning.
    pub(super) fn source_sessions(&mut self) -> Option<Vec<String>> {
        const NAME: &str = "DRAIN_SOURCE_SESSIONS";
        let raw = self.raw(NAME).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let parsed = match raw {
            None => Parsed::clean(None),
            Some(v) if v.eq_ignore_ascii_case("off") => Parsed::clean(None),
            Some(v) if v.eq_ignore_ascii_case("any") => Parsed::clean(Some(Vec::new())),
            Some(v) => {
                let ids: Vec<String> = v.split(',').map(|s| s.trim().to_owned()).collect();
                if ids.iter().any(|s| s.is_empty() || s.len() > 128) {
                    Parsed::fallback(
                        None,
                        Warning::new(NAME, &v, "a session id is empty or longer than 128 characters; sessions are off"),
                    )
                } else {
                    Parsed::clean(Some(ids))
                }
            }
        };
        let value = parsed.value.clone();
        let shown = match &value {
            None => "off".to_owned(),
            Some(ids) if ids.is_empty() => "any".to_owned(),
            Some(ids) => ids.join(","),
        };
        self.take(NAME, Parsed { value: shown, warning: parsed.warning, defaulted: parsed.defaulted });
        value
    }

    /// `DRAIN_SOURCE_DEAD_LETTER_PROPERTIES`: `keep` (false) or `drop` (true).
    pub(super) fn dead_letter_properties(&mut self) -> bool {
        const NAME: &str = "DRAIN_SOURCE_DEAD_LETTER_PROPERTIES";
        let raw = self.raw(NAME);
        let parsed = match raw.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
            None => Parsed::clean(false),
            Some(v) if v == "keep" => Parsed::clean(false),
            Some(v) if v == "drop" => Parsed::clean(true),
            Some(v) => Parsed::fallback(false, Warning::new(NAME, &v, "not `keep` or `drop`; keeping them")),
        };
        let drop = parsed.value;
        let shown = Parsed {
            value: if drop { "drop" } else { "keep" }.to_owned(),
            warning: parsed.warning,
            defaulted: parsed.defaulted,
        };
        self.take(NAME, shown);
        drop
    }
}

//! Setting parsing (drain-app's `config/settings.rs`, the switch grammar included):
//! any text, never a panic,
//! and every rule's promise holds — the switch grammar exactly, only `off` turns a
//! default-on switch off, numbers always inside their rule's range, a warning for
//! every value that was not taken as it stands, prefixes and instance ids valid.
#![no_main]

use adapter_redis::KeySpace;
use drain_core::Switch;
use libfuzzer_sys::fuzz_target;

// The binary's setting rules, compiled into this target as they are (drain-app is a
// binary, not a library to depend on).
#[allow(dead_code, unreachable_pub)]
#[path = "../../crates/drain-app/src/config/settings.rs"]
mod settings;

use settings::IntRule;

/// Rules of the shapes the binary's registry uses (drain-app declares its own; these
/// cover a zero floor, equal bounds, a default at either end and a huge ceiling).
const RULES: [IntRule; 6] = [
    IntRule { default: 120, min: 10, max: 86_400 },
    IntRule { default: 300, min: 0, max: 86_400 },
    IntRule { default: 1, min: 1, max: 256 },
    IntRule { default: 7, min: 7, max: 7 },
    IntRule { default: 1_000_000, min: 1, max: 1_000_000 },
    IntRule { default: 0, min: 0, max: u64::MAX },
];

fn switch(raw: &str) {
    let word = raw.trim().to_ascii_lowercase();
    let grammar = match word.as_str() {
        "off" => Some(Switch::Off),
        "on" | "serve" | "true" | "1" | "yes" => Some(Switch::On),
        "shadow" => Some(Switch::Shadow),
        _ => None,
    };
    for default in [Switch::Off, Switch::Shadow, Switch::On] {
        let p = settings::parse_switch("FUZZ_SWITCH", Some(raw), default);
        match grammar {
            Some(v) => assert!(p.value == v && p.warning.is_none(), "{raw:?}"),
            None => {
                assert_eq!(p.value, default, "{raw:?}");
                let w = p.warning.expect("a bad switch value is warned about");
                assert_eq!(w.variable, "FUZZ_SWITCH");
                assert!(w.value.chars().count() <= 65, "warnings shorten the value");
                let _ = w.to_string();
            }
        }
        if default == Switch::On && p.value == Switch::Off {
            assert_eq!(word, "off", "only `off` disables a default-on switch");
        }
    }
}

fn int(raw: &str) {
    for rule in RULES {
        let p = rule.parse("FUZZ_INT", Some(raw));
        assert!(rule.min <= p.value && p.value <= rule.max, "{raw:?} -> {} outside {rule:?}", p.value);
        match &p.warning {
            None => {
                let t = raw.trim();
                let digits = t.strip_prefix('+').unwrap_or(t);
                assert_eq!(digits.parse::<u64>().ok(), Some(p.value), "{raw:?} taken as it stands");
            }
            Some(w) => {
                assert!(w.value.chars().count() <= 65);
                let _ = w.to_string();
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (a, b) = text.split_once('\n').unwrap_or((&text, ""));
    switch(a);
    int(a);

    for (low, high) in [(Some(a), Some(b)), (Some(a), None), (None, Some(b))] {
        let (lo, hi) = settings::ordered_window(("LOW", RULES[0], low), ("HIGH", RULES[1], high));
        assert!(lo.value <= hi.value, "the window is never inverted: {low:?} {high:?}");
    }

    if let Ok(prefix) = settings::key_prefix(a) {
        assert!(!prefix.is_empty() && prefix.len() <= 64);
        assert!(prefix.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.:".contains(&c)), "{prefix:?}");
        assert!(KeySpace::new(prefix).scan_pattern().ends_with(":*"));
    }

    let id = settings::instance_id("FUZZ_ID", Some(a), "host-1").value;
    assert!(!id.is_empty() && id.len() <= 128 && id.bytes().all(|c| c.is_ascii_graphic()), "{id:?}");
});

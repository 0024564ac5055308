//! Rendering the registry (`docs/flags.md`) and the effective configuration.

use std::fmt::Write as _;

use super::registry::{Kind, SETTINGS};
use super::settings::Warning;
use super::{Effective, Origin};

/// `docs/flags.md`, generated from the registry. Regenerate with
/// `cargo xtask flags --write`.
pub(crate) fn flags_markdown() -> String {
    let mut out = String::new();
    out.push_str("# Switches and settings\n\n");
    out.push_str("<!-- Generated from crates/drain-app/src/config/registry.rs by `cargo xtask flags --write`. Do not edit. -->\n\n");
    out.push_str(
        "Read once at start from the environment, or from a TOML file given with `--config` \
         (same names and grammar: a TOML `true` is On, `false` is not `off`; the environment wins). \
         `drain config` prints the effective values, where each came from (`default` for a value \
         that fell back to it), and every warning. An unknown variable with a prefix of drain's \
         (`DRAIN_`, `SERVICEBUS_`, `PROJECTION_`) is warned about, naming the closest known one.\n\n",
    );
    out.push_str(
        "Switch grammar (trimmed, case-insensitive): `off` -> Off; `on`, `serve`, `true`, `1`, `yes` -> On; \
         `shadow` -> Shadow (the decision is computed and counted with `mode=\"shadow\"`, but behaves as Off). \
         Anything else -> the default, with one warning. Only `off` disables a default-on switch.\n\n",
    );
    out.push_str(
        "Whole numbers: unset -> default; empty, negative or not a number -> default with a warning; \
         below the floor or above the ceiling -> clamped with a warning.\n\n",
    );
    out.push_str(
        "URLs (`DRAIN_STORE_URL`: `redis://`, `rediss://`, `postgres://`, `postgresql://`; `DRAIN_REDIS_URL`: \
         `redis://`, `rediss://`; `DRAIN_SOURCE_URL`, `DRAIN_TARGET_URL`: `amqp://`, `amqps://`, `Endpoint=`): \
         unset -> the embedded default. Any other value must start with one of those; anything else, blank \
         included, is fatal: `drain` exits 2 with one line naming the variable (the value redacted), because \
         falling back to the embedded default would quietly turn a fleet-wide lease or claim into a per-process \
         one. So is a PostgreSQL URL that does not parse, and `DRAIN_STORE_URL` and `DRAIN_REDIS_URL` both set.\n\n",
    );
    out.push_str("| variable | type | default | range | owner | description |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for s in SETTINGS {
        let (ty, range) = match s.kind {
            Kind::Switch(_) => ("switch".to_owned(), "off / shadow / on".to_owned()),
            Kind::Int(rule, unit) => {
                let u = if unit.is_empty() { String::new() } else { format!(" {unit}") };
                (format!("integer{u}"), format!("{}..={}", rule.min, rule.max))
            }
            Kind::Url => ("url (secret, redacted)".to_owned(), String::new()),
            Kind::Text => ("text".to_owned(), String::new()),
        };
        let _ = writeln!(
            out,
            "| `{}` | {ty} | `{}` | {range} | {} | {} |",
            s.name,
            s.default,
            s.owner,
            s.description.replace('|', "\\|")
        );
    }
    out
}

/// The human table of `drain config`.
pub(crate) fn effective_table(effective: &[Effective], warnings: &[Warning]) -> String {
    let width = effective.iter().map(|e| e.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for e in effective {
        let origin = match e.origin {
            Origin::Default => "default",
            Origin::Env => "env",
            Origin::File => "file",
        };
        let _ = writeln!(out, "{:width$}  {:<8} {}", e.name, origin, e.value);
    }
    if warnings.is_empty() {
        out.push_str("\nno warnings\n");
    } else {
        let _ = writeln!(out, "\n{} warning(s):", warnings.len());
        for w in warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}

//! The tick report as one JSON line: what `drain run --once` prints (drain-core's
//! `TickReport` serializes itself; see `crates/drain-core/src/tick/report.rs`).

use drain_core::tick::TickReport;

/// One JSON line for `report` (no trailing newline).
pub(crate) fn to_json(report: &TickReport) -> String {
    // Serializing plain strings, numbers and bools into a String cannot fail.
    serde_json::to_string(report).unwrap_or_default()
}

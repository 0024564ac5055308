//! The fault run (`harness.rs`), its checker (`check.rs`) and the checker's negative
//! control (`broken.rs`); the fleet run of `drain` processes (`fleet.rs`) and its
//! checker (`fleet_check.rs`); owner drains under the same nemesis (`owners.rs`), shared by `tests/nemesis.rs` (the short schedule `cargo
//! xtask ci` runs) and the `drain-nemesis` program (`cargo xtask nemesis --minutes N`).

pub(crate) mod broken;
pub(crate) mod check;
pub(crate) mod fleet;
pub(crate) mod fleet_check;
pub(crate) mod harness;
/// The real-time and resource-order rules of the fencing history test.
#[path = "../history/check.rs"]
pub(crate) mod order;
pub(crate) mod owners;

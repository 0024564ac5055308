//! Shared test helpers: the built `drain` binary with a clean environment.

use std::process::Command;

/// The built `drain`, without any `DRAIN_*`, `SERVICEBUS_*` or `PROJECTION_*`
/// variable of the test's own environment: only what each test sets.
pub(crate) fn drain() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drain"));
    for (k, _) in std::env::vars() {
        if k.starts_with("DRAIN_") || k.starts_with("SERVICEBUS_") || k.starts_with("PROJECTION_") {
            c.env_remove(k);
        }
    }
    c
}

//! `cargo xtask env`: nothing but the configuration layer reads the environment at run
//! time. `env!` and `option_env!` are compile-time and allowed everywhere.
//!
//! The rule itself is the root clippy.toml's `disallowed-methods` (the `clippy` gate
//! enforces it, resolving paths, so an alias or a grouped import does not get
//! through); this gate checks that the rule is there and that only the places whose
//! job it is allow it.

use std::fs;

use crate::files::{project_files, slashed};
use crate::util::{Failure, GateResult, Outcome, project_root};

/// The reads the root clippy.toml must disallow.
const READS: &[&str] = &["std::env::var", "std::env::var_os", "std::env::vars", "std::env::vars_os"];

/// What a file writes to read the environment anyway.
const ALLOW: &str = "clippy::disallowed_methods";

/// Where reading the environment is the job: the configuration layer, xtask, and the
/// test harnesses (which read `DRAIN_TEST_*`), and drain-core's bench (its
/// arguments). Paths relative to the root.
fn allowed(path: &str) -> bool {
    let in_crate_tests = path
        .strip_prefix("crates/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(_, inside)| inside.starts_with("tests/") || inside.starts_with("benches/"));
    path.starts_with("crates/drain-app/src/config/")
        || path == "crates/drain-app/src/config.rs"
        || path.starts_with("xtask/")
        || path.starts_with("tests/")
        || in_crate_tests
}

/// Run the gate.
pub(crate) fn run() -> GateResult {
    let root = project_root();
    let clippy = fs::read_to_string(root.join("clippy.toml")).unwrap_or_default();
    let mut violations: Vec<String> = READS
        .iter()
        .filter(|p| !clippy.contains(&format!("path = \"{p}\"")))
        .map(|p| format!("clippy.toml: `{p}` is not disallowed"))
        .collect();
    for file in project_files(&root) {
        let path = slashed(&file);
        if !path.ends_with(".rs") || allowed(&path) {
            continue;
        }
        let text =
            fs::read_to_string(root.join(&file)).map_err(|e| Failure::new(format!("cannot read {path}: {e}")))?;
        for (n, line) in text.lines().enumerate() {
            if line.contains(ALLOW) && !line.trim_start().starts_with("//") {
                violations.push(format!("{path}:{}: allows `{ALLOW}` outside the config layer", n + 1));
            }
        }
    }
    if violations.is_empty() {
        return Ok(Outcome::Passed);
    }
    for v in &violations {
        println!("  {v}");
    }
    Err(Failure::new(format!("{} environment rule violation(s), listed above", violations.len())).fix(
        "keep the reads in the root clippy.toml; declare the setting in crates/drain-app/src/config/ and pass the value in",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_places() {
        let check = |path: &str, ok: bool| assert_eq!(allowed(path), ok, "{path}");
        check("crates/drain-app/src/config/mod.rs", true);
        check("crates/drain-app/src/config/registry.rs", true);
        check("crates/drain-app/src/config.rs", true);
        check("xtask/src/main.rs", true);
        check("tests/support/mod.rs", true);
        check("crates/adapter-redis/tests/support/mod.rs", true);
        check("crates/drain-core/benches/scheduler.rs", true);
        check("crates/drain-app/src/main.rs", false);
        check("crates/drain-core/src/settings.rs", false);
        check("crates/adapter-redis/src/tests/helpers.rs", false);
        check("crates/drain-app/src/configuration.rs", false);
    }

    #[test]
    fn the_root_clippy_toml_disallows_every_read() {
        let text = fs::read_to_string(project_root().join("clippy.toml")).expect("clippy.toml");
        for p in READS {
            assert!(text.contains(&format!("path = \"{p}\"")), "{p}");
        }
    }
}

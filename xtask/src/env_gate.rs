//! `cargo xtask env`: nothing but the configuration layer reads the environment at run
//! time. `env!` and `option_env!` are compile-time and allowed everywhere.

use std::fs;

use crate::files::{project_files, slashed};
use crate::scan::{self, Group, Pattern};
use crate::util::{Failure, GateResult, Outcome, project_root};

const WHY: &str = "reads the environment; add a setting to drain-app's config layer instead";

/// Run-time environment reads.
const READS: &[Pattern] = &[
    // Also `env::var_os`, `env::vars`, `env::vars_os`.
    Pattern::prefix("env::var", WHY),
    Pattern::word("var_os", WHY),
    // `dotenv`, `dotenvy`.
    Pattern::prefix("dotenv", WHY),
];

/// The same reads through grouped imports: `use std::env::{var, vars};`,
/// `use std::{env::var};`.
const READS_GROUPED: &[Group] = &[
    Group { open: "env::{", inner: &[Pattern::prefix("var", WHY)] },
    Group { open: "std::{", inner: &[Pattern::prefix("env::var", WHY)] },
];

/// Where reading the environment is the job: the configuration layer, xtask, and the
/// test harness (which reads `DRAIN_TEST_*`). Paths relative to the root.
fn allowed(path: &str) -> bool {
    let in_crate_tests = path
        .strip_prefix("crates/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(_, inside)| inside.starts_with("tests/"));
    path.starts_with("crates/drain-app/src/config/")
        || path == "crates/drain-app/src/config.rs"
        || path.starts_with("xtask/")
        || path.starts_with("tests/")
        || in_crate_tests
}

/// Run the gate.
pub(crate) fn run() -> GateResult {
    let root = project_root();
    let mut violations = Vec::new();
    for file in project_files(&root) {
        let path = slashed(&file);
        if !path.ends_with(".rs") || allowed(&path) {
            continue;
        }
        let text =
            fs::read_to_string(root.join(&file)).map_err(|e| Failure::new(format!("cannot read {path}: {e}")))?;
        for hit in scan::find(&text, READS, READS_GROUPED) {
            violations.push(format!("{path}:{}: `{}` {}", hit.line, hit.needle, hit.why));
        }
    }
    if violations.is_empty() {
        return Ok(Outcome::Passed);
    }
    for v in &violations {
        println!("  {v}");
    }
    Err(Failure::new(format!(
        "{} environment read(s) outside the config layer, listed above",
        violations.len()
    ))
    .fix("declare the setting in crates/drain-app/src/config/ and pass the value in; only config, xtask/ and test harnesses read the environment"))
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
        check("crates/drain-app/src/main.rs", false);
        check("crates/drain-core/src/settings.rs", false);
        check("crates/adapter-redis/src/tests/helpers.rs", false);
        check("crates/drain-app/src/configuration.rs", false);
    }

    #[test]
    fn reads_are_found() {
        let check = |src: &str, expected: usize| {
            assert_eq!(scan::find(src, READS, READS_GROUPED).len(), expected, "{src}");
        };
        check("let v = std::env::var(\"DRAIN_LOG\");", 1);
        check("let v = env::var_os(\"X\");", 1);
        check("for (k, v) in std::env::vars() {}", 1);
        check("use std::env::var_os;\nvar_os(\"X\")", 2);
        check("use std::env::{var, vars_os};", 1);
        check("use std::{env::var, fmt};", 1);
        check("dotenvy::dotenv().ok();", 1);
        check("const V: &str = env!(\"CARGO_PKG_VERSION\");", 0);
        check("let v = option_env!(\"GIT_SHA\");", 0);
        check("let a: Vec<String> = std::env::args().collect();", 0);
        check("// std::env::var is read by config only", 0);
        check("let s = \"env::var\";", 0);
    }
}

//! `cargo xtask test`: the whole test suite (unit, integration, doctests).
//!
//! The servers come from Debian packages (redis-server, redis-tools,
//! rabbitmq-server, prometheus, python3 for the Service Bus SDK check): when one is
//! missing the gate runs
//! .ci/setup-services.sh itself as root, and otherwise prints the one command to
//! run. Tests that touch Redis or Prometheus start private servers of their own;
//! AMQP tests use one private RabbitMQ node that this gate starts for the run
//! (crate::rabbit) and names in `DRAIN_TEST_AMQP_URL` (kept when already set). The
//! machine's services are never used.
//!
//! With cargo-nextest installed the tests run through it (`.config/nextest.toml`):
//! most tests wait on servers, so running test binaries side by side instead of one
//! after another roughly halves the gate. What nextest cannot run goes through
//! `cargo test`: doctests, and the worked examples whose `main` is the test (no
//! harness to list tests with). Without nextest, `cargo test` runs everything.

use crate::rabbit::{self, HOME_VAR, NODE_VAR, URL_VAR};
use crate::services::{self, Need};
use crate::util::{Failure, GateResult, Outcome, cargo, run};

/// The programs the tests run (each from the package the setup script installs;
/// `python3` makes the venv of the Service Bus SDK check, whose `python3-venv` the
/// script installs too; `initdb` stands for Debian's `postgresql`, whose server
/// binaries live in `/usr/lib/postgresql/<major>/bin`).
pub(crate) const PROGRAMS: [&str; 7] =
    ["redis-server", "redis-cli", "initdb", "rabbitmq-server", "prometheus", "promtool", "python3"];

/// What nextest builds and runs: everything but doctests and the harness-less examples.
const NEXTEST_BUILD: [&str; 7] = ["--workspace", "--all-features", "--lib", "--bins", "--test", "*", "--cargo-quiet"];

/// Run the gate.
pub(crate) fn run_gate() -> GateResult {
    run_gate_beside(&mut || {})
}

/// Run the gate; `beside` is called once, when the tests are built and about to run
/// without holding cargo's build lock (only with nextest), so `ci` can start the
/// gates that only compile beside them.
pub(crate) fn run_gate_beside(beside: &mut dyn FnMut()) -> GateResult {
    let need = services::ensure(&PROGRAMS)?;
    let nextest = has_nextest();
    let mut cmd = cargo();
    if nextest {
        cmd.args(["nextest", "run", "--no-fail-fast"]);
    } else {
        cmd.args(["test", "--workspace", "--all-features"]);
    }
    if let Need::Missing(why) = &need {
        println!("xtask test: tests that need what is missing will skip (they fail under CI=true): {why}");
    }
    if std::env::var_os(URL_VAR).is_some() {
        println!("xtask test: {URL_VAR} already set; using that broker");
    } else if need == Need::Present {
        // The node boots (seconds, mostly waiting) while the tests compile.
        let node = std::thread::spawn(rabbit::shared);
        let mut build = cargo();
        build.args(["test", "--workspace", "--all-features", "--no-run"]);
        let built = run(&mut build);
        let (url, name, home) = node.join().map_err(|_| Failure::new("starting RabbitMQ panicked"))??;
        built.map_err(|f| f.fix("fix the build errors above"))?;
        cmd.env(URL_VAR, url).env(NODE_VAR, name).env(HOME_VAR, home);
    }
    if nextest {
        // Listing builds what is missing; the run then reuses that build instead of
        // asking cargo again, so it never waits on the build lock the gates beside it hold.
        let dir = crate::metadata::Metadata::load()?.target_directory.join("nextest");
        let binaries = dir.join("binaries-metadata.json");
        let metadata = dir.join("cargo-metadata.json");
        let mut list = cargo();
        list.args(["nextest", "list"]).args(NEXTEST_BUILD).args([
            "--list-type",
            "binaries-only",
            "--message-format",
            "json",
        ]);
        write_output(&mut list, &binaries)?;
        write_output(cargo().args(["metadata", "--format-version", "1", "--all-features"]), &metadata)?;
        cmd.arg("--binaries-metadata").arg(&binaries).arg("--cargo-metadata").arg(&metadata);
        beside();
    }
    run(&mut cmd).map_err(|f| f.fix("fix the failing tests above, then rerun `cargo xtask test`"))?;
    if nextest {
        for what in ["--examples", "--doc"] {
            run(cargo().args(["test", "--workspace", "--all-features", what]))
                .map_err(|f| f.fix("fix the failing tests above, then rerun `cargo xtask test`"))?;
        }
    }
    Ok(Outcome::Passed)
}

/// Run `cmd` and write what it prints to `path` (its errors go to the terminal).
fn write_output(cmd: &mut std::process::Command, path: &std::path::Path) -> Result<(), Failure> {
    let line = crate::util::display(cmd);
    println!("$ {line} > {}", path.display());
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| Failure::new(format!("could not start `{line}`: {e}")))?;
    if !out.status.success() {
        return Err(Failure::new(format!("`{line}` failed")).fix("fix the build errors above"));
    }
    let dir = path.parent().unwrap_or(path);
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(path, &out.stdout))
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))
}

/// Whether `cargo nextest` runs here.
fn has_nextest() -> bool {
    cargo()
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Point `cmd`'s tests (or benches) at this run's private RabbitMQ node.
pub(crate) fn amqp_env(cmd: &mut std::process::Command) -> Result<(), Failure> {
    let (url, node, home) = rabbit::shared()?;
    cmd.env(URL_VAR, url).env(NODE_VAR, node).env(HOME_VAR, home);
    Ok(())
}

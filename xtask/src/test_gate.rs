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

use crate::rabbit::{self, HOME_VAR, NODE_VAR, URL_VAR};
use crate::services::{self, Need};
use crate::util::{GateResult, Outcome, cargo, run};

/// The programs the tests run (each from the package the setup script installs;
/// `python3` makes the venv of the Service Bus SDK check, whose `python3-venv` the
/// script installs too; `initdb` stands for Debian's `postgresql`, whose server
/// binaries live in `/usr/lib/postgresql/<major>/bin`).
pub(crate) const PROGRAMS: [&str; 7] =
    ["redis-server", "redis-cli", "initdb", "rabbitmq-server", "prometheus", "promtool", "python3"];

/// Run the gate.
pub(crate) fn run_gate() -> GateResult {
    let need = services::ensure(&PROGRAMS)?;
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--all-features"]);
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
        let (url, name, home) = node.join().map_err(|_| crate::util::Failure::new("starting RabbitMQ panicked"))??;
        built.map_err(|f| f.fix("fix the build errors above"))?;
        cmd.env(URL_VAR, url).env(NODE_VAR, name).env(HOME_VAR, home);
    }
    run(&mut cmd).map_err(|f| f.fix("fix the failing tests above, then rerun `cargo xtask test`"))?;
    Ok(Outcome::Passed)
}

/// Point `cmd`'s tests (or benches) at this run's private RabbitMQ node.
pub(crate) fn amqp_env(cmd: &mut std::process::Command) -> Result<(), crate::util::Failure> {
    let (url, node, home) = rabbit::shared()?;
    cmd.env(URL_VAR, url).env(NODE_VAR, node).env(HOME_VAR, home);
    Ok(())
}

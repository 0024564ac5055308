//! `cargo xtask test`: the whole test suite (unit, integration, doctests). Tests
//! that touch Redis start their own private `redis-server`s (crates/test-servers),
//! so the gate only checks that the program is installed; AMQP tests use the
//! machine's RabbitMQ, found through `DRAIN_TEST_AMQP_URL` (kept when already set,
//! otherwise set when RabbitMQ answers), with the AMQP 1.0 plugin enabled here.

use crate::services::{self, Plugin, RABBITMQ_PORT};
use crate::util::{Failure, GateResult, Outcome, cargo, is_ci, run};

const AMQP_VAR: &str = "DRAIN_TEST_AMQP_URL";

/// Run the gate.
pub(crate) fn run_gate() -> GateResult {
    match services::ensure_amqp1_plugin()? {
        Plugin::NoTool => {
            println!("xtask test: rabbitmq-plugins not installed; not touching RabbitMQ")
        }
        Plugin::AlreadyEnabled => {
            println!("xtask test: RabbitMQ plugin rabbitmq_amqp1_0 is enabled")
        }
        Plugin::EnabledNow => println!("xtask test: enabled RabbitMQ plugin rabbitmq_amqp1_0"),
        Plugin::Unknown(why) => {
            println!("xtask test: could not ask RabbitMQ for its plugins ({why})")
        }
    }

    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--all-features"]);

    if !services::redis_server_installed() {
        let failure = Failure::new("redis-server is not installed; tests that need Redis cannot start their servers")
            .fix("run `bash .ci/setup-services.sh` (installs redis-server and RabbitMQ)");
        if is_ci() {
            return Err(failure);
        }
        println!("xtask test: warning: {failure}");
        println!("xtask test: tests that need Redis will skip (they fail under CI=true)");
    }

    if let Some(url) = std::env::var_os(AMQP_VAR) {
        println!("xtask test: {AMQP_VAR} already set; using it");
        cmd.env(AMQP_VAR, url);
    } else if services::rabbitmq_answers() {
        let url = format!("amqp://guest:guest@127.0.0.1:{RABBITMQ_PORT}");
        println!("xtask test: {AMQP_VAR}={url}");
        cmd.env(AMQP_VAR, url);
    } else {
        println!(
            "xtask test: warning: nothing answers on 127.0.0.1:{RABBITMQ_PORT}; AMQP tests will skip (they fail under CI=true); run `bash .ci/setup-services.sh`"
        );
    }

    run(&mut cmd).map_err(|f| f.fix("fix the failing tests above, then rerun `cargo xtask test`"))?;
    Ok(Outcome::Passed)
}

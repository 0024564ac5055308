//! `cargo xtask test`: the whole test suite (unit, integration, doctests) against a
//! private `redis-server` and, when it answers, the machine's RabbitMQ.
//!
//! Test processes learn where the servers are from two variables (tests/README.md):
//! `DRAIN_TEST_REDIS_URL` (always our private server, never the shared 6379) and
//! `DRAIN_TEST_AMQP_URL` (kept when already set, otherwise set when RabbitMQ answers).

use crate::services::{self, Plugin, PrivateRedis, RABBITMQ_PORT};
use crate::util::{GateResult, Outcome, cargo, is_ci, run};

const REDIS_VAR: &str = "DRAIN_TEST_REDIS_URL";
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

    // Declared before the command runs, dropped (killed) after it, whatever happens.
    let redis = match PrivateRedis::start() {
        Ok(redis) => Some(redis),
        Err(failure) if is_ci() => return Err(failure),
        Err(failure) => {
            println!("xtask test: warning: {failure}");
            println!("xtask test: tests that need Redis will skip (they fail under CI=true)");
            None
        }
    };
    if let Some(redis) = &redis {
        if std::env::var_os(REDIS_VAR).is_some() {
            println!("xtask test: ignoring the {REDIS_VAR} you set: tests get a private server");
        }
        println!("xtask test: {REDIS_VAR}={} (private redis-server, pid {})", redis.url, redis.pid());
        cmd.env(REDIS_VAR, &redis.url);
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

    let result = run(&mut cmd);
    drop(redis);
    result.map_err(|f| f.fix("fix the failing tests above, then rerun `cargo xtask test`"))?;
    Ok(Outcome::Passed)
}

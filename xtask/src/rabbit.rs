//! The gates' private RabbitMQ node (`drain-xtask-<pid>@localhost`, data under
//! `target/xtask-rabbit/<pid>/`), started once per `cargo xtask` process (the `test`
//! and `bench` gates of one `ci` run share it) and stopped when xtask exits. It
//! stays in xtask's process group, so a Ctrl-C reaches its start script too. The
//! machine's RabbitMQ is never used or touched.
//!
//! Tests find it through three variables: `DRAIN_TEST_AMQP_URL` (the broker),
//! `DRAIN_TEST_AMQP_NODE` and `DRAIN_TEST_AMQP_HOME` (for `rabbitmqctl -n <node>`
//! with `HOME=<dir>`, where the node's cookie is).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use crate::util::{Failure, project_root};

/// The node itself: test-servers' start-up, included by path (xtask depends on no
/// workspace crate).
#[allow(dead_code, unreachable_pub)]
#[path = "../../crates/test-servers/src/rabbit.rs"]
mod node;

use node::RabbitNode;

/// The variables a test process needs to reach the node.
pub(crate) const URL_VAR: &str = "DRAIN_TEST_AMQP_URL";
pub(crate) const NODE_VAR: &str = "DRAIN_TEST_AMQP_NODE";
pub(crate) const HOME_VAR: &str = "DRAIN_TEST_AMQP_HOME";

/// The node of this xtask process, started on first use.
static NODE: Mutex<Option<RabbitNode>> = Mutex::new(None);

/// `(url, node, home)` of this process' node, starting it when needed.
///
/// # Errors
/// When rabbitmq-server is not installed or the node does not boot.
pub(crate) fn shared() -> Result<(String, String, PathBuf), Failure> {
    let mut node = NODE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if node.is_none() {
        if !RabbitNode::installed() {
            return Err(Failure::new(format!("{}/rabbitmq-server is not installed", node::RABBIT_BIN))
                .fix("run `bash .ci/setup-services.sh` as root (installs rabbitmq-server)"));
        }
        let name = format!("drain-xtask-{}@localhost", std::process::id());
        let dir = project_root().join("target").join("xtask-rabbit").join(std::process::id().to_string());
        let started = RabbitNode::start(&name, &dir, false).map_err(Failure::new)?;
        println!(
            "xtask: private RabbitMQ node {} on {} ready in {:.1} s (data in {})",
            started.name(),
            started.url().rsplit('@').next().unwrap_or_default(),
            started.boot().as_secs_f64(),
            crate::util::rel(started.dir())
        );
        *node = Some(started);
    }
    let n = node.as_ref().expect("started above");
    Ok((n.url(), n.name().to_owned(), n.dir().to_path_buf()))
}

/// Stop this process' node, if one was started (at xtask's exit).
pub(crate) fn stop_shared() {
    let node = NODE.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(node) = node {
        let (name, started) = (node.name().to_owned(), Instant::now());
        drop(node);
        println!("xtask: private RabbitMQ node {name} stopped in {:.1} s", started.elapsed().as_secs_f64());
    }
}

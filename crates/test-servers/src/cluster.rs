//! [`RedisCluster`]: a Redis Cluster of private loopback nodes, and replicas joined to it.

use std::io;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::{CLUSTER_TIMEOUT, Freezer, RedisServer, Reply, free_port};

/// A Redis Cluster of N masters (no replicas) on loopback ports, every slot
/// assigned, `cluster_state:ok`.
///
/// Each node gets a client port and an explicit cluster-bus port (`--cluster-port`),
/// both probed free, so nothing depends on `port + 10000` being available. The
/// cluster is formed by `redis-cli --cluster create … --cluster-replicas 0
/// --cluster-yes` (slots split evenly, nodes joined over their bus ports), then
/// polled until every node reports `cluster_state:ok` and knows every other node.
/// Dropping it kills every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Start `masters` nodes (at least 1) and form the cluster.
    ///
    /// # Panics
    /// When the nodes do not start or the cluster does not reach `cluster_state:ok`
    /// within [`CLUSTER_TIMEOUT`]; or as [`RedisServer::start`].
    #[must_use]
    pub fn start(masters: usize) -> RedisCluster {
        assert!(masters >= 1, "a cluster needs at least one master");
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            let node = Self::node();
            nodes.push(node);
        }
        let cluster = RedisCluster { nodes };
        cluster.form();
        cluster
    }

    /// A node with cluster mode on, its bus port probed free.
    fn node() -> RedisServer {
        let bus = free_port().to_string();
        RedisServer::start_with(&[
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus,
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ])
    }

    fn form(&self) {
        let n = self.nodes.len();
        let mut cli = Command::new("redis-cli");
        cli.args(["--cluster", "create"]);
        cli.args(self.nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)));
        cli.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = cli
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli (package redis-tools; .ci/run installs it): {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        until(deadline, "the cluster did not reach cluster_state:ok", || self.nodes.iter().all(|node| knows(node, n)));
    }

    /// Start a replica of node `of`, joined to the cluster by `CLUSTER MEET` and
    /// `CLUSTER REPLICATE`, and wait until it is in sync; its index in
    /// [`nodes`](Self::nodes). Its cluster configuration lives in its directory, so a
    /// [`RedisServer::restart`] brings it back as the same node.
    ///
    /// # Panics
    /// When it does not start, join or sync within [`CLUSTER_TIMEOUT`].
    pub fn add_replica(&mut self, of: usize) -> usize {
        let master = &self.nodes[of];
        let replica = Self::node();
        let myself = |node: &RedisServer| -> (String, String) {
            let Ok(Reply::Bulk(Some(text))) = node.command(&["CLUSTER", "NODES"]) else {
                panic!("CLUSTER NODES on port {}", node.port)
            };
            let text = String::from_utf8_lossy(&text).into_owned();
            let line = text.lines().find(|l| l.contains("myself")).expect("a line for the node itself").to_owned();
            let mut fields = line.split(' ');
            let id = fields.next().unwrap_or_default().to_owned();
            // `ip:port@cport`: the bus port follows the `@`.
            let cport = fields.next().and_then(|a| a.split(['@', ',']).nth(1)).unwrap_or_default().to_owned();
            (id, cport)
        };
        let (master_id, master_bus) = myself(master);
        let port = master.port.to_string();
        // The first sync starts at once, not after the default 5 s wait for more replicas.
        let _ = master.command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        assert_eq!(
            replica.command(&["CLUSTER", "MEET", "127.0.0.1", &port, &master_bus]).expect("meet"),
            Reply::Simple("OK".into())
        );
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        // The master is known once the handshake is over; only then may it be replicated.
        until(deadline, "the new node did not learn its master", || {
            replica.command(&["CLUSTER", "REPLICATE", &master_id]).ok() == Some(Reply::Simple("OK".into()))
        });
        // Every node must know the replica, or none but its master would follow it
        // when it takes the slots over.
        let n = self.nodes.len() + 1;
        until(deadline, "the replica did not sync", || {
            replica.in_sync() && knows(&replica, n) && self.nodes.iter().all(|node| knows(node, n))
        });
        self.nodes.push(replica);
        self.nodes.len() - 1
    }

    /// The nodes, in slot order (node 0 serves the lowest slots), then the replicas
    /// [`add_replica`](Self::add_replica) added.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Mutable access to the nodes (to kill, pause or restart one).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// `redis://127.0.0.1:<port>` of every node (a seed list).
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A handle that freezes and thaws every node at once.
    #[must_use]
    pub fn freezer(&self) -> Freezer {
        Freezer { pids: self.nodes.iter().filter_map(RedisServer::pid).collect(), tree: false }
    }

    /// Sum of `INFO commandstats` calls per command over every node.
    ///
    /// # Errors
    /// As [`RedisServer::command_calls`].
    pub fn command_calls(&self) -> io::Result<std::collections::BTreeMap<String, u64>> {
        let mut out = std::collections::BTreeMap::new();
        for node in &self.nodes {
            for (k, v) in node.command_calls()? {
                *out.entry(k).or_insert(0) += v;
            }
        }
        Ok(out)
    }
}

/// Whether `node` sees the cluster whole (`cluster_state:ok`) with `n` nodes in it.
fn knows(node: &RedisServer, n: usize) -> bool {
    match node.command(&["CLUSTER", "INFO"]) {
        Ok(Reply::Bulk(Some(text))) => {
            let text = String::from_utf8_lossy(&text);
            text.contains("cluster_state:ok") && text.contains(&format!("cluster_known_nodes:{n}\r"))
        }
        _ => false,
    }
}

/// Poll `cond` every 50 ms until it holds; panic with `what` at `deadline`.
fn until(deadline: Instant, what: &str, mut cond: impl FnMut() -> bool) {
    while !cond() {
        assert!(Instant::now() < deadline, "{what} in {CLUSTER_TIMEOUT:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

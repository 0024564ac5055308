//! test-servicebus for the end-to-end tests: a broker of the test's own (in this
//! process, on a free loopback port), queues with the settings a test needs, and
//! what it holds, read without a client.

use std::collections::BTreeMap;
use std::time::Duration;

use test_servicebus::{Broker, BrokerConfig, QueueConfig, SubQueue};

/// A broker with the given queues.
pub fn broker(queues: &[(&str, QueueConfig)]) -> Broker {
    let mut config = BrokerConfig::default();
    for (name, q) in queues {
        config = config.queue(*name, q.clone());
    }
    Broker::start(config).expect("test-servicebus starts")
}

/// A queue with this lock duration (and the Service Bus defaults otherwise).
pub fn lock(d: Duration) -> QueueConfig {
    QueueConfig { lock_duration: d, ..QueueConfig::default() }
}

/// `DRAIN_SOURCE_URL` / `DRAIN_TARGET_URL` for `queue`: the emulator connection string.
pub fn url(broker: &Broker, queue: &str) -> String {
    broker.entity_connection_string(queue)
}

/// Enqueue one message per id (body `body of <id>`).
pub fn feed(broker: &Broker, queue: &str, ids: &[String]) {
    for id in ids {
        broker.send(queue, format!("body of {id}").as_bytes(), Some(id));
    }
}

/// How many messages with each id `queue` (or its dead-letter queue) holds.
pub fn ids(broker: &Broker, queue: &str, sub: SubQueue) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for m in broker.messages(queue, sub) {
        *out.entry(m.message_id.unwrap_or_default()).or_insert(0) += 1;
    }
    out
}

/// (available, locked) in `queue`.
pub fn counts(broker: &Broker, queue: &str) -> (usize, usize) {
    let s = broker.stats(queue).expect("the queue exists");
    (s.active, s.locked)
}

pub use crate::eventually;

/// Enqueue `per` messages in each of `sessions`, interleaved (`a-0, b-0, …, a-1, …`):
/// id `<session>-<n>`.
pub fn feed_sessions(broker: &Broker, queue: &str, sessions: &[&str], per: usize) -> Vec<String> {
    let mut sent = Vec::new();
    for i in 0..per {
        for s in sessions {
            let id = format!("{s}-{i}");
            broker.send_in_session(queue, Some(s), format!("body of {id}").as_bytes(), Some(&id));
            sent.push(id);
        }
    }
    sent
}

/// Dead-letter every message of `queue` with `reason` through a client, as a
/// consumer that gave up on them would.
pub fn dead_letter_all(broker: &Broker, queue: &str, reason: &str) {
    use adapter_servicebus::{AmqpSource, Endpoint, SourceOptions};
    use drain_core::ports::MessageSource;
    let endpoint = Endpoint::parse(&url(broker, queue)).expect("parses").endpoint;
    crate::rabbit::block_on(async {
        let source = AmqpSource::connect(endpoint, SourceOptions::default()).await.expect("connects");
        while counts(broker, queue).0 > 0 {
            for d in source.receive(100, Duration::from_millis(500)).await.expect("receive") {
                source.dead_letter(d.handle, reason, "given up").await.expect("dead-lettered");
            }
        }
        source.close().await.expect("closed");
    });
}

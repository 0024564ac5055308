//! # test-servicebus
//!
//! Test support: an in-memory AMQP 1.0 broker that behaves like Azure Service Bus
//! for what drain and Microsoft's SDKs use, checked with Microsoft's own Python SDK
//! (`azure-servicebus`; see `tests/sdk.rs`). Never a dependency of the `drain` binary.
//!
//! * Plain TCP on loopback, as Microsoft's emulator; SASL ANONYMOUS and PLAIN.
//! * `$cbs` put-token of SAS tokens, signature (HMAC-SHA256 with the configured key)
//!   and expiry checked; a wrong key or an expired token answers 401, and a link to
//!   an entity without a valid token is refused. A link whose token expires while
//!   it is open is detached.
//! * Queues with peek-lock: the lock token as the 16-byte delivery tag and the
//!   `x-opt-lock-token`, `x-opt-locked-until`, `x-opt-sequence-number` and
//!   `x-opt-enqueued-time` annotations; a lock duration per queue; an expired lock
//!   puts the message back with its delivery count + 1, and settling it then fails
//!   with `com.microsoft:message-lock-lost`.
//! * Outcomes: accepted = complete, modified = abandon, released, rejected with
//!   `com.microsoft:dead-letter` = dead-letter to `<queue>/$DeadLetterQueue` with
//!   `DeadLetterReason` / `DeadLetterErrorDescription`; a per-queue maximum delivery
//!   count dead-letters with `MaxDeliveryCountExceeded`. Every unsettled disposition
//!   is answered with a settled one echoing the outcome.
//! * `$management`: `com.microsoft:renew-lock`.
//! * Duplicate detection per queue: an id accepted within the window is acknowledged
//!   and dropped.
//! * Inspection for tests: [`Broker::stats`], [`Broker::messages`],
//!   [`Broker::counters`]; time for tests: [`Broker::advance`]; an outage:
//!   [`Broker::go_down`] / [`Broker::come_up`].
//!
//! ```no_run
//! use std::time::Duration;
//! use test_servicebus::{Broker, BrokerConfig, QueueConfig};
//!
//! let broker = Broker::start(BrokerConfig::default().queue(
//!     "requests",
//!     QueueConfig { lock_duration: Duration::from_secs(5), ..QueueConfig::default() },
//! ))?;
//! let conn = broker.entity_connection_string("requests");
//! // … point a client at `conn` …
//! assert_eq!(broker.stats("requests").map(|s| s.active), Some(0));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! What it does not model is listed in `tests/README.md` of the workspace.
#![forbid(unsafe_code)]

mod config;
mod conn;
mod emulator;
mod inspect;
mod message;
mod queue;
mod rules;
mod sas;
mod server;
mod state;
mod wire;

pub use config::{BrokerConfig, DEFAULT_KEY, DEFAULT_KEY_NAME, check_queue_name, parse_queue_spec};
pub use emulator::read_emulator_config;
pub use inspect::{BrokerCounters, MessageInfo, QueueStats};
pub use queue::{
    DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON, LockLost, LockToken, MAX_DELIVERY_COUNT_EXCEEDED, QueueConfig,
    QueueCounters, SubQueue, TTL_EXPIRED,
};
pub use rules::{CorrelationFilter, Filter, PropertyValue, Rule, SubscriptionConfig, TopicConfig, sql_filter};
pub use server::Broker;

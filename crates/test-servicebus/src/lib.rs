//! # test-servicebus
//!
//! Test support: an in-memory AMQP 1.0 broker that behaves like Azure Service Bus
//! for what drain and Microsoft's SDKs use, checked with Microsoft's own Python SDK
//! (`azure-servicebus`; see `tests/sdk.rs`). Never a dependency of the `drain` binary.
//!
//! Each Service Bus feature is **modelled** (as Service Bus does it, checked by the
//! SDK where the SDK exposes it), **refused** (a clear error naming what is not
//! modelled, never a silent wrong answer) or **absent** (not there; a client using it
//! fails the way it fails on a namespace without the entity or setting):
//!
//! | feature | here |
//! |---|---|
//! | plain TCP on loopback, SASL ANONYMOUS and PLAIN | modelled |
//! | TLS | absent (the emulator has none either) |
//! | `$cbs` put-token of SAS tokens (signature, expiry; 401 naming why), links refused without a token, detached when it expires | modelled |
//! | Entra ID tokens, per-entity policies, claims (Send / Listen / Manage all granted) | absent |
//! | queues, `<entity>/$DeadLetterQueue`, names case-insensitive | modelled |
//! | peek-lock: lock token as the 16-byte delivery tag and `x-opt-lock-token`, `x-opt-locked-until`, `x-opt-sequence-number`, `x-opt-enqueued-time`; lock duration; expiry counting a delivery | modelled |
//! | receive-and-delete (a pre-settled link) | modelled |
//! | complete, abandon, release, dead-letter (reason, description), maximum delivery count (`MaxDeliveryCountExceeded`) | modelled |
//! | `com.microsoft:renew-lock`, `update-disposition` | modelled |
//! | duplicate detection by message id within a window (queues and topics) | modelled |
//! | sessions: named or next available (`com.microsoft:session-filter`, answered with the id and `com.microsoft:locked-until-utc`), FIFO within a session, one holder at a time, the session lock's expiry (the link detached with `com.microsoft:session-lock-lost`) and `renew-session-lock`, `get-session-state` / `set-session-state` | modelled |
//! | a next-available receiver when no session has a message | refused at once with `com.microsoft:timeout` (Service Bus waits up to the server timeout first) |
//! | a plain receiver on a session entity, a session receiver on a plain one, a message without a session id to a session entity | refused with Service Bus's errors (`amqp:not-allowed`) |
//! | `get-message-sessions` (list sessions) | refused (501 `amqp:not-implemented`) |
//! | topics, subscriptions `<topic>/Subscriptions/<name>` and their dead-letter queues; a send copied to each subscription with a matching rule | modelled |
//! | rules: correlation filters (system and application properties), SQL `1=1` (the `$Default` true filter) and `1=0` | modelled |
//! | any other SQL filter, rule actions | refused when the broker starts, naming the subscription and rule |
//! | `add-rule` / `remove-rule` / `enumerate-rules` at run time | refused (501) |
//! | scheduled messages (`x-opt-scheduled-enqueue-time`, `schedule-message`, `cancel-scheduled-message`) | modelled |
//! | time to live (header `ttl`, the entity's default; the shorter wins), dead-lettered with `TTLExpiredException` when the entity says so, else dropped | modelled |
//! | defer (`modified` with undeliverable-here), `receive-by-sequence-number` in peek-lock | modelled |
//! | `receive-by-sequence-number` in receive-and-delete | refused (501) |
//! | `peek-message` | modelled |
//! | any other `$management` operation | refused (501, counted in [`BrokerCounters`]) |
//! | auto-forwarding (`ForwardTo`, `ForwardDeadLetteredMessagesTo`), the transfer dead-letter queue | refused in `Config.json`; absent on the wire |
//! | partitions and partition keys, quotas, entity size, throttling, transactions, durability across a restart | absent |
//! | Microsoft's emulator `Config.json` ([`read_emulator_config`]; the binary's `--config`) | modelled: the properties above; any other property refused naming the entity and property; `Logging` ignored |
//!
//! For tests: [`Broker::stats`], [`Broker::messages`], [`Broker::counters`]; time:
//! [`Broker::advance`]; an outage: [`Broker::go_down`] / [`Broker::come_up`].
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

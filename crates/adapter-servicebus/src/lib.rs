#![doc = include_str!("../README.md")]
//!
//! ## The types
//!
//! * [`Endpoint::parse`] reads a Service Bus connection string or an `amqp://` /
//!   `amqps://` URL; secrets never appear in errors, warnings or `Display`.
//! * [`AmqpSource`] is a peek-lock receiver: credit (prefetch) control, `receive`
//!   that returns what arrived by `max_wait`, settlement that runs while another
//!   receive waits, reconnect with jittered [`Backoff`], clean detach on
//!   [`AmqpSource::close`]. On Service Bus it renews the lock of every delivery it
//!   hands out until the delivery is settled, up to
//!   [`SourceOptions::max_lock_renewal`] (5 minutes), and reports each outcome as a
//!   [`LockEvent`] ([`AmqpSource::lock_events`]; failures are also logged as warnings).
//!   Closing it releases every delivery it holds and has not settled, so they come
//!   back at once.
//! * [`SessionSource`] drains a session-enabled queue or subscription: next-available
//!   or named sessions, up to [`SessionOptions::max_sessions`] at once, one session
//!   per receive in the broker's order (the session id is each message's
//!   `group_id`), session locks renewed and a lost one reported as a
//!   [`SessionEvent`], idle sessions given back; session state through
//!   [`AmqpSource::session_state`] / [`AmqpSource::set_session_state`] of
//!   [`SessionSource::session`].
//! * [`AmqpSubmitter`] sends to the target queue (or Service Bus topic) and reports
//!   `Ok` only on the broker's `accepted`.
//! * [`LockRenewal`] renews one delivery's lock by hand, on any source, up to a maximum
//!   duration (for a source whose automatic renewal is off).
//!
//! In the `drain` binary the two are handed to drain-core's `run_tick` as
//! `TickPorts { source: &source, target: &target, .. }`, which adds the per-message
//! claim and bounded concurrency.
//!
//! ## Profiles
//!
//! | | [`Profile::ServiceBus`] | [`Profile::Generic`] (RabbitMQ) |
//! |---|---|---|
//! | transport | TLS on 5671 (`UseDevelopmentEmulator=true`: plain AMQP on the endpoint's port, default 5672) | `amqp://` plain 5672, `amqps://` TLS 5671 |
//! | authentication | SASL ANONYMOUS + CBS `put-token` of a SAS token (one hour, [`SourceOptions::token_lifetime`]), refreshed 5 min before it expires on every connection (source and submitter); a refused refresh is retried, and the connection replaced once the token expired | SASL PLAIN (user, password) or ANONYMOUS |
//! | queue address | the entity path | `/amq/queue/<q>` (other forms re-declare the queue) |
//! | receive | peek-lock, `rcv-settle-mode first`, manual credit | same |
//! | complete | `accepted` | `accepted` |
//! | abandon | `modified{delivery-failed}` | `released` (`modified` ends the session on RabbitMQ) |
//! | dead-letter | `rejected` with `com.microsoft:dead-letter` and `DeadLetterReason` / `DeadLetterErrorDescription` | `rejected`; the queue's dead-letter exchange routes it, the reason is not kept |
//! | lock | expires after the queue's lock duration; [`renew_lock`](drain_core::ports::MessageSource::renew_lock) via `$management` `com.microsoft:renew-lock`; `capabilities().lock_renewal = true`; renewed automatically from `receive` until settled, up to `max_lock_renewal`; settling once `x-opt-locked-until` (or the last renewal) passed is `LockLost` without sending it (settle mode first gets no answer, and the broker redelivers) | held until settled or the link ends; `renew_lock` is `Unsupported`, `lock_renewal = false`; nothing is renewed |
//! | dead-letter queue | `<queue>/$deadletterqueue` | a queue of its own |
//! | entities | queues, topics (target), subscriptions `<topic>/Subscriptions/<name>` (source), their `$DeadLetterQueue`s, session-enabled queues and subscriptions ([`SessionSource`]) | queues |
//! | credentials | `SharedAccessKeyName` + `SharedAccessKey` (tokens signed here), or `SharedAccessSignature` (a ready-made token, used until its expiry) | user and password, or none |
//!
//! Neither profile uses link `drain` (it ends the session on RabbitMQ when credit
//! is outstanding on an empty queue) or a closing link detach (RabbitMQ answers
//! with a non-closing one): credit windows, receive timeouts and `detach`.
//!
//! ## Errors
//!
//! Driver errors become [`PortError`](drain_core::PortError)s at the boundary:
//! refused/reset connections and timeouts are temporary (`Connection`, `Timeout`);
//! SASL and CBS failures are `Auth`; `amqp:unauthorized-access` is `Permission`;
//! `amqp:not-found` is `NotFound`; settling a delivery that is no longer held (settled
//! already, or its link was lost) is `LockLost`. Messages start with the redacted
//! endpoint and never contain a password, key or token.
#![forbid(unsafe_code)]

mod batch;
mod connect;
mod convert;
mod endpoint;
mod error;
mod profile;
mod renewal;
mod sas;
mod session;
mod source;
mod submit;
mod token_refresh;

pub use drain_core::Backoff;
pub use drain_runtime::redact::Secret;
pub use endpoint::{AMQP_PORT, AMQPS_PORT, Credentials, Endpoint, ParsedEndpoint, Profile};
pub use profile::{DEAD_LETTER_CONDITION, DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON};
pub use renewal::{LockEvent, LockRenewal, LockToken, RenewEvent, RenewSchedule};
pub use sas::sas_token;
pub use session::{ReleaseReason, SessionEvent, SessionEventKind, SessionFilter, SessionOptions, SessionSource};
pub use source::{AmqpSource, SourceOptions};
pub use submit::{AmqpSubmitter, SubmitterOptions};

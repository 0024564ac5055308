//! The registry: every setting the binary reads, declared once, with its rule
//! (default, floor, ceiling) and the default as shown.
//!
//! The rules' behaviour (fallbacks, clamping, the switch grammar) is drain-core's
//! `settings` (the rules and the switch grammar); the variables, their defaults and their ranges are
//! the binary's, and live only here. `docs/flags.md` is rendered from this table (`drain config --flags-markdown`,
//! checked by `cargo xtask flags`), and `drain config` prints the effective value
//! of each entry with its source.

use super::settings::IntRule;

/// How a setting's raw value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// off / shadow / on, with the given default.
    Switch(drain_core::Switch),
    /// A whole number with a rule; `unit` is shown in docs.
    Int(IntRule, &'static str),
    /// A URL or connection string; may carry a secret.
    Url,
    /// Free text validated by its own rule.
    Text,
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setting {
    /// Environment variable (and config-file key).
    pub(crate) name: &'static str,
    /// How it is parsed.
    pub(crate) kind: Kind,
    /// The default as shown to humans.
    pub(crate) default: &'static str,
    /// Who decides about it.
    pub(crate) owner: &'static str,
    /// What it does.
    pub(crate) description: &'static str,
    /// Its value can contain a secret and is always redacted in output.
    pub(crate) secret: bool,
}

use drain_core::Switch::{Off, On};

const fn switch(
    name: &'static str,
    default: drain_core::Switch,
    owner: &'static str,
    description: &'static str,
) -> Setting {
    let shown = match default {
        Off => "off",
        On => "on",
        drain_core::Switch::Shadow => "shadow",
    };
    Setting { name, kind: Kind::Switch(default), default: shown, owner, description, secret: false }
}

/// An integer rule: `default`, floor `min`, ceiling `max`.
const fn rule(default: u64, min: u64, max: u64) -> IntRule {
    IntRule { default, min, max }
}

const fn int(
    name: &'static str,
    rule: IntRule,
    unit: &'static str,
    default: &'static str,
    owner: &'static str,
    description: &'static str,
) -> Setting {
    Setting { name, kind: Kind::Int(rule, unit), default, owner, description, secret: false }
}

const fn text(name: &'static str, default: &'static str, owner: &'static str, description: &'static str) -> Setting {
    Setting { name, kind: Kind::Text, default, owner, description, secret: false }
}

const fn url(name: &'static str, owner: &'static str, description: &'static str) -> Setting {
    Setting { name, kind: Kind::Url, default: "unset", owner, description, secret: true }
}

const QUEUE: &str = "queue-drain";
const OWNERS: &str = "owner-admission";
const PLATFORM: &str = "platform";

/// Every setting, in documentation order.
pub(crate) const SETTINGS: &[Setting] = &[
    switch(
        "SERVICEBUS_DRAIN_SINGLEFLIGHT",
        Off,
        QUEUE,
        "Single-flight lease per queue for beat ticks: an overlapping tick skips with `{\"skipped\":\"locked\"}` instead of racing. Off never touches the store.",
    ),
    int(
        "SERVICEBUS_DRAIN_LOCK_TTL_SECONDS",
        rule(120, 10, 86_400),
        "s",
        "120",
        QUEUE,
        "Lease TTL, the backstop that frees a lease whose holder crashed. Must exceed a normal drain. Below 10 -> 10, above 86400 -> 86400, unparsable/empty/negative -> 120, each with a warning.",
    ),
    switch(
        "SERVICEBUS_DRAIN_LEASE_RENEW",
        On,
        QUEUE,
        "Renew the lease every TTL/3 while the drain runs; a lost lease cancels the drain cooperatively.",
    ),
    switch(
        "SERVICEBUS_ATOMIC_CLAIM",
        On,
        QUEUE,
        "Per-message claim before submit so a message is submitted once across overlapping ticks, resident consumers and redeliveries. Fails closed: a store error abandons, never submits.",
    ),
    int(
        "SERVICEBUS_ATOMIC_CLAIM_TTL_SECONDS",
        rule(86_400, 60, 30 * 86_400),
        "s",
        "86400",
        QUEUE,
        "How long a `done` claim suppresses duplicates (the dedup window).",
    ),
    int(
        "SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS",
        rule(300, 10, 86_400),
        "s",
        "300",
        QUEUE,
        "How long a `pending` claim lives before a redelivery may take over from a crashed submitter.",
    ),
    int(
        "SERVICEBUS_DRAIN_CONCURRENCY",
        rule(1, 1, 256),
        "",
        "1",
        QUEUE,
        "Messages processed concurrently within one tick, at least (the adaptive window never shrinks below it); a tick that holds the single-flight lease uses this times DRAIN_WORKER_CONCURRENCY (the workers the lease keeps from racing).",
    ),
    int(
        "SERVICEBUS_DRAIN_BATCH",
        rule(32, 1, 1_000),
        "",
        "32",
        QUEUE,
        "Messages requested per receive; with the adaptive window, its start.",
    ),
    int(
        "SERVICEBUS_DRAIN_MAX_IN_FLIGHT",
        rule(512, 0, 10_000),
        "",
        "512",
        QUEUE,
        "The most messages in flight to the target within one tick: the window grows up to this while the target's throughput rises with it and halves when a submit fails (each receive asks for the window); a drain holds at most three windows of messages in memory. 0: a fixed window, SERVICEBUS_DRAIN_CONCURRENCY submits at once and SERVICEBUS_DRAIN_BATCH per receive.",
    ),
    int(
        "SERVICEBUS_DRAIN_MAX_WAIT_MS",
        rule(1_000, 1, 60_000),
        "ms",
        "1000",
        QUEUE,
        "Longest wait of one receive; a receive returns what arrived by then.",
    ),
    int(
        "SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS",
        rule(300, 0, 86_400),
        "s",
        "300",
        QUEUE,
        "Service Bus: a received message's lock is renewed automatically (through `$management`) until it is settled or for this long; `0` turns automatic renewal off. A failed renewal is logged as a warning. RabbitMQ has no lock renewal; ignored there.",
    ),
    switch(
        "PROJECTION_DRAIN_CLAIM_AWARE",
        On,
        OWNERS,
        "Claim-aware owner admission: peek the owner's claim before launch and back off 5-15 s after a lost claim race. `off` restores immediate FIFO re-entry and no peek.",
    ),
    switch(
        "PROJECTION_DRAIN_RELEASE_WAKE",
        On,
        OWNERS,
        "Release wake-up for claim-aware owner drains on Redis and PostgreSQL: an instance that finds an owner's claim held registers as a waiter, and the holder's release notifies one waiter (Redis pub/sub on `<prefix>:wake:<instance>`; PostgreSQL `NOTIFY` on the instance's channel), which retries at once instead of after the backoff window (kept as the backstop). Acts only with `PROJECTION_DRAIN_CLAIM_AWARE=on`. `shadow` does the store's side and counts the wakes without acting on them.",
    ),
    switch(
        "PROJECTION_DRAIN_SKIP_SERVED",
        On,
        OWNERS,
        "Skip served requests: a turn that drained its owner leaves a drain stamp beside the owner's claim (when it took the claim, on the store's clock), the peek admission already makes reads it, and a request made before it is dropped instead of running a turn that would find nothing (`drain_owner_skipped_total{reason=\"served\"}`). A request made after the mark is always served. Acts only with `PROJECTION_DRAIN_CLAIM_AWARE=on`. `off` restores today's peeks and turns exactly; `shadow` reads the marks and counts without dropping.",
    ),
    int(
        "PROJECTION_DRAIN_BACKOFF_MIN_SECONDS",
        rule(5, 1, 3_600),
        "s",
        "5",
        OWNERS,
        "Lower end of the uniform claim-busy jitter window.",
    ),
    int(
        "PROJECTION_DRAIN_BACKOFF_MAX_SECONDS",
        rule(15, 1, 3_600),
        "s",
        "15",
        OWNERS,
        "Upper end of the uniform claim-busy jitter window (swapped with the minimum, with a warning, if smaller).",
    ),
    int(
        "PROJECTION_DRAIN_MAX_RETRY_TIMERS",
        rule(1_024, 1, 1_000_000),
        "",
        "1024",
        OWNERS,
        "Cap on pending retry timers; the overflow is handed back to the next serving pass, never dropped.",
    ),
    int(
        "DRAIN_BEAT_INTERVAL_SECONDS",
        rule(10, 1, 86_400),
        "s",
        "10",
        PLATFORM,
        "Beat tick interval: each beat waits the interval times a random factor in [0.5, 1.5], so processes started together do not tick in lockstep (one process must not keep meeting the others' leases).",
    ),
    int(
        "DRAIN_WORKER_CONCURRENCY",
        rule(4, 1, 256),
        "",
        "4",
        PLATFORM,
        "Ticks that may run at once (the overlap the lease removes).",
    ),
    int(
        "DRAIN_SHUTDOWN_GRACE_SECONDS",
        rule(30, 0, 3_600),
        "s",
        "30",
        PLATFORM,
        "On SIGINT/SIGTERM, how long running ticks may finish before they are abandoned.",
    ),
    url(
        "DRAIN_STORE_URL",
        PLATFORM,
        "Where leases and claims live, chosen by the scheme: `redis://` or `rediss://` (Redis, with ACL user and password), `redis+sentinel://user:password@sentinel:26379[,sentinel2:26379]/<primary name>` (the primary Redis Sentinel names, followed across a failover), `postgres://` or `postgresql://` (PostgreSQL 15+, `user:password@host:port/database`; drain's schema `drain` is created on first use when the role may, see docs/operations.md). A URL that does not parse or an unknown scheme is fatal (exit 2). Unset (and no `DRAIN_REDIS_URL`): the embedded in-memory store (one process only).",
    ),
    url(
        "DRAIN_REDIS_URL",
        PLATFORM,
        "`redis://`, `rediss://` or `redis+sentinel://`, with ACL user and password: the older name of `DRAIN_STORE_URL` for Redis, still read. Setting both is fatal (exit 2). Unset: see `DRAIN_STORE_URL`.",
    ),
    switch("DRAIN_REDIS_CLUSTER", Off, PLATFORM, "Use Redis Cluster (every key carries a hash tag)."),
    text(
        "DRAIN_REDIS_CA_FILE",
        "unset",
        PLATFORM,
        "For `rediss://`: a PEM file of the CA certificate(s) to trust instead of the system roots (a private CA). Unset: the system roots.",
    ),
    url(
        "DRAIN_SOURCE_URL",
        QUEUE,
        "Queue drained: `amqp[s]://user:pass@host:port/queue` (AMQP 1.0, e.g. RabbitMQ) or a Service Bus connection string with `EntityPath` (TLS on 5671; with `UseDevelopmentEmulator=true` plain AMQP on the endpoint's port, default 5672, as Microsoft's emulator). Unset: an embedded demo queue fed by a synthetic producer.",
    ),
    url(
        "DRAIN_TARGET_URL",
        QUEUE,
        "Where drained messages are resubmitted (same forms; on Service Bus a queue or a topic). Unset: an embedded target.",
    ),
    text(
        "DRAIN_SOURCE_SESSIONS",
        "off",
        QUEUE,
        "Service Bus session-enabled queue or subscription: `any` takes whichever sessions have messages (next available), a comma-separated list of session ids takes those; `off`: a plain receiver. Each session is held by one receiver at a time (the broker's session lock); its messages are drained in order, one tick and one message at a time.",
    ),
    int(
        "DRAIN_SOURCE_MAX_SESSIONS",
        rule(1, 1, 64),
        "",
        "1",
        QUEUE,
        "With DRAIN_SOURCE_SESSIONS: how many sessions this process holds at once (each on its own connection).",
    ),
    int(
        "DRAIN_SOURCE_SESSION_IDLE_SECONDS",
        rule(10, 1, 3_600),
        "s",
        "10",
        QUEUE,
        "With DRAIN_SOURCE_SESSIONS=any: a session whose receives came back empty this long is given back and the next one taken.",
    ),
    text(
        "DRAIN_SOURCE_DEAD_LETTER_PROPERTIES",
        "keep",
        QUEUE,
        "`keep` or `drop`: what a re-drive from a `$DeadLetterQueue` does with Service Bus's `DeadLetterReason`, `DeadLetterErrorDescription` and `DeadLetterSource` application properties. `keep` carries them into the target, so the re-driven message still says why it was dead-lettered; `drop` takes them out.",
    ),
    text(
        "DRAIN_TARGET_FENCE_PROPERTY",
        "unset",
        QUEUE,
        "When set (1-128 printable ASCII characters), every message submitted under a lease carries the lease's fencing number as this application property (an AMQP `long`), so the target's consumer can reject writes from a stale holder. Unset: messages go out as they came in.",
    ),
    text(
        "DRAIN_KEY_PREFIX",
        "drain",
        PLATFORM,
        "Key namespace of the store (tenant isolation: Redis keys, PostgreSQL rows): 1-64 of `A-Z a-z 0-9 - _ . :`. Anything else is fatal (exit 2, one line naming it): falling back to the shared `drain` would silently merge tenants.",
    ),
    text("DRAIN_INSTANCE_ID", "host-pid", PLATFORM, "Holder identity written into lease and claim tokens."),
    text(
        "DRAIN_METRICS_ADDR",
        "127.0.0.1:9464",
        PLATFORM,
        "Prometheus endpoint `host:port`; `off` disables it. Loopback by default.",
    ),
    text("DRAIN_LOG", "info", PLATFORM, "tracing filter, e.g. `info,drain=debug`."),
    text("DRAIN_LOG_FORMAT", "text", PLATFORM, "`text` or `json` (JSON lines)."),
];

/// The registry entry for `name`.
pub(crate) fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_documented() {
        let mut names: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SETTINGS.len(), "duplicate setting name");
        for s in SETTINGS {
            assert!(!s.description.is_empty() && !s.owner.is_empty(), "{}", s.name);
            if let Kind::Int(rule, _) = s.kind {
                assert_eq!(s.default, rule.default.to_string(), "{} default must match its rule", s.name);
            }
        }
        assert!(setting("DRAIN_REDIS_URL").is_some_and(|s| s.secret));
        assert!(setting("DRAIN_STORE_URL").is_some_and(|s| s.secret));
    }
}

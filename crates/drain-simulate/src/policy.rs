//! The policies compared: the four of the report, and the candidates of the search
//! for a policy that keeps the contention cut without the latency cost.

use drain_core::Switch;

/// How a release reaches instances that deferred the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// It does not: deferred instances wait out their 5–15 s timer.
    Never,
    /// The release pops the oldest waiting instance and notifies it (like Redisson's
    /// unlock publishing to the lock's channel, but to one waiter): the scheduler's
    /// `on_release` queues the owner again, peeked first.
    One,
    /// The release notifies every waiting instance (plain pub/sub broadcast).
    All,
    /// No notification; instead the deferring instance sets its own wake-up at the
    /// holder's remaining TTL (from the peek's `PTTL`), with turns holding a tight,
    /// renewed claim TTL of `ttl_ms`.
    AtExpiry {
        /// The claim TTL turns take (renewed every TTL/3).
        ttl_ms: u64,
    },
}

/// Which machinery runs the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Every instance runs drain-core's real `Scheduler` with these settings.
    Scheduler {
        /// `SchedulerConfig::claim_aware`.
        claim_aware: Switch,
        /// How releases reach deferred instances (`SchedulerConfig::release_wake` is
        /// On for anything but [`Wake::Never`]).
        wake: Wake,
        /// The claim-busy window in milliseconds; `None`: the scenario's.
        backoff_ms: Option<(u64, u64)>,
        /// `SchedulerConfig::skip_served`: turns publish drain stamps and peeks read
        /// them, dropping the requests a drain already served.
        skip_served: Switch,
    },
    /// A model, not drain-core code: an omniscient dispatcher that knows every claim
    /// and backlog, so it never peeks, never loses a claim race and never runs an
    /// empty turn. The lower bound of waste and latency for the same workload.
    Oracle,
}

/// One policy the fleet runs: [`REPORTED`] or one of [`candidates`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Key in the JSON report.
    pub(crate) key: &'static str,
    /// One line for humans.
    pub(crate) label: &'static str,
    /// How it runs.
    pub(crate) kind: Kind,
}

impl Policy {
    /// Its key in the report (`legacy`, `claim_aware`, `oracle`, …).
    pub fn key(&self) -> &'static str {
        self.key
    }
}

/// The legacy behaviour: no peek, immediate re-entry after a lost race.
pub(crate) const LEGACY: Policy = Policy {
    key: "legacy",
    label: "PROJECTION_DRAIN_CLAIM_AWARE=off: no peek, immediate FIFO re-entry",
    kind: Kind::Scheduler { claim_aware: Switch::Off, wake: Wake::Never, backoff_ms: None, skip_served: Switch::Off },
};

/// The first claim-aware policy: peek before initial launches, 5–15 s backoff.
pub(crate) const CLAIM_AWARE: Policy = Policy {
    key: "claim_aware",
    label: "claim-aware (seed): peek, 5-15 s jittered backoff",
    kind: Kind::Scheduler { claim_aware: Switch::On, wake: Wake::Never, backoff_ms: None, skip_served: Switch::Off },
};

/// Claim-aware plus release wake-up of one waiter: the part-2 policy.
pub(crate) const CLAIM_AWARE_WAKE: Policy = Policy {
    key: "claim_aware_wake",
    label: "claim-aware + release wakes one deferred instance (PROJECTION_DRAIN_RELEASE_WAKE=on)",
    kind: Kind::Scheduler { claim_aware: Switch::On, wake: Wake::One, backoff_ms: None, skip_served: Switch::Off },
};

/// Claim-aware, the release wake-up, and served requests skipped: turns publish
/// drain stamps, and a peek that shows a drain which began after the request drops it.
pub(crate) const SKIP_SERVED: Policy = Policy {
    key: "skip_served",
    label: "claim-aware + wake-up + requests a later drain served are skipped (PROJECTION_DRAIN_SKIP_SERVED=on)",
    kind: Kind::Scheduler { claim_aware: Switch::On, wake: Wake::One, backoff_ms: None, skip_served: Switch::On },
};

/// The omniscient model.
pub(crate) const ORACLE: Policy =
    Policy { key: "oracle", label: "oracle (a model): knows every claim, never wastes a turn", kind: Kind::Oracle };

/// The policies of the report, in column order.
pub const REPORTED: [Policy; 5] = [LEGACY, CLAIM_AWARE, CLAIM_AWARE_WAKE, SKIP_SERVED, ORACLE];

/// The search for a low-latency claim-aware policy, legacy and the oracle included:
/// the first claim-aware policy, shorter windows, a backoff shaped by the holder's
/// remaining TTL, release notifications to all or one waiter, and served requests
/// skipped.
pub fn candidates() -> Vec<Policy> {
    let window = |key, label, lo, hi| Policy {
        key,
        label,
        kind: Kind::Scheduler {
            claim_aware: Switch::On,
            wake: Wake::Never,
            backoff_ms: Some((lo, hi)),
            skip_served: Switch::Off,
        },
    };
    let wake = |key, label, wake| Policy {
        key,
        label,
        kind: Kind::Scheduler { claim_aware: Switch::On, wake, backoff_ms: None, skip_served: Switch::Off },
    };
    vec![
        LEGACY,
        CLAIM_AWARE,
        window("window_1_3s", "claim-aware, backoff 1-3 s", 1000, 3000),
        window("window_200_600ms", "claim-aware, backoff 0.2-0.6 s", 200, 600),
        wake(
            "ttl_shaped",
            "claim-aware, wake at the holder's remaining TTL (3 s TTL, renewed)",
            Wake::AtExpiry { ttl_ms: 3000 },
        ),
        wake("wake_all", "claim-aware, release notifies every waiter", Wake::All),
        CLAIM_AWARE_WAKE,
        SKIP_SERVED,
        ORACLE,
    ]
}

//! Scenario presets: the fleet, its workload, and the beat ticks beside it.
//!
//! Every number the simulation uses is here, so a run is described by a preset name,
//! its overrides and a seed.

use std::fmt;

/// One simulated situation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scenario {
    /// Preset name (`default`, `seed-fleet`, `large`).
    pub(crate) name: &'static str,
    /// Instances, each with its own scheduler.
    pub(crate) instances: usize,
    /// Owners.
    pub(crate) owners: usize,
    /// Mean item arrival rate over the whole run, bursts included (items per second).
    pub(crate) rate_per_s: f64,
    /// Arrivals stop after this many seconds; the run then drains.
    pub(crate) duration_s: u64,
    /// Each arrival is requested of this many distinct instances.
    pub(crate) requested_of: usize,
    /// Owner popularity: owner of rank `r` (1-based) has weight `1 / r^zipf_s`.
    pub(crate) zipf_s: f64,
    /// Items an arrival brings to its owner, on average (1 + geometric): several
    /// items make multi-turn drains (productive continuations).
    pub(crate) items_per_arrival: f64,
    /// Rate bursts: every `burst_every_s` seconds the rate is `burst_factor` times the
    /// base rate for `burst_len_s` seconds.
    pub(crate) burst_every_s: u64,
    /// Length of one burst in seconds.
    pub(crate) burst_len_s: u64,
    /// Rate multiplier during a burst.
    pub(crate) burst_factor: f64,
    /// Mean delay (exponential) between an arrival and its request reaching an instance.
    pub(crate) delivery_mean_ms: f64,
    /// Each instance's request is repeated this many more times (a fleet re-requesting
    /// the same owners), `rerequest_gap_ms` apart on average.
    pub(crate) rerequests: u32,
    /// Mean gap between repeated requests (exponential).
    pub(crate) rerequest_gap_ms: f64,
    /// Turn slots per instance (`SchedulerConfig::workers`).
    pub(crate) workers: usize,
    /// Items one turn works at most before it reports `more`.
    pub(crate) per_turn: usize,
    /// Per-item work: log-normal with this median...
    pub(crate) service_median_ms: f64,
    /// ...and this shape (sigma of the underlying normal)...
    pub(crate) service_sigma: f64,
    /// ...plus, with this probability, a Pareto tail (alpha 1.5) from `tail_min_ms`.
    pub(crate) tail_p: f64,
    /// Scale of the Pareto tail.
    pub(crate) tail_min_ms: f64,
    /// Largest single item, in milliseconds (caps the Pareto tail).
    pub(crate) service_cap_ms: u32,
    /// One claim-store round trip (peek, acquire, release), in milliseconds.
    pub(crate) rtt_ms: u64,
    /// What a lost claim race costs the slot after the acquire (log line, FIFO
    /// re-entry), in milliseconds: the testkit's `BacklogWork` uses 10 ms.
    pub(crate) lost_race_ms: u64,
    /// Latency of a release notification (pub/sub) to the woken instance.
    pub(crate) notify_ms: u64,
    /// Claim-busy backoff window, seconds (`PROJECTION_DRAIN_BACKOFF_*`).
    pub(crate) backoff_s: (u64, u64),
    /// `PROJECTION_DRAIN_MAX_RETRY_TIMERS`.
    pub(crate) max_retry_timers: usize,
    /// `drain owners`' workload instead of the arrival stream (`None`: arrivals).
    pub(crate) seeded: Option<Seeded>,
    /// The beat-tick side.
    pub(crate) ticks: TickScenario,
}

/// The workload of `drain owners` (and of its benchmark on real stores): every item
/// is in its owner's backlog at the start, and every `pass_ms` each instance requests,
/// in an order of its own, every owner that still has items (waiting or in a turn);
/// an instance whose pass finds none stops (running turns finish), as the process
/// does. The arrival stream's settings (rate, bursts, deliveries) are not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seeded {
    /// Items, round-robin over the owners (`drain owners --seed`).
    pub(crate) items: u32,
    /// Milliseconds between two passes (`drain owners --pass-ms`).
    pub(crate) pass_ms: u64,
}

/// The beat ticks of one queue: the overlap the single-flight lease removes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TickScenario {
    /// `DRAIN_BEAT_INTERVAL_SECONDS`.
    pub(crate) beat_s: u64,
    /// `DRAIN_WORKER_CONCURRENCY`: ticks that may run at once.
    pub(crate) worker_concurrency: usize,
    /// Steady message arrival rate on the request queue (per second, Poisson).
    pub(crate) message_rate: f64,
    /// A burst: this many messages land at once at `burst_at_s`...
    pub(crate) burst_messages: u32,
    /// ...at this second...
    pub(crate) burst_at_s: u64,
    /// ...and for this many seconds from then, submits are slow.
    pub(crate) slow_for_s: u64,
    /// A normal submit, in milliseconds.
    pub(crate) submit_ms: u64,
    /// A slow submit (during the burst window), in milliseconds.
    pub(crate) slow_submit_ms: u64,
    /// `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`.
    pub(crate) lease_ttl_s: u64,
    /// `SERVICEBUS_DRAIN_BATCH`.
    pub(crate) batch: usize,
    /// `SERVICEBUS_DRAIN_CONCURRENCY`.
    pub(crate) drain_concurrency: usize,
    /// The broker's message lock (peek-lock) duration, in seconds.
    pub(crate) lock_s: u64,
}

/// The preset names, for `--help` and errors.
pub(crate) const PRESETS: [&str; 4] = ["default", "seed-fleet", "large", "owners"];

/// An unknown preset name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownPreset(pub(crate) String);

impl fmt::Display for UnknownPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown scenario `{}`; one of: {}", self.0, PRESETS.join(", "))
    }
}

impl Scenario {
    /// The preset called `name`.
    pub(crate) fn preset(name: &str) -> Result<Scenario, UnknownPreset> {
        match name {
            "default" => Ok(Scenario::default_preset()),
            "seed-fleet" => Ok(Scenario::seed_fleet()),
            "large" => Ok(Scenario::large()),
            "owners" => Ok(Scenario::owners()),
            other => Err(UnknownPreset(other.to_owned())),
        }
    }

    /// 8 instances, 200 owners, 40 items/s, each arrival requested of 3 instances,
    /// ten minutes; beat ticks with a mild burst.
    fn default_preset() -> Scenario {
        Scenario {
            name: "default",
            instances: 8,
            owners: 200,
            rate_per_s: 40.0,
            duration_s: 600,
            requested_of: 3,
            zipf_s: 1.0,
            items_per_arrival: 2.0,
            burst_every_s: 60,
            burst_len_s: 5,
            burst_factor: 4.0,
            delivery_mean_ms: 100.0,
            rerequests: 0,
            rerequest_gap_ms: 1000.0,
            workers: 4,
            per_turn: 10,
            service_median_ms: 10.0,
            service_sigma: 1.0,
            tail_p: 0.01,
            tail_min_ms: 200.0,
            service_cap_ms: 10_000,
            rtt_ms: 1,
            lost_race_ms: 10,
            notify_ms: 1,
            backoff_s: (5, 15),
            max_retry_timers: 1024,
            seeded: None,
            ticks: TickScenario {
                beat_s: 10,
                worker_concurrency: 4,
                message_rate: 1.0,
                burst_messages: 200,
                burst_at_s: 120,
                slow_for_s: 60,
                submit_ms: 20,
                slow_submit_ms: 400,
                lease_ttl_s: 120,
                batch: 32,
                drain_concurrency: 1,
                lock_s: 60,
            },
        }
    }

    /// The seeds' situation: beat every 10 s on 4 workers with a burst of slow
    /// submits; a fleet of 6 re-requesting a few hot owners (every arrival is
    /// requested of every instance, and again twice).
    fn seed_fleet() -> Scenario {
        let base = Scenario::default_preset();
        Scenario {
            name: "seed-fleet",
            instances: 6,
            owners: 24,
            rate_per_s: 20.0,
            requested_of: 6,
            zipf_s: 1.2,
            rerequests: 2,
            rerequest_gap_ms: 2000.0,
            ticks: TickScenario {
                message_rate: 2.0,
                burst_messages: 600,
                burst_at_s: 60,
                slow_for_s: 180,
                slow_submit_ms: 500,
                ..base.ticks.clone()
            },
            ..base
        }
    }

    /// 50 instances, 10,000 owners, one hour at 250 items/s.
    fn large() -> Scenario {
        let base = Scenario::default_preset();
        Scenario {
            name: "large",
            instances: 50,
            owners: 10_000,
            rate_per_s: 250.0,
            duration_s: 3600,
            ticks: TickScenario { burst_at_s: 600, ..base.ticks.clone() },
            ..base
        }
    }

    /// The workload of `drain owners`' benchmark on real stores (`cargo xtask bench`,
    /// `tests/benches/owners.rs`): 4 processes with 64 turn slots each, 200 owners,
    /// 20,000 items seeded at the start, turns of 20 items at 2 ms each, a pass every
    /// 100 ms; a lost claim race costs one round trip, as `drain owners`' turn does.
    fn owners() -> Scenario {
        let base = Scenario::default_preset();
        Scenario {
            name: "owners",
            instances: 4,
            owners: 200,
            rate_per_s: 0.0,
            duration_s: 1,
            requested_of: 1,
            workers: 64,
            per_turn: 20,
            service_median_ms: 2.0,
            service_sigma: 0.0,
            tail_p: 0.0,
            lost_race_ms: 1,
            seeded: Some(Seeded { items: 20_000, pass_ms: 100 }),
            ..base
        }
    }

    /// Milliseconds of the arrival window.
    pub(crate) fn duration_ms(&self) -> u64 {
        self.duration_s.saturating_mul(1000)
    }

    /// The values that shape the run, for the report.
    pub(crate) fn summary(&self) -> serde_json::Value {
        let mut summary = serde_json::json!({
            "instances": self.instances,
            "owners": self.owners,
            "rate_per_s": self.rate_per_s,
            "duration_s": self.duration_s,
            "requested_of": self.requested_of,
            "zipf_s": self.zipf_s,
            "items_per_arrival": self.items_per_arrival,
            "burst": { "every_s": self.burst_every_s, "len_s": self.burst_len_s, "factor": self.burst_factor },
            "delivery_mean_ms": self.delivery_mean_ms,
            "rerequests": self.rerequests,
            "workers_per_instance": self.workers,
            "items_per_turn": self.per_turn,
            "item_ms": { "median": self.service_median_ms, "sigma": self.service_sigma,
                         "tail_p": self.tail_p, "tail_min": self.tail_min_ms, "cap": self.service_cap_ms },
            "rtt_ms": self.rtt_ms,
            "lost_race_ms": self.lost_race_ms,
            "backoff_s": [self.backoff_s.0, self.backoff_s.1],
            "max_retry_timers": self.max_retry_timers,
            "beat_s": self.ticks.beat_s,
            "worker_concurrency": self.ticks.worker_concurrency,
        });
        if let Some(seeded) = self.seeded {
            summary["seeded"] = serde_json::json!({ "items": seeded.items, "pass_ms": seeded.pass_ms });
        }
        summary
    }
}

//! Scenario presets: the fleet, its workload, and the beat ticks beside it.
//!
//! Every number the simulation uses is here, so a run is described by a preset name,
//! its overrides and a seed.

use std::fmt;

/// One simulated situation: a preset ([`Scenario::preset`]), perhaps with
/// [`Overrides`] ([`Scenario::with`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
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

/// The preset names: `default` (8 instances, 200 owners, 40 items/s, each arrival
/// requested of 3), `seed-fleet` (a fleet of 6 re-requesting a few hot owners),
/// `large` (50 instances, 10,000 owners, one hour), `owners` (`drain owners`'
/// benchmark: 4 instances, 200 owners, 20,000 items in the backlogs at the start).
pub const PRESETS: [&str; 4] = ["default", "seed-fleet", "large", "owners"];

/// An unknown preset name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPreset(String);

impl fmt::Display for UnknownPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown scenario `{}`; one of: {}", self.0, PRESETS.join(", "))
    }
}

impl std::error::Error for UnknownPreset {}

/// The largest workload accepted (items), about 20 times the `large` scenario.
const MAX_ITEMS: f64 = 20_000_000.0;
/// The fastest arrival rate accepted, items per second.
const MAX_RATE: f64 = 1_000_000.0;

/// Changes to a preset, each one `None` to keep the preset's value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overrides {
    /// Instances (at least 1); each arrival is then requested of at most this many.
    pub instances: Option<usize>,
    /// Owners (1 to 1,000,000).
    pub owners: Option<usize>,
    /// The arrival window in seconds (1 to 604,800, a week); the run then drains.
    pub duration_s: Option<u64>,
    /// The mean arrival rate, items per second (above 0, at most 1,000,000).
    pub rate_per_s: Option<f64>,
    /// How many instances each arrival is requested of (at most the instances).
    pub requested_of: Option<usize>,
    /// The median work of one item in milliseconds (1 to 60,000).
    pub item_ms: Option<u32>,
}

/// Overrides that do not fit ([`Scenario::with`]).
#[derive(Debug, Clone, PartialEq)]
pub enum BadOverride {
    /// A count or a duration outside its range (see [`Overrides`]).
    OutOfRange {
        /// The field of [`Overrides`].
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// The rate is not a number of items per second above 0 and at most 1,000,000.
    Rate(f64),
    /// Each arrival requested of more instances than there are.
    RequestedOf {
        /// The instances each arrival would be requested of.
        requested_of: usize,
        /// The instances of the scenario.
        instances: usize,
    },
    /// Rate times duration is more items than fit in memory comfortably.
    TooManyItems {
        /// About this many items.
        items: f64,
        /// The most accepted.
        max: f64,
    },
}

impl fmt::Display for BadOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadOverride::OutOfRange { field, value } => write!(f, "{field} {value}: out of range"),
            BadOverride::Rate(rate) => {
                write!(f, "rate {rate}: must be a number of items per second in (0, {MAX_RATE}]")
            }
            BadOverride::RequestedOf { requested_of, instances } => {
                write!(f, "requested of {requested_of}: more than the {instances} instances")
            }
            BadOverride::TooManyItems { items, max } => {
                write!(f, "rate x duration asks for about {items:.0} items; at most {max:.0} fit in memory comfortably")
            }
        }
    }
}

impl std::error::Error for BadOverride {}

impl Scenario {
    /// The preset called `name` (one of [`PRESETS`]).
    pub fn preset(name: &str) -> Result<Scenario, UnknownPreset> {
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

    /// This scenario with `o` applied, or why they do not fit.
    pub fn with(mut self, o: &Overrides) -> Result<Scenario, BadOverride> {
        let check = |field, value: Option<u64>, range: std::ops::RangeInclusive<u64>| match value {
            Some(v) if !range.contains(&v) => Err(BadOverride::OutOfRange { field, value: v }),
            _ => Ok(()),
        };
        let wide = |v: Option<usize>| v.map(|v| v as u64);
        check("instances", wide(o.instances), 1..=u64::MAX)?;
        check("owners", wide(o.owners), 1..=1_000_000)?;
        check("duration_s", o.duration_s, 1..=604_800)?;
        check("item_ms", o.item_ms.map(u64::from), 1..=60_000)?;
        check("requested_of", wide(o.requested_of), 1..=u64::MAX)?;
        if let Some(n) = o.instances {
            self.instances = n;
            self.requested_of = self.requested_of.min(n);
        }
        if let Some(n) = o.owners {
            self.owners = n;
        }
        if let Some(d) = o.duration_s {
            self.duration_s = d;
        }
        if let Some(rate) = o.rate_per_s {
            if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
                return Err(BadOverride::Rate(rate));
            }
            self.rate_per_s = rate;
        }
        if let Some(ms) = o.item_ms {
            self.service_median_ms = f64::from(ms);
        }
        if let Some(k) = o.requested_of {
            if k > self.instances {
                return Err(BadOverride::RequestedOf { requested_of: k, instances: self.instances });
            }
            self.requested_of = k;
        }
        let items = self.rate_per_s * self.duration_s as f64;
        if items > MAX_ITEMS {
            return Err(BadOverride::TooManyItems { items, max: MAX_ITEMS });
        }
        Ok(self)
    }

    /// The preset's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The arrival window, in seconds.
    pub fn duration_s(&self) -> u64 {
        self.duration_s
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

//! The figures of a run: one JSON object or a table for humans.

use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::policy::{Kind, Policy};
use super::tally::{Tally, percentile, round3};
use super::ticks::TickFigures;

/// The tick side under both lease settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Ticks {
    /// `SERVICEBUS_DRAIN_SINGLEFLIGHT=off`.
    pub(crate) lease_off: TickFigures,
    /// `SERVICEBUS_DRAIN_SINGLEFLIGHT=on`.
    pub(crate) lease_on: TickFigures,
}

/// One policy's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Figures {
    /// `drain-core Scheduler` or `model`.
    pub(crate) runs: &'static str,
    /// What the policy does.
    pub(crate) policy: &'static str,
    /// Turns that lost the claim race.
    pub(crate) claim_busy_turns: u64,
    /// Turns that worked at least one item.
    pub(crate) useful_turns: u64,
    /// Turns that took the claim and found nothing to do.
    pub(crate) empty_turns: u64,
    /// Owners peeked before launch.
    pub(crate) peeks: u64,
    /// Peek round trips (several owners per batch).
    pub(crate) peek_round_trips: u64,
    /// (claim-busy + empty) / useful.
    pub(crate) wasted_turns_per_useful: f64,
    /// Item latency (arrival to end of its work) percentiles, milliseconds.
    pub(crate) owner_latency_p50_ms: u32,
    /// 90th percentile.
    pub(crate) owner_latency_p90_ms: u32,
    /// 99th percentile.
    pub(crate) owner_latency_p99_ms: u32,
    /// 99.9th percentile.
    pub(crate) owner_latency_p999_ms: u32,
    /// Worst item.
    pub(crate) owner_latency_max_ms: u32,
    /// Items that waited 5 s or more: the reach of a backoff window.
    pub(crate) items_over_5s: u64,
    /// Items completed.
    pub(crate) items_done: u64,
    /// Items left when the run stopped.
    pub(crate) items_unfinished: u64,
    /// Items completed within the arrival window, per second of it.
    pub(crate) throughput_per_s: f64,
    /// Intents handed back by the timer cap.
    pub(crate) handoffs: u64,
    /// Most retry timers pending on one instance.
    pub(crate) timers: u64,
    /// Most retry timers pending across the fleet.
    pub(crate) timers_fleet: u64,
    /// Release notifications delivered, and how many took an owner off its timer.
    pub(crate) release_wakes: u64,
    /// Of those, the ones that queued the owner again.
    pub(crate) release_wakes_effective: u64,
    /// Requests coalesced into a pending claim-retry timer (they wait for it).
    pub(crate) requests_absorbed_by_backoff: u64,
    /// Requests dropped at a peek because a drain that began after them served them.
    pub(crate) requests_skipped_as_served: u64,
    /// The tick side (independent of the owner policy: the same in every column).
    pub(crate) ticks: Ticks,
}

impl Figures {
    /// Summarise `t` for `policy` over a window of `window_s` seconds.
    pub(crate) fn new(policy: &Policy, mut t: Tally, window_s: u64, ticks: &Ticks) -> Figures {
        t.latencies.sort_unstable();
        let p = |q| percentile(&t.latencies, q).unwrap_or(0);
        let wasted = t.claim_busy + t.empty;
        Figures {
            runs: match policy.kind {
                Kind::Scheduler { .. } => "drain-core Scheduler",
                Kind::Oracle => "model",
            },
            policy: policy.label,
            claim_busy_turns: t.claim_busy,
            useful_turns: t.productive,
            empty_turns: t.empty,
            peeks: t.peeks,
            peek_round_trips: t.peek_round_trips,
            wasted_turns_per_useful: round3(wasted as f64 / t.productive.max(1) as f64),
            owner_latency_p50_ms: p(0.5),
            owner_latency_p90_ms: p(0.9),
            owner_latency_p99_ms: p(0.99),
            owner_latency_p999_ms: p(0.999),
            owner_latency_max_ms: t.latencies.last().copied().unwrap_or(0),
            items_over_5s: t.latencies.iter().filter(|&&l| l >= 5000).count() as u64,
            items_done: t.latencies.len() as u64,
            items_unfinished: t.unfinished,
            throughput_per_s: round3(t.done_in_window as f64 / window_s.max(1) as f64),
            handoffs: t.handoffs,
            timers: t.timers_max as u64,
            timers_fleet: t.timers_fleet_max as u64,
            release_wakes: t.wakes_sent,
            release_wakes_effective: t.wakes_effective,
            requests_absorbed_by_backoff: t.absorbed_by_backoff,
            requests_skipped_as_served: t.served,
            ticks: ticks.clone(),
        }
    }
}

/// A map whose keys serialize in insertion order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ordered<T>(pub(crate) Vec<(&'static str, T)>);

impl<T: Serialize> Serialize for Ordered<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// One policy against legacy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct VersusLegacy {
    /// 1 - claim_busy / legacy's claim_busy.
    pub(crate) claim_busy_cut: f64,
    /// throughput / legacy's throughput.
    pub(crate) throughput_ratio: f64,
    /// p99 latency / legacy's p99 latency.
    pub(crate) p99_latency_ratio: f64,
}

/// The figures of a run, per policy and for the tick side: one JSON object through
/// its `serde::Serialize` (`serde_json::to_string`), or [`Report::table`] for humans.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    /// The RNG seed.
    pub(crate) seed: u64,
    /// The preset.
    pub(crate) scenario: &'static str,
    /// The scenario's numbers after overrides.
    pub(crate) config: serde_json::Value,
    /// Items in the workload.
    pub(crate) items: u64,
    /// Per policy, in column order.
    pub(crate) policies: Ordered<Figures>,
    /// Each non-legacy policy against legacy.
    pub(crate) versus_legacy: Ordered<VersusLegacy>,
    /// Each policy's p99 item latency against the oracle's (the floor).
    pub(crate) p99_versus_oracle: Ordered<f64>,
    /// The tick side once more, at the top level.
    pub(crate) ticks: Ticks,
}

impl Report {
    /// Compare every policy with the one keyed `legacy` (if present).
    pub(crate) fn versus(policies: &Ordered<Figures>) -> Ordered<VersusLegacy> {
        let Some((_, legacy)) = policies.0.iter().find(|(k, _)| *k == "legacy") else {
            return Ordered(Vec::new());
        };
        let ratio = |a: f64, b: f64| round3(if b > 0.0 { a / b } else { 0.0 });
        Ordered(
            policies
                .0
                .iter()
                .filter(|(k, _)| *k != "legacy")
                .map(|(k, f)| {
                    let cut = 1.0 - ratio(f.claim_busy_turns as f64, legacy.claim_busy_turns as f64);
                    (
                        *k,
                        VersusLegacy {
                            claim_busy_cut: round3(cut),
                            throughput_ratio: ratio(f.throughput_per_s, legacy.throughput_per_s),
                            p99_latency_ratio: ratio(
                                f64::from(f.owner_latency_p99_ms),
                                f64::from(legacy.owner_latency_p99_ms),
                            ),
                        },
                    )
                })
                .collect(),
        )
    }

    /// Each non-oracle policy's p99 latency over the oracle's (if present).
    pub(crate) fn versus_oracle(policies: &Ordered<Figures>) -> Ordered<f64> {
        let Some((_, oracle)) = policies.0.iter().find(|(k, _)| *k == "oracle") else {
            return Ordered(Vec::new());
        };
        let floor = f64::from(oracle.owner_latency_p99_ms.max(1));
        Ordered(
            policies
                .0
                .iter()
                .filter(|(k, _)| *k != "oracle")
                .map(|(k, f)| (*k, round3(f64::from(f.owner_latency_p99_ms) / floor)))
                .collect(),
        )
    }

    /// The table for humans, one column per policy.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let cfg = &self.config;
        let arrivals = match cfg.get("seeded") {
            Some(s) => format!("every item in a backlog at the start, a pass every {} ms", s["pass_ms"]),
            None => format!(
                "{} items/s for {} s, each arrival requested of {}",
                cfg["rate_per_s"], cfg["duration_s"], cfg["requested_of"]
            ),
        };
        let _ = writeln!(
            out,
            "drain simulate: scenario {} (seed {}): {} instances x {} workers, {} owners, {arrivals}; {} items",
            self.scenario, self.seed, cfg["instances"], cfg["workers_per_instance"], cfg["owners"], self.items
        );
        let cols = &self.policies.0;
        let _ = write!(out, "\n{:<30}", "owner drains");
        for (k, _) in cols {
            let _ = write!(out, "{k:>18}");
        }
        out.push('\n');
        type Row = (&'static str, fn(&Figures) -> String);
        let rows: [Row; 18] = [
            ("runs", |f| if f.runs == "model" { "model".to_owned() } else { "core Scheduler".to_owned() }),
            ("claim-busy turns", |f| f.claim_busy_turns.to_string()),
            ("useful turns", |f| f.useful_turns.to_string()),
            ("empty turns", |f| f.empty_turns.to_string()),
            ("wasted turns per useful", |f| format!("{:.3}", f.wasted_turns_per_useful)),
            ("peeks (round trips)", |f| format!("{} ({})", f.peeks, f.peek_round_trips)),
            ("item latency p50 ms", |f| f.owner_latency_p50_ms.to_string()),
            ("item latency p90 ms", |f| f.owner_latency_p90_ms.to_string()),
            ("item latency p99 ms", |f| f.owner_latency_p99_ms.to_string()),
            ("item latency p99.9 ms", |f| f.owner_latency_p999_ms.to_string()),
            ("item latency max ms", |f| f.owner_latency_max_ms.to_string()),
            ("items waiting >= 5 s", |f| f.items_over_5s.to_string()),
            ("requests absorbed by backoff", |f| f.requests_absorbed_by_backoff.to_string()),
            ("requests skipped as served", |f| f.requests_skipped_as_served.to_string()),
            ("throughput items/s", |f| format!("{:.3}", f.throughput_per_s)),
            ("release wakes (effective)", |f| format!("{} ({})", f.release_wakes, f.release_wakes_effective)),
            ("timers max (fleet)", |f| format!("{} ({})", f.timers, f.timers_fleet)),
            ("hand-offs", |f| f.handoffs.to_string()),
        ];
        for (label, get) in rows {
            let _ = write!(out, "{label:<30}");
            for (_, f) in cols {
                let _ = write!(out, "{:>18}", get(f));
            }
            out.push('\n');
        }
        if !self.versus_legacy.0.is_empty() {
            let _ = writeln!(out, "\nagainst legacy: claim-busy cut, throughput ratio, p99 latency ratio");
            for (k, v) in &self.versus_legacy.0 {
                let _ = writeln!(
                    out,
                    "  {k:<28}{:>7.1} %{:>9.3}x{:>9.3}x",
                    v.claim_busy_cut * 100.0,
                    v.throughput_ratio,
                    v.p99_latency_ratio
                );
            }
        }
        if !self.p99_versus_oracle.0.is_empty() {
            let _ = writeln!(out, "\nagainst the oracle: p99 latency ratio");
            for (k, ratio) in &self.p99_versus_oracle.0 {
                let _ = writeln!(out, "  {k:<28}{ratio:>18.3}x");
            }
        }
        let (off, on) = (&self.ticks.lease_off, &self.ticks.lease_on);
        let _ = writeln!(
            out,
            "\nbeat ticks (every {} s on {} workers; the same for every owner policy)   lease off    lease on",
            cfg["beat_s"], cfg["worker_concurrency"]
        );
        type TickRow = (&'static str, fn(&TickFigures) -> u64);
        let tick_rows: [TickRow; 11] = [
            ("ticks", |f| f.ticks),
            ("skipped (locked)", |f| f.skipped_locked),
            ("overlapping drains", |f| f.overlapping_drains),
            ("max concurrent drains", |f| f.max_concurrent_drains),
            ("receives", |f| f.receives),
            ("wasted receives", |f| f.wasted_receives),
            ("messages", |f| f.messages),
            ("submitted", |f| f.submitted),
            ("duplicates caught by the claim", |f| f.duplicates),
            ("message latency p99 ms", |f| u64::from(f.message_latency_p99_ms)),
            ("last submit at s", |f| f.last_submit_s),
        ];
        for (label, get) in tick_rows {
            let _ = writeln!(out, "  {label:<70}{:>10}{:>12}", get(off), get(on));
        }
        out
    }
}

//! The tick side: a beat every `beat_s` seconds enqueues a tick; `worker_concurrency`
//! workers run them; each tick is drain-core's real [`run_tick`] on its
//! in-memory ports (`MemoryStore` for the lease and the per-message claims,
//! `MemorySource` as the peek-lock queue) in virtual time (`ManualClock`,
//! `block_on`). Only the submitter (slow during the burst) and a counting wrapper
//! around the source are the simulator's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use drain_core::memory::{ManualClock, MemorySource, MemoryStore, block_on};
use drain_core::ports::{
    Capabilities, Clock, Delivery, DeliveryHandle, Message, MessageId, MessageSource, NoopObserver, SubmitContext,
    Submitter,
};
use drain_core::tick::{InFlight, TickConfig, TickPorts, TickReport, run_tick};
use drain_core::{LeaseToken, PortError, Switch, Time};
use futures::future::{Either, select};
use futures::stream::{FuturesUnordered, StreamExt};
use rand::rngs::{SmallRng, StdRng};
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use super::scenario::Scenario;
use super::tally::percentile;

/// What the ticks of one run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct TickFigures {
    /// Drains (ticks that were not skipped) that started while another drain of the
    /// queue was running.
    pub(crate) overlapping_drains: u64,
    /// Receives issued while another drain of the queue was receiving: receivers
    /// racing each other (contention, lock churn, log lines).
    pub(crate) wasted_receives: u64,
    /// Every receive.
    pub(crate) receives: u64,
    /// Ticks the beat enqueued.
    pub(crate) ticks: u64,
    /// Ticks skipped with `{"skipped":"locked"}`.
    pub(crate) skipped_locked: u64,
    /// Most drains running at once.
    pub(crate) max_concurrent_drains: u64,
    /// Messages that arrived.
    pub(crate) messages: u64,
    /// Submitted and completed.
    pub(crate) submitted: u64,
    /// Completed without a second submit thanks to a `done` claim.
    pub(crate) duplicates: u64,
    /// Given back to the queue (a claim pending elsewhere, a lost lock).
    pub(crate) abandoned: u64,
    /// Median time from a message's arrival to its first submit.
    pub(crate) message_latency_p50_ms: u32,
    /// 99th percentile of the same.
    pub(crate) message_latency_p99_ms: u32,
    /// When the last message was submitted (seconds of virtual time).
    pub(crate) last_submit_s: u64,
}

#[derive(Debug, Default)]
struct Shared {
    /// Ticks that have received at least once and not ended.
    active: BTreeSet<u64>,
    receives: u64,
    wasted: u64,
    /// First submit time of each message, by arrival index.
    submitted_at: BTreeMap<u64, Time>,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The queue as one tick sees it: counts receives and which drains race.
struct TickSource<'a> {
    inner: &'a MemorySource,
    tick: u64,
    shared: &'a Mutex<Shared>,
}

#[async_trait]
impl MessageSource for TickSource<'_> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn receive(&self, max: usize, max_wait: Duration) -> Result<Vec<Delivery>, PortError> {
        {
            let mut s = lock(self.shared);
            s.active.insert(self.tick);
            s.receives += 1;
            if s.active.len() > 1 {
                s.wasted += 1;
            }
        }
        self.inner.receive(max, max_wait).await
    }

    async fn complete(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.complete(handle).await
    }

    async fn abandon(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.abandon(handle).await
    }

    async fn release(&self, handle: DeliveryHandle) -> Result<(), PortError> {
        self.inner.release(handle).await
    }

    async fn dead_letter(&self, handle: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.inner.dead_letter(handle, reason, description).await
    }

    async fn renew_lock(&self, handle: DeliveryHandle) -> Result<Duration, PortError> {
        self.inner.renew_lock(handle).await
    }
}

/// The downstream service: each submit takes `normal`, or `slow` inside the burst window.
struct SlowTarget<'a> {
    clock: &'a ManualClock,
    slow_window: (Time, Time),
    normal: Duration,
    slow: Duration,
    shared: &'a Mutex<Shared>,
}

#[async_trait]
impl Submitter for SlowTarget<'_> {
    async fn submit(&self, msg: &Message, _ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let now = self.clock.now();
        let slow = now >= self.slow_window.0 && now < self.slow_window.1;
        self.clock.sleep_until(now + if slow { self.slow } else { self.normal }).await;
        let n = match &msg.message_id {
            Some(MessageId::String(id)) => id.get(1..).and_then(|n| n.parse().ok()).unwrap_or(u64::MAX),
            _ => u64::MAX,
        };
        lock(self.shared).submitted_at.entry(n).or_insert(self.clock.now());
        Ok(())
    }
}

/// Message arrival times: Poisson at `message_rate`, plus the burst at once.
fn arrivals(sc: &Scenario, seed: u64) -> Vec<Time> {
    let t = &sc.ticks;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x71C4);
    let end = sc.duration_ms() as f64;
    let mut out = Vec::new();
    let mut at = 0.0f64;
    if t.message_rate > 0.0 {
        loop {
            let u: f64 = rng.random();
            at += -(1.0 - u).ln() * 1000.0 / t.message_rate;
            if at >= end {
                break;
            }
            out.push(Time::from_millis(at as u64));
        }
    }
    if t.burst_at_s * 1000 < sc.duration_ms() {
        out.extend(std::iter::repeat_n(Time::from_millis(t.burst_at_s * 1000), t.burst_messages as usize));
    }
    out.sort_unstable();
    out
}

/// Run the beat for the scenario's duration with the single-flight lease `lease`,
/// then let running ticks finish.
pub(crate) fn run(sc: &Scenario, seed: u64, lease: Switch) -> TickFigures {
    let t = &sc.ticks;
    let clock = Arc::new(ManualClock::new());
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = MemoryStore::new(dyn_clock.clone());
    let source = MemorySource::new(dyn_clock, Duration::from_secs(t.lock_s));
    let shared = Mutex::new(Shared::default());
    let burst = Time::from_millis(t.burst_at_s * 1000);
    let target = SlowTarget {
        clock: &clock,
        slow_window: (burst, burst + Duration::from_secs(t.slow_for_s)),
        normal: Duration::from_millis(t.submit_ms),
        slow: Duration::from_millis(t.slow_submit_ms),
        shared: &shared,
    };
    let mut cfg = TickConfig::new("requests");
    cfg.singleflight = lease;
    cfg.lease_ttl = Duration::from_secs(t.lease_ttl_s);
    cfg.batch = t.batch;
    // The scenario's concurrency, fixed: its figures compare lease off and on at the
    // same parallelism, which an adaptive window would grow apart (the simulated
    // target takes the same time whatever is in flight).
    (cfg.concurrency, cfg.in_flight) = (t.drain_concurrency, InFlight::Fixed);
    cfg.held_concurrency = Some(t.drain_concurrency * t.worker_concurrency.max(1));
    // Shorter than production's day so the in-memory store stays small; longer than
    // any redelivery in the run.
    cfg.claim_done_ttl = Duration::from_secs(3600);
    let times = arrivals(sc, seed);
    let end = Time::from_millis(sc.duration_ms());

    let producer = async {
        for (n, &at) in times.iter().enumerate() {
            clock.sleep_until(at).await;
            source.push({
                let mut m = Message::default();
                m.message_id = Some(MessageId::String(format!("m{n}")));
                m.body = Vec::new();
                m
            });
        }
    };
    let one_tick = |id: u64| {
        let (clock, source, store, target, shared, cfg) = (&clock, &source, &store, &target, &shared, &cfg);
        async move {
            let start = clock.now();
            let src = TickSource { inner: source, tick: id, shared };
            let ports = TickPorts::new(&src, target, &**clock, &NoopObserver).leases(store).claims(store);
            let token = LeaseToken::generate("sim", &mut StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37)));
            let report = run_tick(cfg, &ports, &token, &Default::default()).await;
            lock(shared).active.remove(&id);
            (start, clock.now(), report)
        }
    };
    let beat = async {
        let mut done: Vec<(Time, Time, TickReport)> = Vec::new();
        let mut running = FuturesUnordered::new();
        let (mut pending, mut next_id) = (0u64, 0u64);
        let mut next_beat = Time::ZERO + Duration::from_secs(t.beat_s.max(1));
        loop {
            while pending > 0 && running.len() < t.worker_concurrency.max(1) {
                pending -= 1;
                next_id += 1;
                running.push(one_tick(next_id));
            }
            let beating = next_beat <= end;
            if !beating && running.is_empty() {
                break;
            }
            if running.is_empty() {
                clock.sleep_until(next_beat).await;
                pending += 1;
                next_beat += Duration::from_secs(t.beat_s.max(1));
                continue;
            }
            if !beating {
                if let Some(r) = running.next().await {
                    done.push(r);
                }
                continue;
            }
            let sleep = clock.sleep_until(next_beat);
            match select(running.next(), sleep).await {
                Either::Left((r, _)) => done.extend(r),
                Either::Right(((), _)) => {
                    pending += 1;
                    next_beat += Duration::from_secs(t.beat_s.max(1));
                }
            }
        }
        (done, next_id)
    };
    let ((), (done, ticks)) = block_on(&clock, futures::future::join(producer, beat));
    figures(&times, &done, ticks, &lock(&shared))
}

fn figures(times: &[Time], done: &[(Time, Time, TickReport)], ticks: u64, shared: &Shared) -> TickFigures {
    let mut drains: Vec<(Time, Time)> =
        done.iter().filter(|(_, _, r)| !r.is_skipped()).map(|&(s, e, _)| (s, e)).collect();
    drains.sort_unstable();
    let mut overlapping = 0u64;
    let mut latest_end = None::<Time>;
    for &(start, end) in &drains {
        if latest_end.is_some_and(|e| e > start) {
            overlapping += 1;
        }
        latest_end = latest_end.max(Some(end));
    }
    // Sweep: +1 at a start, -1 at an end (ends first at equal times).
    let mut edges: Vec<(Time, i64)> = drains.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort_unstable();
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in edges {
        now += d;
        max = max.max(now);
    }
    let stats = done
        .iter()
        .filter_map(|(_, _, r)| r.stats)
        .fold([0u64; 3], |acc, s| [acc[0] + s.submitted, acc[1] + s.duplicates, acc[2] + s.abandoned]);
    let mut latencies: Vec<u32> = shared
        .submitted_at
        .iter()
        .filter_map(|(&n, &at)| {
            let arrived = times.get(usize::try_from(n).ok()?)?;
            u32::try_from(at.saturating_since(*arrived).as_millis()).ok()
        })
        .collect();
    latencies.sort_unstable();
    TickFigures {
        overlapping_drains: overlapping,
        wasted_receives: shared.wasted,
        receives: shared.receives,
        ticks,
        skipped_locked: done.iter().filter(|(_, _, r)| r.is_skipped()).count() as u64,
        max_concurrent_drains: max.max(0) as u64,
        messages: times.len() as u64,
        submitted: stats[0],
        duplicates: stats[1],
        abandoned: stats[2],
        message_latency_p50_ms: percentile(&latencies, 0.5).unwrap_or(0),
        message_latency_p99_ms: percentile(&latencies, 0.99).unwrap_or(0),
        last_submit_s: shared.submitted_at.values().max().map_or(0, |t| t.as_millis() / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds' situation, shortened: without the lease, slow drains overlap and
    /// race for the receiver; with it, later ticks skip and nothing races.
    #[test]
    fn the_lease_removes_overlap_and_wasted_receives() {
        let mut sc = Scenario::preset("seed-fleet").expect("preset");
        sc.duration_s = 240;
        let off = run(&sc, 3, Switch::Off);
        let on = run(&sc, 3, Switch::On);
        assert!(off.overlapping_drains > 0 && off.wasted_receives > 0, "{off:?}");
        assert!(off.max_concurrent_drains > 1, "{off:?}");
        assert_eq!((on.overlapping_drains, on.wasted_receives, on.max_concurrent_drains), (0, 0, 1), "{on:?}");
        assert!(on.skipped_locked > 0, "{on:?}");
        for f in [&off, &on] {
            assert_eq!(f.submitted, f.messages, "every message submitted exactly once: {f:?}");
        }
        assert_eq!(run(&sc, 3, Switch::On), on, "deterministic");
    }

    /// Single-flight costs no latency: the holder drains with the capacity the
    /// workers would have spent racing, so with the lease on the message latency p99
    /// is at most 1.05x lease-off's, with no wasted receive, over seeds 1-5.
    #[test]
    fn the_lease_costs_no_latency() {
        for name in ["default", "seed-fleet"] {
            let sc = Scenario::preset(name).expect("preset");
            for seed in 1..=5 {
                let (off, on) = (run(&sc, seed, Switch::Off), run(&sc, seed, Switch::On));
                let ratio = f64::from(on.message_latency_p99_ms) / f64::from(off.message_latency_p99_ms.max(1));
                assert!(ratio <= 1.05, "{name} seed {seed}: p99 {ratio:.3}x lease-off's: {on:?} / {off:?}");
                assert_eq!(on.wasted_receives, 0, "{name} seed {seed}");
                assert_eq!(on.submitted, on.messages, "{name} seed {seed}");
            }
        }
    }
}

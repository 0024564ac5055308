//! `drain owners`: owner drains on real Redis, driven by drain-core's admission
//! scheduler and driver (the shape of the `drain run --owners` demo, with real work).
//!
//! Each owner's backlog is the Redis list `<prefix>:backlog:{<owner>}` (the hash tag
//! is the owner's encoded name, so the list shares the slot of the owner's claim). A
//! turn takes the owner's claim with the composed `LeaseStore::acquire` on
//! `KeySpace::owner_lease` (a lost race is `ClaimBusy`), pops up to a batch with one
//! `LPOP key count`, records every popped item with `HINCRBY <prefix>:processed
//! <item> 1` (one pipeline: a field above 1 would be an item processed twice),
//! releases the claim and reports `Productive { more }` while the batch came back
//! full. A pass every `pass` reads every backlog's length in one pipeline and
//! requests every owner with items, so processes started together contend for the
//! same owners; when every backlog is empty the driver shuts down (running turns
//! finish) and the process reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use adapter_redis::RedisStore;
use async_trait::async_trait;
use drain_core::admission::{DriverPorts, Entry, OwnerId, OwnerWork, Scheduler, TurnOutcome, drive};
use drain_core::keys::encode_name;
use drain_core::ports::{Acquire, Holding, LeaseStore, Release, Renew};
use drain_core::{KeySpace, LeaseKey, LeaseToken, PortError};
use rand::RngExt;
use rand::seq::SliceRandom;
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::compose::Runtime;

/// How long a turn's claim lives if the process dies holding it.
const CLAIM_TTL: Duration = Duration::from_secs(30);

/// The workload's shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Owners `owner-0` … `owner-<owners-1>`.
    pub(crate) owners: usize,
    /// Items popped per turn, at most.
    pub(crate) batch: usize,
    /// Simulated work per item, inside the claim.
    pub(crate) item_delay: Duration,
    /// Time between two passes over the backlogs.
    pub(crate) pass: Duration,
}

/// What one process did, printed as one JSON line.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    /// `PROJECTION_DRAIN_CLAIM_AWARE`.
    pub(crate) claim_aware: &'static str,
    /// Owners served.
    pub(crate) owners: usize,
    /// Items this process popped and recorded.
    pub(crate) processed: u64,
    /// Turns run (every outcome).
    pub(crate) turns: u64,
    /// Turns that lost the race for the owner's claim.
    pub(crate) claim_busy: u64,
    /// Turns that did work.
    pub(crate) productive: u64,
    /// Turns that found the backlog empty.
    pub(crate) done: u64,
    /// Turns that failed (store errors).
    pub(crate) failed: u64,
    /// Owners peeked by admission.
    pub(crate) peeks: u64,
    /// Peek round trips (batches).
    pub(crate) peek_round_trips: u64,
    /// Passes over the backlogs.
    pub(crate) passes: u64,
    /// Intents handed off by the scheduler (timer cap, shutdown).
    pub(crate) handed_off: u64,
    /// From the first pass until the driver stopped.
    pub(crate) drain_ms: u64,
    /// Every backlog was empty (false: stopped by a signal).
    pub(crate) complete: bool,
}

/// The keys of the owner workload.
#[derive(Debug, Clone)]
pub(crate) struct OwnerKeys {
    keys: KeySpace,
}

impl OwnerKeys {
    pub(crate) fn new(keys: KeySpace) -> Self {
        OwnerKeys { keys }
    }

    /// The name of owner `i`.
    pub(crate) fn owner(i: usize) -> OwnerId {
        OwnerId::from(format!("owner-{i}"))
    }

    /// `<prefix>:backlog:{<owner>}`, in the owner's hash slot.
    pub(crate) fn backlog(&self, owner: &str) -> String {
        format!("{}:backlog:{{{}}}", self.keys.prefix(), encode_name(owner.as_bytes()))
    }

    /// `<prefix>:processed`: item -> times processed.
    pub(crate) fn processed(&self) -> String {
        format!("{}:processed", self.keys.prefix())
    }
}

/// Push `items` items (`item-0` …) round-robin onto the backlogs of `owners` owners,
/// one pipelined round trip.
pub(crate) async fn seed(store: &RedisStore, keys: &OwnerKeys, owners: usize, items: u64) -> Result<(), PortError> {
    let owners = owners.max(1);
    let mut lists: Vec<(String, Vec<String>)> =
        (0..owners).map(|i| (keys.backlog(OwnerKeys::owner(i).as_str()), Vec::new())).collect();
    for n in 0..items {
        let i = usize::try_from(n).unwrap_or(usize::MAX) % owners;
        lists[i].1.push(format!("item-{n}"));
    }
    store.push_items(&lists).await
}

#[derive(Default)]
struct Counters {
    processed: AtomicU64,
    turns: AtomicU64,
    claim_busy: AtomicU64,
    productive: AtomicU64,
    done: AtomicU64,
    failed: AtomicU64,
    peeks: AtomicU64,
    peek_round_trips: AtomicU64,
    handed_off: AtomicU64,
    passes: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

struct RedisOwnerWork {
    instance: String,
    keys: KeySpace,
    owner_keys: OwnerKeys,
    leases: Arc<dyn LeaseStore>,
    store: RedisStore,
    options: Options,
    counters: Arc<Counters>,
    requeue: mpsc::UnboundedSender<OwnerId>,
}

impl RedisOwnerWork {
    /// Pop a batch and record it; how many items were popped.
    async fn work(&self, owner: &OwnerId) -> Result<usize, PortError> {
        let items = self.store.pop_batch(&self.owner_keys.backlog(owner.as_str()), self.options.batch).await?;
        if items.is_empty() {
            return Ok(0);
        }
        if !self.options.item_delay.is_zero() {
            let n = u32::try_from(items.len()).unwrap_or(u32::MAX);
            tokio::time::sleep(self.options.item_delay.saturating_mul(n)).await;
        }
        if let Err(e) = self.store.mark_processed(&self.owner_keys.processed(), &items).await {
            tracing::error!(owner = %owner, items = items.len(), "popped items not recorded: {e}");
            return Err(e);
        }
        bump(&self.counters.processed, items.len() as u64);
        Ok(items.len())
    }
}

#[async_trait]
impl OwnerWork for RedisOwnerWork {
    async fn turn(&self, owner: &OwnerId, _entry: Entry) -> TurnOutcome {
        bump(&self.counters.turns, 1);
        let key = self.keys.owner_lease(owner.as_str());
        let token = LeaseToken::generate(&self.instance, &mut rand::rng());
        match self.leases.acquire(&key, &token, CLAIM_TTL).await {
            Ok(Acquire::Acquired { .. }) => {}
            Ok(Acquire::Held { .. }) => {
                bump(&self.counters.claim_busy, 1);
                return TurnOutcome::ClaimBusy;
            }
            Err(e) => {
                tracing::warn!(owner = %owner, "owner claim failed: {e}");
                bump(&self.counters.failed, 1);
                return TurnOutcome::Failed;
            }
        }
        let worked = self.work(owner).await;
        if let Err(e) = self.leases.release(&key, &token).await {
            tracing::warn!(owner = %owner, "owner claim release failed ({e}); its TTL frees it");
        }
        match worked {
            Ok(0) => {
                bump(&self.counters.done, 1);
                TurnOutcome::Done
            }
            Ok(n) => {
                bump(&self.counters.productive, 1);
                // A full batch may have left items; a short one emptied the list.
                TurnOutcome::Productive { more: n >= self.options.batch }
            }
            Err(e) => {
                tracing::warn!(owner = %owner, "owner turn failed: {e}");
                bump(&self.counters.failed, 1);
                TurnOutcome::Failed
            }
        }
    }

    fn hand_off(&self, owner: OwnerId) {
        bump(&self.counters.handed_off, 1);
        let _ = self.requeue.send(owner);
    }
}

/// The composed lease store, counting admission's peeks.
struct CountingPeeks {
    inner: Arc<dyn LeaseStore>,
    counters: Arc<Counters>,
}

#[async_trait]
impl LeaseStore for CountingPeeks {
    async fn acquire(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.inner.acquire(key, token, ttl).await
    }
    async fn release(&self, key: &LeaseKey, token: &LeaseToken) -> Result<Release, PortError> {
        self.inner.release(key, token).await
    }
    async fn renew(&self, key: &LeaseKey, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        self.inner.renew(key, token, ttl).await
    }
    async fn peek(&self, key: &str) -> Result<Option<Holding>, PortError> {
        bump(&self.counters.peeks, 1);
        bump(&self.counters.peek_round_trips, 1);
        self.inner.peek(key).await
    }
    async fn peek_many(&self, keys: &[String]) -> Result<Vec<Option<Holding>>, PortError> {
        bump(&self.counters.peeks, keys.len() as u64);
        bump(&self.counters.peek_round_trips, 1);
        self.inner.peek_many(keys).await
    }
}

/// Drain every owner's backlog with the scheduler until all are empty or `shutdown`
/// flips; running turns finish either way.
pub(crate) async fn run(
    rt: Arc<Runtime>,
    store: RedisStore,
    options: Options,
    mut shutdown: watch::Receiver<bool>,
) -> Report {
    let c = &rt.config;
    let cfg = c.scheduler_config();
    let seed: u64 = rand::rng().random();
    let mut scheduler = Scheduler::new(cfg, <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed));
    let counters = Arc::new(Counters::default());
    let owner_keys = OwnerKeys::new(rt.keys.clone());
    let (tx, mut rx) = mpsc::unbounded_channel::<OwnerId>();
    let work = RedisOwnerWork {
        instance: c.instance_id.clone(),
        keys: rt.keys.clone(),
        owner_keys: owner_keys.clone(),
        leases: rt.leases.clone(),
        store: store.clone(),
        options,
        counters: counters.clone(),
        requeue: tx.clone(),
    };
    let peeks = CountingPeeks { inner: rt.leases.clone(), counters: counters.clone() };
    let keys = rt.keys.clone();
    let claim_key = move |o: &OwnerId| keys.owner_claim(o.as_str());
    let ports =
        DriverPorts { peeks: &peeks, claim_key: &claim_key, work: &work, clock: &*rt.clock, observer: &*rt.observer };
    let requests = futures::stream::poll_fn(move |cx| match rx.poll_recv(cx) {
        Poll::Ready(v) => Poll::Ready(v),
        Poll::Pending => Poll::Pending,
    });

    let (empty_tx, mut empty_rx) = watch::channel(false);
    let owners: Vec<OwnerId> = (0..options.owners).map(OwnerKeys::owner).collect();
    let backlogs: Vec<String> = owners.iter().map(|o| owner_keys.backlog(o.as_str())).collect();
    let pass_loop = async {
        let mut tick = tokio::time::interval(options.pass.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            bump(&counters.passes, 1);
            let lengths = match store.list_lengths(&backlogs).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("reading the backlogs failed ({e}); next pass");
                    continue;
                }
            };
            if lengths.iter().all(|&n| n == 0) {
                let _ = empty_tx.send(true);
                // The driver stops now; nothing more to request.
                std::future::pending::<()>().await;
            }
            let mut wanted: Vec<&OwnerId> =
                owners.iter().zip(&lengths).filter(|&(_, &n)| n > 0).map(|(o, _)| o).collect();
            // Each process in its own order, as independent instances would be.
            wanted.shuffle(&mut rand::rng());
            for owner in wanted {
                let _ = tx.send(owner.clone());
            }
        }
    };
    let complete = AtomicBool::new(false);
    let stop = async {
        tokio::select! {
            _ = empty_rx.wait_for(|e| *e) => complete.store(true, Ordering::Relaxed),
            _ = shutdown.wait_for(|s| *s) => {}
        }
    };
    tracing::info!(
        owners = options.owners,
        claim_aware = c.claim_aware.as_str(),
        batch = options.batch,
        "owner drains on Redis started"
    );
    let start = Instant::now();
    tokio::select! {
        () = drive(&mut scheduler, ports, requests, stop) => {}
        () = pass_loop => {}
    }
    let drain_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Report {
        claim_aware: c.claim_aware.as_str(),
        owners: options.owners,
        processed: load(&counters.processed),
        turns: load(&counters.turns),
        claim_busy: load(&counters.claim_busy),
        productive: load(&counters.productive),
        done: load(&counters.done),
        failed: load(&counters.failed),
        peeks: load(&counters.peeks),
        peek_round_trips: load(&counters.peek_round_trips),
        passes: load(&counters.passes),
        handed_off: load(&counters.handed_off),
        drain_ms,
        complete: complete.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text between the first `{` and the following `}`: the Cluster hash tag.
    fn tag(key: &str) -> &str {
        let open = key.find('{').expect("a hash tag");
        let close = key[open..].find('}').expect("a closed hash tag") + open;
        &key[open + 1..close]
    }

    #[test]
    fn a_backlog_shares_its_owner_claims_hash_slot() {
        let keys = KeySpace::new("drain");
        let owners = OwnerKeys::new(keys.clone());
        for owner in ["owner-7", "a b{c}", ""] {
            let backlog = owners.backlog(owner);
            assert!(backlog.starts_with("drain:backlog:{"), "{backlog}");
            assert_eq!(tag(&backlog), tag(&keys.owner_lease(owner).lease), "{owner:?}");
            assert_eq!(tag(&backlog), tag(&keys.owner_claim(owner)), "{owner:?}");
        }
        assert_eq!(owners.backlog("a b{c}"), "drain:backlog:{a%20b%7Bc%7D}");
        assert_eq!(owners.processed(), "drain:processed");
        assert_eq!(OwnerKeys::owner(3).as_str(), "owner-3");
    }
}

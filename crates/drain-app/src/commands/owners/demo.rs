//! `drain run --owners N`: a demo owner workload driven by drain-core's admission
//! scheduler and driver over the composed store.
//!
//! Every second a burst of items lands on owners chosen with a skewed popularity,
//! and each touched owner is requested (several times: the re-requests the seed
//! describes). A turn takes the owner's claim (an owner lease of the composed
//! store), works up to 20 items at 20 ms each, and releases it. Run several
//! `drain run --owners N` processes on one Redis to watch them compete:
//! `drain_owner_turns_total{outcome="claim_busy"}` stays near zero with
//! `PROJECTION_DRAIN_CLAIM_AWARE=on` and climbs with `off`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use drain_core::LeaseToken;
use drain_core::admission::{DriverPorts, Entry, OwnerId, OwnerWork, Scheduler, TurnOutcome, drive};
use drain_core::ports::{Acquire, Clock, LeaseName, LeaseStore};
use rand::RngExt;
use tokio::sync::{mpsc, watch};

use crate::compose::Runtime;

const ITEMS_PER_TURN: u64 = 20;
const ITEM_TIME: Duration = Duration::from_millis(20);
const ARRIVALS_PER_SECOND: u64 = 60;
const REQUESTS_PER_ARRIVAL: usize = 3;

struct DemoOwnerWork {
    instance: String,
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    backlog: Mutex<HashMap<OwnerId, u64>>,
    /// Intents the scheduler handed back, requested again on the next arrivals tick.
    handed: Mutex<BTreeSet<OwnerId>>,
    handed_off: std::sync::atomic::AtomicU64,
}

impl DemoOwnerWork {
    fn take(&self, owner: &OwnerId) -> u64 {
        let mut b = self.backlog.lock().unwrap_or_else(PoisonError::into_inner);
        let left = b.entry(owner.clone()).or_default();
        let take = (*left).min(ITEMS_PER_TURN);
        *left -= take;
        take
    }

    fn left(&self, owner: &OwnerId) -> u64 {
        self.backlog.lock().unwrap_or_else(PoisonError::into_inner).get(owner).copied().unwrap_or(0)
    }
}

#[async_trait]
impl OwnerWork for DemoOwnerWork {
    async fn turn(&self, owner: &OwnerId, _entry: Entry) -> TurnOutcome {
        let key = LeaseName::owner(owner.as_str());
        let token = LeaseToken::generate(&self.instance, &mut rand::rng());
        match self.store.acquire(&key, &token, Duration::from_secs(30)).await {
            Ok(Acquire::Acquired { .. }) => {}
            Ok(Acquire::Held { .. }) => return TurnOutcome::ClaimBusy,
            Err(e) => {
                tracing::warn!(owner = %owner, "owner claim failed: {e}");
                return TurnOutcome::Failed;
            }
        }
        let took = self.take(owner);
        if took > 0 {
            let until = self.clock.now() + ITEM_TIME * u32::try_from(took).unwrap_or(u32::MAX);
            self.clock.sleep_until(until).await;
        }
        if let Err(e) = self.store.release(&key, &token).await {
            tracing::warn!(owner = %owner, "owner claim release failed ({e}); its TTL frees it");
        }
        if took == 0 { TurnOutcome::Done } else { TurnOutcome::Productive { more: self.left(owner) > 0 } }
    }

    /// The timer cap is reached: the intent goes to the next serving pass (the next
    /// arrivals tick), never straight back into the scheduler, which would peek,
    /// find the claim held and hand it back again at once.
    fn hand_off(&self, owner: OwnerId) {
        tracing::debug!(owner = %owner, "owner intent handed off to the next pass");
        self.handed_off.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.handed.lock().unwrap_or_else(PoisonError::into_inner).insert(owner);
    }
}

/// Run the demo owner workload over `owners` owners until `shutdown` flips.
pub(crate) async fn run(rt: Arc<Runtime>, owners: usize, mut shutdown: watch::Receiver<bool>) {
    let c = &rt.config;
    let cfg = c.scheduler_config();
    let seed: u64 = rand::rng().random();
    let mut scheduler = Scheduler::new(cfg, <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed));
    let (tx, mut rx) = mpsc::unbounded_channel::<OwnerId>();
    let Some(store) = rt.leases.clone() else {
        tracing::error!("owner drains need a store for the owners' claims; none is composed");
        return;
    };
    let work = DemoOwnerWork {
        instance: c.instance_id.clone(),
        store,
        clock: rt.clock.clone(),
        backlog: Mutex::new(HashMap::new()),
        handed: Mutex::new(BTreeSet::new()),
        handed_off: std::sync::atomic::AtomicU64::new(0),
    };
    let ports =
        DriverPorts { claims: rt.owner_claims.as_deref(), work: &work, clock: &*rt.clock, observer: &*rt.observer };
    let requests = futures::stream::poll_fn(move |cx| match rx.poll_recv(cx) {
        Poll::Ready(v) => Poll::Ready(v),
        Poll::Pending => Poll::Pending,
    });
    let arrivals = async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let batch: Vec<(OwnerId, u64)> = {
                let mut rng = rand::rng();
                (0..ARRIVALS_PER_SECOND)
                    .map(|_| {
                        // Skewed popularity: the square of a uniform draw favours low ids.
                        let u: f64 = rng.random();
                        let idx = ((u * u) * owners as f64) as usize;
                        (OwnerId::from(format!("owner-{}", idx.min(owners.saturating_sub(1)))), 1)
                    })
                    .collect()
            };
            let handed = std::mem::take(&mut *work.handed.lock().unwrap_or_else(PoisonError::into_inner));
            for owner in handed {
                let _ = tx.send(owner);
            }
            for (owner, items) in batch {
                *work.backlog.lock().unwrap_or_else(PoisonError::into_inner).entry(owner.clone()).or_default() += items;
                for _ in 0..REQUESTS_PER_ARRIVAL {
                    let _ = tx.send(owner.clone());
                }
            }
        }
    };
    let stop = async move {
        while shutdown.changed().await.is_ok() {
            if *shutdown.borrow() {
                return;
            }
        }
    };
    tracing::info!(owners, claim_aware = c.claim_aware.as_str(), "owner drains started (demo workload)");
    tokio::select! {
        () = drive(&mut scheduler, ports, requests, stop) => {}
        () = arrivals => {}
    }
    let handed = work.handed_off.load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(handed_off = handed, "owner drains stopped; pending intents handed off (this demo keeps none)");
}

//! `drain run --owners N`: a demo owner workload driven by drain-core's admission
//! scheduler and driver over the composed store.
//!
//! Every second a burst of items lands on owners chosen with a skewed popularity,
//! and each touched owner is requested (several times: the re-requests the seed
//! describes). A turn takes the owner's claim (an owner lease of the composed
//! store), works up to 20 items at 20 ms each, and releases it. Run several
//! `drain run --owners N` processes on one Redis to watch them compete:
//! `drain_owner_turns_total{outcome="claim_busy"}` stays near zero with
//! `PROJECTION_DRAIN_CLAIM_AWARE=on` and climbs with `off`. On PostgreSQL the turns
//! and peeks use the release wake-up (`LISTEN`/`NOTIFY`) when the switches allow it;
//! on every store they use the drain stamps unless `PROJECTION_DRAIN_SKIP_SERVED=off`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use drain_core::admission::{DriverPorts, OwnerId, OwnerTurns, Scheduler, Worked, drive};
use drain_core::ports::{Clock, LeaseStore, OwnerClaims};
use drain_runtime::owner_passes;
use rand::RngExt;
use rand::rngs::{SmallRng, StdRng};
use tokio::sync::watch;

use crate::compose::{Backend, Runtime};

const ITEMS_PER_TURN: u64 = 20;
const ITEM_TIME: Duration = Duration::from_millis(20);
const ARRIVALS_PER_SECOND: u64 = 60;
const REQUESTS_PER_ARRIVAL: usize = 3;
/// How long a turn's claim lives if the process dies holding it.
const CLAIM_TTL: Duration = Duration::from_secs(30);

/// The demo's backlogs: items per owner, taken by turns.
#[derive(Default)]
struct Backlogs(Mutex<HashMap<OwnerId, u64>>);

impl Backlogs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<OwnerId, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One turn: up to [`ITEMS_PER_TURN`] items, [`ITEM_TIME`] each, under the claim.
    async fn turn(&self, clock: &dyn Clock, owner: &OwnerId) -> Worked {
        let took = {
            let mut b = self.lock();
            let left = b.entry(owner.clone()).or_default();
            let take = (*left).min(ITEMS_PER_TURN);
            *left -= take;
            take
        };
        if took > 0 {
            clock.sleep_until(clock.now() + ITEM_TIME * u32::try_from(took).unwrap_or(u32::MAX)).await;
        }
        Worked { items: took, more: self.lock().get(owner).copied().unwrap_or(0) > 0 }
    }
}

/// Run the demo owner workload over `owners` owners until `shutdown` flips.
pub(crate) async fn run(rt: Arc<Runtime>, owners: usize, shutdown: watch::Receiver<bool>) {
    // The composed store offers what the switches enabled (`compose::offers`), so the
    // turns and the peeks use exactly that.
    let claims = rt.owner_claims.as_deref();
    match &rt.backend {
        Backend::Embedded(store) => over(&rt, &**store, claims, owners, shutdown).await,
        Backend::Redis(store) => over(&rt, &**store, claims, owners, shutdown).await,
        Backend::Postgres(store) => over(&rt, &**store, claims, owners, shutdown).await,
        Backend::Unused => tracing::error!("owner drains need a store for the owners' claims; none is composed"),
    }
}

/// The demo over `store`'s owner claims: turns take them through drain-core's
/// `OwnerTurns`, and admission peeks `claims` (none: claim-aware admission is off).
async fn over<S: LeaseStore + OwnerClaims>(
    rt: &Runtime,
    store: &S,
    claims: Option<&dyn OwnerClaims>,
    owners: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let c = &rt.config;
    let mut scheduler = Scheduler::new(c.scheduler_config(), rand::make_rng::<SmallRng>());
    let backlogs = Backlogs::default();
    let clock = &*rt.ticks.clock;
    let mut turns =
        OwnerTurns::new(store, clock, c.instance_id.clone(), CLAIM_TTL, rand::make_rng::<StdRng>(), |owner, _| {
            let backlogs = &backlogs;
            async move { Ok(backlogs.turn(clock, &owner).await) }
        });
    if c.skip_served == drain_core::Switch::Off {
        turns = turns.without_marks();
    }
    let ports = DriverPorts { claims, work: &turns, clock, observer: &*rt.ticks.observer };
    let handed_off = AtomicU64::new(0);
    // Every second a pass: the arrivals (each requested several times), and the
    // intents the scheduler handed back (its timers at the cap), which wait for a
    // pass, never straight back into the scheduler (it would peek, find the claim
    // held and hand them back again at once). Arrivals never stop, so neither do
    // the passes: a signal ends the drive.
    let (requests, passes) = owner_passes(Duration::from_secs(1), || {
        let mut wanted = turns.take_handed_off();
        handed_off.fetch_add(wanted.len() as u64, Ordering::Relaxed);
        let mut rng = rand::rng();
        for _ in 0..ARRIVALS_PER_SECOND {
            // Skewed popularity: the square of a uniform draw favours low ids.
            let u: f64 = rng.random();
            let idx = ((u * u) * owners as f64) as usize;
            let owner = OwnerId::from(format!("owner-{}", idx.min(owners.saturating_sub(1))));
            *backlogs.lock().entry(owner.clone()).or_default() += 1;
            wanted.extend(std::iter::repeat_n(owner, REQUESTS_PER_ARRIVAL));
        }
        std::future::ready(Ok(wanted))
    });
    let stop = async {
        tokio::select! {
            _ = passes => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    };
    tracing::info!(owners, claim_aware = c.claim_aware.as_str(), "owner drains started (demo workload)");
    drive(&mut scheduler, ports, requests, stop).await;
    let handed = handed_off.load(Ordering::Relaxed) + turns.take_handed_off().len() as u64;
    tracing::info!(handed_off = handed, "owner drains stopped; pending intents handed off (this demo keeps none)");
}

//! The claim gate: drain-core's `Outage` for one process, shared by the beat's ticks
//! and the resident consumer.
//!
//! While the atomic claim is On, a tick whose claim store failed closes the gate:
//! until the store answers again no tick receives (each receive of a message that
//! cannot be claimed costs it a delivery, and a broker with a maximum delivery count
//! dead-letters it). After a jittered, exponential, capped back-off one caller
//! probes the store (`probe_claims`: one claim of a key no message has, released
//! again); an answer opens the gate, a failure waits longer. Each back-off step is
//! one log line. A probe that answered first releases the claims failed ticks' calls
//! may have taken late (a frozen store runs a timed-out call when it thaws), so that
//! no redelivery finds them held. While the gate is closed the source is parked: the
//! process holds no message until it receives again.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use drain_core::event::{Event, TickKind, TickOutcome};
use drain_core::ports::ClaimStore;
use drain_core::tick::{
    ClaimHealth, Outage, OutagePolicy, OutageVerdict, TickReport, probe_claims, release_stale_claims,
};
use drain_core::{LeaseToken, PortError};

use crate::Ticks;

/// How long [`ClaimGate::release_before_exit`] keeps probing a claim store that does
/// not answer before it gives up.
const LAST_RELEASE_BOUND: Duration = Duration::from_secs(10);
/// The pause between those probes (each is bounded by the store's own timeout).
const LAST_RELEASE_PAUSE: Duration = Duration::from_millis(500);

/// The claim-store outage gate of one queue's ticks in this process.
pub struct ClaimGate {
    ticks: Arc<Ticks>,
    outage: Mutex<Outage>,
}

impl ClaimGate {
    /// A gate over `ticks`, open, with drain-core's default back-off, its longest
    /// wait at most half the lease TTL ([`OutagePolicy::within_lease_ttl`]).
    #[must_use]
    pub fn new(ticks: Arc<Ticks>) -> Self {
        let policy = OutagePolicy::within_lease_ttl(ticks.tick.lease_ttl);
        ClaimGate { ticks, outage: Mutex::new(Outage::new(policy)) }
    }

    fn outage(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a tick about to start must do. Always `Run` unless the claim decides.
    #[must_use]
    pub fn verdict(&self) -> OutageVerdict {
        if !self.ticks.tick.atomic_claim.enforces() {
            return OutageVerdict::Run;
        }
        self.outage().verdict(self.ticks.clock.now())
    }

    /// Probe the claim store after a `OutageVerdict::Probe` (releasing the stale claims kept
    /// once it answers); whether it answered.
    pub async fn probe(&self) -> bool {
        let result = match &self.ticks.claims {
            Some(claims) => self.probe_then_release(&**claims).await,
            // The gate closes only on a claim store's failure; without one it is open.
            None => Ok(()),
        };
        let (now, queue) = (self.ticks.clock.now(), &self.ticks.tick.queue);
        let mut outage = self.outage();
        match result {
            Ok(()) => {
                if let Some(down) = outage.probe_succeeded(now) {
                    tracing::info!(%queue, down_s = secs(down), "claim store answers again after {:.1} s; receiving again", secs(down));
                }
                true
            }
            Err(e) => {
                if let Some(step) = outage.probe_failed(now, &mut rand::rng()) {
                    tracing::warn!(
                        %queue,
                        step = step.strikes,
                        wait_s = secs(step.wait),
                        "claim store still failing ({e}); nothing is received for {:.1} s (back-off step {})",
                        secs(step.wait),
                        step.strikes
                    );
                }
                false
            }
        }
    }

    /// One probe of the claim store and, once it answered, the release of the stale
    /// claims kept; the first failure.
    async fn probe_then_release(&self, claims: &dyn ClaimStore) -> Result<(), PortError> {
        probe_claims(&self.ticks.tick, claims, &self.ticks.token()).await?;
        // Release the claims failed ticks' calls may have taken late, group by group,
        // each forgotten once released.
        let stale = self.outage().stale();
        for group in stale {
            release_stale_claims(&self.ticks.tick, claims, &group).await?;
            self.outage().stale_released(&group.token);
            tracing::info!(
                queue = %self.ticks.tick.queue,
                claims = group.ids.len(),
                "released {} claims a timed-out call may have taken after its tick gave the messages back",
                group.ids.len()
            );
        }
        Ok(())
    }

    /// Feed a finished tick's claim health to the gate, with the claims its failed
    /// call may still take under `token` (released after the next probe answers).
    pub fn after_tick(&self, report: &TickReport, token: &LeaseToken) {
        if !self.ticks.tick.atomic_claim.enforces() {
            return;
        }
        let mut outage = self.outage();
        outage.keep_stale(token, report.stale_claims.clone());
        match report.claims {
            ClaimHealth::Failed => {
                if let Some(step) = outage.tick_failed(self.ticks.clock.now(), &mut rand::rng()) {
                    tracing::warn!(
                        queue = %self.ticks.tick.queue,
                        step = step.strikes,
                        wait_s = secs(step.wait),
                        "claim store failing: nothing is received for {:.1} s (back-off step {}), then it is probed first",
                        secs(step.wait),
                        step.strikes
                    );
                }
            }
            ClaimHealth::Answered => outage.tick_succeeded(),
            ClaimHealth::NotAsked => {}
        }
    }

    /// For a process that ends with its tick (`drain run --once`): no later probe
    /// would release the claims its failed claim call may still take
    /// (`TickReport::stale_claims`), which would hold their messages for the pending
    /// TTL. So keep them as a failed tick of the beat does and probe the store now,
    /// releasing them once it answers, probing again for up to 10 s; then say what is
    /// left.
    pub async fn release_before_exit(&self, report: &TickReport, token: &LeaseToken) {
        let Some(claims) = &self.ticks.claims else { return };
        let (n, queue) = (report.stale_claims.len(), &self.ticks.tick.queue);
        if !self.ticks.tick.atomic_claim.enforces() || n == 0 {
            return;
        }
        self.outage().keep_stale(token, report.stale_claims.clone());
        let until = tokio::time::Instant::now() + LAST_RELEASE_BOUND;
        loop {
            match self.probe_then_release(&**claims).await {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() + LAST_RELEASE_PAUSE < until => {
                    tracing::info!(%queue, claims = n, "claim store not answering yet ({e}); probing again to release {n} claims before exiting");
                    tokio::time::sleep(LAST_RELEASE_PAUSE).await;
                }
                Err(e) => {
                    tracing::warn!(
                        %queue,
                        claims = n,
                        "{n} claims the tick's timed-out call may have taken stay pending until the pending TTL ({} s) ends them: the claim store did not answer within {} s ({e}); their messages are given back until then",
                        self.ticks.tick.claim_pending_ttl.as_secs(),
                        LAST_RELEASE_BOUND.as_secs()
                    );
                    return;
                }
            }
        }
    }

    /// Count a beat that started no tick because the claim store is down
    /// (`drain_ticks_total{outcome="claims_down"}`): while nothing is received, no
    /// message outcome moves, and this is what shows the outage.
    pub fn claims_down_tick(&self, duration: Duration) {
        self.ticks.observer.observe(&Event::Tick {
            queue: &self.ticks.tick.queue,
            outcome: TickOutcome::ClaimsDown,
            mode: self.ticks.tick.singleflight,
            kind: TickKind::Beat,
            duration,
        });
    }
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

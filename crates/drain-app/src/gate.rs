//! The claim gate: drain-core's `Outage` for this process, shared by the beat's
//! ticks and the resident consumer.
//!
//! While the atomic claim is On, a tick whose claim store failed closes the gate:
//! until the store answers again no tick receives (each receive of a message that
//! cannot be claimed costs it a delivery, and a broker with a maximum delivery count
//! dead-letters it). After a jittered, exponential, capped back-off one caller
//! probes the store (`probe_claims`: one claim of a key no message has, released
//! again); an answer opens the gate, a failure waits longer. Each back-off step is
//! one log line; skipped beats are logged at debug only. A probe that answered first
//! releases the claims failed ticks' calls may have taken late (a frozen store runs a
//! timed-out call when it thaws), so that no redelivery finds them held. While the
//! gate is closed the source is parked: the process holds no message until it
//! receives again.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use drain_core::event::{Event, TickKind, TickOutcome};
use drain_core::ports::ClaimStore;
use drain_core::tick::{ClaimHealth, Gate, Outage, OutagePolicy, TickReport, probe_claims, release_stale_claims};
use drain_core::{LeaseToken, PortError};

use crate::compose::Runtime;

/// How long `drain run --once` keeps probing a claim store that does not answer, to
/// release the claims its tick's timed-out call may have taken, before it exits.
const LAST_RELEASE_BOUND: Duration = Duration::from_secs(10);
/// The pause between those probes (each is bounded by the store's own timeout).
const LAST_RELEASE_PAUSE: Duration = Duration::from_millis(500);

/// The process's claim-store outage state.
pub(crate) struct ClaimGate {
    outage: Mutex<Outage>,
}

impl ClaimGate {
    pub(crate) fn new() -> Self {
        ClaimGate { outage: Mutex::new(Outage::new(OutagePolicy::default())) }
    }

    fn outage(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Runtime {
    /// What a tick about to start must do. Always `Run` unless the claim decides.
    pub(crate) fn gate(&self) -> Gate {
        if !self.tick.atomic_claim.enforces() {
            return Gate::Run;
        }
        self.claim_gate.outage().gate(self.clock.now())
    }

    /// Probe the claim store after a `Gate::Probe`; whether it answered.
    pub(crate) async fn probe(&self) -> bool {
        let result = match &self.claims {
            Some(claims) => self.probe_then_release(&**claims).await,
            // The gate closes only on a claim store's failure; without one it is open.
            None => Ok(()),
        };
        let now = self.clock.now();
        let mut outage = self.claim_gate.outage();
        match result {
            Ok(()) => {
                if let Some(down) = outage.probe_succeeded(now) {
                    tracing::info!(
                        queue = %self.tick.queue,
                        down_s = secs(down),
                        "claim store answers again after {:.1} s; receiving again",
                        secs(down)
                    );
                }
                true
            }
            Err(e) => {
                if let Some(step) = outage.probe_failed(now, &mut rand::rng()) {
                    tracing::warn!(
                        queue = %self.tick.queue,
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
        let token = LeaseToken::generate(&self.config.instance_id, &mut rand::rng());
        probe_claims(&self.tick, claims, &token).await?;
        self.release_stale(claims).await
    }

    /// After a probe answered, before receiving: release the claims failed ticks'
    /// calls may have taken late (the store ran them before it answered the probe),
    /// group by group, each forgotten once released. The first failure is the probe's.
    async fn release_stale(&self, claims: &dyn ClaimStore) -> Result<(), PortError> {
        let stale = self.claim_gate.outage().stale();
        for group in stale {
            release_stale_claims(&self.tick, claims, &group).await?;
            self.claim_gate.outage().stale_released(&group.token);
            tracing::info!(
                queue = %self.tick.queue,
                claims = group.ids.len(),
                "released {} claims a timed-out call may have taken after its tick gave the messages back",
                group.ids.len()
            );
        }
        Ok(())
    }

    /// `drain run --once` ends with its tick, so no later probe releases the claims
    /// its failed claim call may still take (`TickReport::stale_claims`); left, they
    /// would hold their messages for `SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS`, and
    /// every run meanwhile would give them back, a delivery each where the source
    /// cannot release. So keep them as a failed tick of the beat does and probe the
    /// store now, releasing them once it answers, probing again for up to
    /// [`LAST_RELEASE_BOUND`]; then say what is left.
    pub(crate) async fn release_before_exit(&self, report: &TickReport, token: &LeaseToken) {
        let Some(claims) = &self.claims else { return };
        let n = report.stale_claims.len();
        if !self.tick.atomic_claim.enforces() || n == 0 {
            return;
        }
        self.claim_gate.outage().keep_stale(token, report.stale_claims.clone());
        let until = tokio::time::Instant::now() + LAST_RELEASE_BOUND;
        loop {
            match self.probe_then_release(&**claims).await {
                Ok(()) => return,
                Err(e) if tokio::time::Instant::now() + LAST_RELEASE_PAUSE < until => {
                    tracing::info!(
                        queue = %self.tick.queue,
                        claims = n,
                        "claim store not answering yet ({e}); probing again to release {n} claims before exiting"
                    );
                    tokio::time::sleep(LAST_RELEASE_PAUSE).await;
                }
                Err(e) => {
                    tracing::warn!(
                        queue = %self.tick.queue,
                        claims = n,
                        "{n} claims the tick's timed-out call may have taken stay pending until \
                         SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS ({} s) ends them: the claim store did not \
                         answer within {} s ({e}); their messages are given back until then",
                        self.tick.claim_pending_ttl.as_secs(),
                        LAST_RELEASE_BOUND.as_secs()
                    );
                    return;
                }
            }
        }
    }

    /// While the gate is closed nothing is received: give the source's credit back,
    /// and the messages that arrived on it, so that the process holds no message
    /// through the outage (on Service Bus a lock that ran out would count a delivery,
    /// and the broker's maximum delivery count dead-letters). Called at every wait of
    /// the beat and the resident consumer; a source still in use (a tick still
    /// settling) parks at the next one, and one already parked answers at once. The
    /// next receive attaches again.
    pub(crate) async fn hold_nothing(&self) {
        self.amqp.park_source().await;
    }

    /// Count a beat that started no tick because the claim store is down
    /// (`drain_ticks_total{outcome="claims_down"}`): while nothing is received, no
    /// message outcome moves, and this is what shows the outage.
    pub(crate) fn claims_down_tick(&self, duration: Duration) {
        self.observer.observe(&Event::Tick {
            queue: &self.tick.queue,
            outcome: TickOutcome::ClaimsDown,
            mode: self.tick.singleflight,
            kind: TickKind::Beat,
            duration,
        });
    }

    /// Feed a finished tick's claim health to the gate, with the claims its failed
    /// call may still take under `token` (released after the next probe answers).
    pub(crate) fn after_tick(&self, report: &TickReport, token: &LeaseToken) {
        if !self.tick.atomic_claim.enforces() {
            return;
        }
        let mut outage = self.claim_gate.outage();
        outage.keep_stale(token, report.stale_claims.clone());
        match report.claims {
            ClaimHealth::Failed => {
                if let Some(step) = outage.tick_failed(self.clock.now(), &mut rand::rng()) {
                    tracing::warn!(
                        queue = %self.tick.queue,
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
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

//! What one queue's ticks need, owned: the tick's settings and its ports.

use std::sync::Arc;

use drain_core::LeaseToken;
use drain_core::ports::{ClaimStore, Clock, LeaseStore, MessageSource, Observer, Submitter};
use drain_core::tick::{TickConfig, TickControl, TickPorts, TickReport, run_tick};

/// One queue's ticks: the settings and the ports a tick borrows, owned, with the
/// instance id its lease tokens carry. A store port is `None` when nothing the
/// settings turn on uses it ([`TickPorts::missing`] says what a configuration lacks).
#[derive(Clone)]
pub struct Ticks {
    /// The tick's settings.
    pub tick: TickConfig,
    /// This process's id, written into every token (`DRAIN_INSTANCE_ID`).
    pub instance: String,
    /// Single-flight leases.
    pub leases: Option<Arc<dyn LeaseStore>>,
    /// Per-message claims.
    pub claims: Option<Arc<dyn ClaimStore>>,
    /// The queue.
    pub source: Arc<dyn MessageSource>,
    /// Where messages are resubmitted.
    pub target: Arc<dyn Submitter>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Decisions.
    pub observer: Arc<dyn Observer>,
}

impl Ticks {
    /// The ports of one tick, borrowed.
    #[must_use]
    pub fn ports(&self) -> TickPorts<'_> {
        let mut ports = TickPorts::new(&*self.source, &*self.target, &*self.clock, &*self.observer);
        if let Some(leases) = &self.leases {
            ports = ports.leases(&**leases);
        }
        if let Some(claims) = &self.claims {
            ports = ports.claims(&**claims);
        }
        ports
    }

    /// A fresh lease token of this instance, from the operating system's generator.
    #[must_use]
    pub fn token(&self) -> LeaseToken {
        LeaseToken::generate(&self.instance, &mut rand::rng())
    }

    /// One tick of `cfg` (the queue's own settings, or a variant: the resident
    /// consumer's) with a fresh token: its report and the token (the holder of any
    /// claims its failed claim call may still take).
    pub async fn tick(&self, cfg: &TickConfig, control: &TickControl) -> (TickReport, LeaseToken) {
        let token = self.token();
        let report = run_tick(cfg, &self.ports(), &token, control).await;
        (report, token)
    }
}

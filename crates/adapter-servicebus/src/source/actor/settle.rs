//! Settlements that need the receiver itself (`rejected`, `modified`): abandon on
//! Service Bus and dead-letter. A failed one means the link is gone.

use drain_core::PortError;

use super::{Actor, closed, lock_expired, lock_lost};
use crate::error;
use crate::profile::Settle;
use crate::source::held::Gone;

/// An owned [`Settle`].
pub(in crate::source) enum Settlement {
    Abandon,
    DeadLetter { reason: String, description: String },
}

impl Settlement {
    fn as_settle(&self) -> Settle<'_> {
        match self {
            Settlement::Abandon => Settle::Abandon,
            Settlement::DeadLetter { reason, description } => Settle::DeadLetter { reason, description },
        }
    }
}

impl Actor {
    pub(super) async fn settle(&mut self, handle: u64, settlement: &Settlement) -> Result<(), PortError> {
        let tracked = match self.held.take(handle) {
            Ok((tracked, _)) if tracked.generation == self.generation => tracked,
            Ok(_) | Err(Gone::LockLost) => return Err(lock_lost(&self.what, handle)),
            Err(Gone::Expired) => return Err(lock_expired(&self.what, handle)),
            Err(Gone::Closed) => return Err(closed(&self.what)),
        };
        let Some(link) = &self.link else {
            return Err(lock_lost(&self.what, handle));
        };
        let outcome = self.endpoint.profile.outcome(settlement.as_settle());
        match link.receiver.dispose(tracked.info, outcome).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let err = error::disposition_error(&self.what, &e);
                tracing::warn!(source = %self.what, error = %err, "{} failed; the link is gone", settlement.as_settle().name());
                self.link_lost(err).await;
                Err(lock_lost(&self.what, handle))
            }
        }
    }
}

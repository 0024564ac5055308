//! What one tick has learnt about its stores so far.
//!
//! * A store call on the tick's path (acquire, claim, settle) that **timed out**
//!   marks that store *down* for the rest of the tick: no further call is made on
//!   that path that would wait out another timeout (a frozen store otherwise costs
//!   one timeout per operation: acquire, claim, settle, release). The one exception
//!   is the best-effort release of an acquire that timed out (see
//!   `run_tick`). Renewals run beside the drain, never delay it, and
//!   mark nothing. Other errors (refused, reset, a missing right) fail at once and
//!   mark nothing down: the next call may well succeed.
//! * **Any** claim-store error (or a claim store known down) means the tick stops
//!   receiving: what it holds is abandoned, and receiving more could only abandon
//!   more, each abandon costing the message a delivery at the broker.
//!
//! * A claim call that failed in a way that may still have run (it timed out, its
//!   connection broke, its answer could not be read: [`PortError::may_have_run`])
//!   may take its claims late, with this tick's token, for messages the tick gave
//!   back: their ids are kept for the report's `stale_claims`.
//!
//! When the lease store and the claim store are the same object (one store serving
//! both ports, as drain's binary composes them), what is learnt about one holds for
//! the other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::error::{ErrorKind, PortError};
use crate::ports::MessageId;
use crate::tick::TickPorts;

#[derive(Debug, Default)]
pub(super) struct Health {
    /// Lease store and claim store are one object.
    shared: bool,
    lease_down: AtomicBool,
    claims_down: AtomicBool,
    claims_failed: AtomicBool,
    /// Ids of claim calls that failed but may still have run.
    maybe_claimed: Mutex<Vec<MessageId>>,
}

impl Health {
    pub(super) fn new(ports: &TickPorts<'_>) -> Self {
        Health { shared: same_object(ports), ..Health::default() }
    }

    /// The lease store's acquire timed out.
    pub(super) fn lease_timed_out(&self) {
        set(&self.lease_down);
        if self.shared {
            set(&self.claims_down);
            set(&self.claims_failed);
        }
    }

    /// The claim store answered `e`.
    pub(super) fn claims_error(&self, e: &PortError) {
        set(&self.claims_failed);
        if e.kind == ErrorKind::Timeout {
            set(&self.claims_down);
            if self.shared {
                set(&self.lease_down);
            }
        }
    }

    /// A claim call for `ids` failed in a way that may still take its claims.
    pub(super) fn maybe_claimed(&self, ids: &[MessageId]) {
        self.maybe_claimed.lock().unwrap_or_else(PoisonError::into_inner).extend_from_slice(ids);
    }

    /// The ids of every claim call that failed but may still have run, in call order.
    pub(super) fn take_maybe_claimed(&self) -> Vec<MessageId> {
        std::mem::take(&mut *self.maybe_claimed.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// A lease call timed out in this tick: make no further one (but see the module docs).
    pub(super) fn lease_down(&self) -> bool {
        self.lease_down.load(Ordering::Acquire)
    }

    /// A claim call timed out in this tick: make no further one.
    pub(super) fn claims_down(&self) -> bool {
        self.claims_down.load(Ordering::Acquire)
    }

    /// The claim store failed (or is known down) in this tick: receive nothing more.
    pub(super) fn claims_failed(&self) -> bool {
        self.claims_failed.load(Ordering::Acquire)
    }
}

fn set(flag: &AtomicBool) {
    flag.store(true, Ordering::Release);
}

/// Whether the two store ports are one object. Zero-sized stores are never taken for
/// one: two distinct ones may share an address.
fn same_object(ports: &TickPorts<'_>) -> bool {
    match (ports.leases, ports.claims) {
        (Some(leases), Some(claims)) => size_of_val(leases) != 0 && std::ptr::addr_eq(leases, claims),
        _ => false,
    }
}

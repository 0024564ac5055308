//! What one tick has learnt about its stores so far.
//!
//! A store call on the tick's path (acquire, claim, settle) that **timed out** marks
//! that store *down* for the rest of the tick: no further call is made on that path
//! that would wait out another timeout (a frozen store otherwise costs one timeout
//! per operation: acquire, claim, settle, release). The one exception is the
//! best-effort release of an acquire that timed out (see `run_tick`). Renewals run
//! beside the drain, never delay it, and mark nothing. Other errors (refused, reset,
//! a missing right) fail at once and mark nothing down: the next call may well
//! succeed. (What a claim-store failure means for the receiving is the planner's:
//! `planner.rs`.)
//!
//! When the lease store and the claim store are the same object (one store serving
//! both ports, as drain's binary composes them), what is learnt about one holds for
//! the other.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{ErrorKind, PortError};
use crate::tick::TickPorts;

#[derive(Debug, Default)]
pub(super) struct Health {
    /// Lease store and claim store are one object.
    shared: bool,
    lease_down: AtomicBool,
    claims_down: AtomicBool,
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
        }
    }

    /// The claim store answered `e`.
    pub(super) fn claims_error(&self, e: &PortError) {
        if e.kind == ErrorKind::Timeout {
            set(&self.claims_down);
            if self.shared {
                set(&self.lease_down);
            }
        }
    }

    /// A lease call timed out in this tick: make no further one (but see the module docs).
    pub(super) fn lease_down(&self) -> bool {
        self.lease_down.load(Ordering::Acquire)
    }

    /// A claim call timed out in this tick (or the lease store did, one object
    /// serving both): make no further one.
    pub(super) fn claims_down(&self) -> bool {
        self.claims_down.load(Ordering::Acquire)
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

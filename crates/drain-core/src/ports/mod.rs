//! The ports: the traits adapters implement and the core calls.
//!
//! | port | what for | required |
//! |---|---|---|
//! | [`LeaseStore`] | single-flight leases with fences; owner claims | when single-flight computes, and for owner work that takes claims |
//! | [`ClaimStore`] | the per-message claim | when the atomic claim computes |
//! | [`OwnerClaims`] | read-only peeks at owners' claims | when claim-aware admission computes |
//! | [`ReleaseWake`] | the release wake-up (optional capability) | when the release wake is wanted |
//! | [`DrainStamps`] | when each owner's latest drain began (optional capability) | when served requests are skipped |
//! | [`FenceMarks`] | the highest fence each resource accepted, to refuse stale writers | where writes are checked against fences |
//! | [`FencedWrites`] | values written only while their fence is the lease's current one | where writes land in the lease's store |
//! | [`MessageSource`], [`Submitter`] | the queue and the target | for a tick |
//! | [`Clock`], [`Observer`] | time and decisions | always |
//!
//! Each trait states its contract as rules, each sentence followed by the name of
//! its rule; `testkit::contract` checks every rule against an implementation, and
//! names the rule when one is broken. A store that can answer MUST answer: an `Err`
//! from a healthy store breaks a rule too (rule `store.answers`). Every call MUST
//! come back within a bounded time, with `Err` when the store did not answer within
//! the adapter's own timeout: a call that waits for ever on a store that is down
//! stalls the tick that made it (rule `store.timeout`). An error MUST be marked
//! never sent ([`PortError::never_sent`](crate::PortError::never_sent)) only when the
//! request cannot have reached the store: a call that timed out may still run when
//! the server answers again, and a caller told it never ran does not clean up after
//! it (rule `store.never_sent`). Expiry MUST be judged on one
//! clock, the store's: every instance of a store (each process of a fleet, each
//! connection) agrees on whether a lease or a claim still holds, however far the
//! callers' own clocks are apart, so a store on a server computes and compares
//! expiry times there and never from the caller's clock (rule `store.one_clock`).
//! An error kind says
//! what went wrong in words that fit every store ([`ErrorKind`](crate::ErrorKind));
//! each adapter documents how its driver's errors map to them. The ports speak of leases, fences and claims;
//! how a store keeps them (keys, rows, documents) is the adapter's business.

mod claim;
mod clock;
mod drained;
mod lease;
mod marks;
mod observer;
mod owners;
mod source;
mod submit;
mod wake;
mod writes;

pub use claim::{
    ClaimState, ClaimStore, ClaimTtls, SettleAction, SettleResult, SettledThenClaimed, Settlement,
    settle_then_claim_in_two_calls,
};
pub use clock::Clock;
pub use drained::{DrainStamps, StampedClaim};
pub use lease::{Acquire, Fence, Holding, LeaseKind, LeaseName, LeaseStore, Release, Renew};
pub use marks::{FenceMarks, FenceVerdict};
pub use observer::{NoopObserver, Observer};
pub use owners::{OwnerClaim, OwnerClaims, StoreOffers};
pub use source::{Capabilities, Delivery, DeliveryHandle, Message, MessageId, MessageSource, PropertyValue};
pub use submit::{SubmitContext, Submitter};
pub use wake::{ReleaseWake, Releases, Waiter, WakeRelease};
pub use writes::{FencedWrites, WriteVerdict};

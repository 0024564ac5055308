//! Service Bus lock renewal, all of it: what a lock is, how to renew one, when, and
//! who does it.
//!
//! * `lock_token`: the lock token of a delivery and when its lock expires.
//! * `request`: the `com.microsoft:renew-lock` call on `$management`.
//! * `schedule`: when to renew (pure).
//! * `renew_loop`: the one loop that renews a lock until told to stop.
//! * `automatic`: the source wrapper that renews every delivery it hands out.
//! * `by_hand`: [`LockRenewal`], the same loop started by the caller.
//!
//! The source's own `renew_lock` (in `source/`) sends the request through the
//! `$management` client of its live link, which only the source's task can attach.
//!
//! The CBS token that authenticates a connection is a different thing, kept fresh by
//! [`crate::token_refresh`].

mod automatic;
mod by_hand;
mod lock_token;
mod renew_loop;
mod request;
mod schedule;

pub use automatic::LockEvent;
pub(crate) use automatic::{AutoRenew, DeliveryLock, LockLookup};
pub use by_hand::LockRenewal;
pub use lock_token::LockToken;
pub(crate) use lock_token::{expired, locked_until_ms, unix_now_ms};
pub use renew_loop::RenewEvent;
pub(crate) use renew_loop::renew_until;
pub(crate) use request::{RenewLockRequest, lock_duration, renew_error};
pub use schedule::RenewSchedule;

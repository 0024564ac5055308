//! Claim-aware owner admission: a pure, sans-IO scheduler of owner turns.
//!
//! The [`Scheduler`] decides *which owner's drain work runs next*; the driver (the app,
//! or a simulation) does the work. It performs no I/O, reads no clock (every call takes
//! `now`), draws its jitter from an injected [`rand::Rng`] (seed it and a run repeats
//! exactly), and reports every decision as an [`Event`](crate::Event) to poll.
//!
//! # States
//!
//! An owner is at most once in the scheduler, in exactly one state ([`OwnerState`]):
//!
//! ```text
//!                  request
//!   (unknown) ----------------> Queued{entry} <------ handle_timeout, (c) -------+
//!       ^                        |      |  ^                                      |
//!       |  poll_action: initial  |      |  |                                  Timer{due}
//!       |  entry, On or Shadow   v      |  |                                   ^      ^
//!       |                     Peeking   |  |                                   |      |
//!       |                      |   |    |  |      on_peek: Busy (On)           |      |
//!       |    on_peek: Free,    |   +----|--|-----------------------------------+      |
//!       |    Error, or Busy    v        |  |                                          |
//!       |    (Shadow)        Ready      |  |                                          |
//!       |                      |     (a)|  |(b)                                       |
//!       |          poll_action |        |  |                                          |
//!       |                      v        v  |                                          |
//!       +---- on_turn: Done --- Running{dirty} ---- on_turn: ClaimBusy (On), Failed --+
//!             (not dirty)
//!
//!   (a) poll_action: a continuation, or an initial entry with the switch Off
//!   (b) on_turn: more (as a continuation); dirty, or ClaimBusy with Off/Shadow (initial)
//!   (c) on_release: a claim wait (held peek or claim-busy turn) with release_wake On
//!
//!   a timer beyond max_retry_timers, or anything that would continue after close():
//!                       HandedOff --poll_handoff--> (unknown)
//! ```
//!
//! * An *initial* entry (a fresh request, a fired timer, a dirty or claim-busy re-run)
//!   is peeked before launch when the switch computes (On or Shadow); several waiting
//!   owners go out in one [`Action::Peek`], one round trip. A *continuation* (the last
//!   turn said `more`) launches without a peek: it just held the claim.
//! * With the switch On, a held claim or a claim-busy turn waits a jittered
//!   `U[backoff_min, backoff_max]` retry timer instead of re-entering at once; a
//!   request during the timer does not pull it forward. Shadow emits the same
//!   decisions (`mode` Shadow) but behaves as Off; Off never peeks.
//! * With [`SchedulerConfig::release_wake`] On, a release notification
//!   ([`Scheduler::on_release`]: the holder released the owner's claim, and the driver
//!   heard of it, e.g. a message the release published to one waiting instance) ends
//!   a claim wait at once: the owner is queued and peeked again. The jittered window
//!   stays the backstop for releases nobody reports (a crashed holder, a lost
//!   message). The window alone cuts claim-busy turns but delays the requests that
//!   arrive while an owner waits; the wake-up keeps the cut without the delay
//!   (`drain simulate` measures both; docs/performance.md has the figures).
//! * With [`SchedulerConfig::skip_served`] On, the scheduler keeps when each waiting
//!   owner was last requested ([`Scheduler::request_made`]); a peek that answers a
//!   drain stamp after it ([`Peeked::drained`]: a drain began after the request and
//!   left nothing behind) forgets the owner instead of launching a turn that would
//!   find nothing. A request made after the mark is always served.
//! * Failed turns back off exponentially with full jitter, capped.
//! * Timers are capped ([`SchedulerConfig::max_retry_timers`]); the next one is handed
//!   back to the caller ([`Scheduler::poll_handoff`]) and counted, never dropped.
//!   [`Scheduler::close`] returns every pending intent.
//!
//! # Driving it
//!
//! ```
//! use drain_core::admission::{Action, OwnerId, PeekResult, Scheduler, SchedulerConfig, TurnOutcome};
//! use drain_core::Time;
//! use rand::SeedableRng;
//! use rand::rngs::SmallRng;
//!
//! let mut s = Scheduler::new(SchedulerConfig::default(), SmallRng::seed_from_u64(1));
//! let now = Time::ZERO;
//! let _ = s.request(now, OwnerId::from("tenant-a"));
//! while let Some(action) = s.poll_action(now) {
//!     match action {
//!         // One batched read of the owners' claim keys.
//!         // (Zip the owners with the store's answers; hand the vector back to reuse.)
//!         Action::Peek(mut owners) => {
//!             s.on_peek(now, owners.drain(..).map(|o| (o, PeekResult::Free)));
//!             s.recycle(owners);
//!         }
//!         // Run the owner's drain turn (here: it had nothing to do).
//!         Action::Launch { owner, .. } => s.on_turn(now, &owner, TurnOutcome::Done).unwrap(),
//!     }
//! }
//! while let Some(_event) = s.poll_event() { /* metrics, logs */ }
//! // Sleep until `s.next_deadline()` or the next request, then `s.handle_timeout(now)`.
//! assert_eq!(s.state_of(&OwnerId::from("tenant-a")), None);
//! ```

mod config;
mod driver;
mod scheduler;
mod turns;
mod types;

#[cfg(test)]
mod tests;

pub use crate::outcome::TurnOutcome;
pub use crate::owner::OwnerId;
pub use config::SchedulerConfig;
pub use driver::{DriverPorts, OwnerWork, drive};
pub use scheduler::Scheduler;
pub use turns::{OwnerTurns, Worked};
pub use types::{Action, Closed, Entry, NotRunning, OwnerState, PeekResult, Peeked, Requested, Woken};

//! The ports: async traits that adapters implement and the core calls.
//!
//! Each trait documents its contract in `# Errors` and MUST clauses; the shared
//! contract suites in `testkit::contract` check them against the in-memory
//! implementations and against the real adapters.

mod claim;
mod clock;
mod lease;
mod observer;
mod source;
mod submit;

pub use claim::{ClaimState, ClaimStore, SettleAction, SettleResult, Settlement};
pub use clock::Clock;
pub use lease::{Acquire, Holding, LeaseStore, Release, Renew};
pub use observer::{NoopObserver, Observer};
pub use source::{Capabilities, Delivery, DeliveryHandle, Message, MessageSource, PropertyValue};
pub use submit::{SubmitContext, Submitter};

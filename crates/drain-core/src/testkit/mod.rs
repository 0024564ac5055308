//! Test support for ports and the core (feature `testkit`): the contract suites
//! every implementation must pass, deliberately broken stores that prove the suites
//! catch what matters, and recorders for assertions.
//!
//! * [`contract`]: one suite per port, run against the in-memory ports
//!   ([`crate::memory`]) in drain-core's tests and against every real adapter in the
//!   adapter's tests, concurrency included. Each answers `Ok` with the rules it
//!   checked or `Err` naming the rule that broke.
//! * [`broken`]: stores with one defect each, and the rule each must fail.
//! * [`Forward`]: the one forwarding layer ([`crate::layer`]), here for store
//!   doubles: it forwards every call to a store through [`Hooks`] in which the
//!   double changes only what it needs to; [`TwoCalls`] is the hooks of a store
//!   without a one-call `settle_then_claim`.
//! * [`RecordingObserver`], [`RecordingSubmitter`], [`BacklogWork`], [`FailSettle`],
//!   [`OutageBy`]: parts of a test harness; [`TestRng`] and [`message`] make tokens and messages repeatable.
//!
//! Production code does not need this feature: the embedded default uses
//! [`crate::memory`] alone.

pub mod broken;
pub mod contract;

mod faults;
mod observer;
mod submitter;
mod work;

pub use crate::layer::{Answer, Call, Forward, Hooks, Run};
pub use faults::{FailSettle, OutageBy, TwoCalls};
pub use observer::RecordingObserver;
pub use submitter::RecordingSubmitter;
pub use work::BacklogWork;

use async_trait::async_trait;

use crate::error::ErrorKind;
use crate::memory::MemoryStore;
use crate::ports::{Message, MessageId, SettleAction, Settlement};

/// The memory store's outage: every call fails with a temporary connection error
/// until it ends.
#[async_trait]
impl contract::Outage for MemoryStore {
    async fn begin(&self) {
        self.set_failing(Some(ErrorKind::Connection));
    }

    async fn end(&self) {
        self.set_failing(None);
    }
}

/// A settlement of every id, the first and every other one after it marked done,
/// the rest released: a batch that exercises both branches of a settle call.
#[must_use]
pub fn half_done(ids: &[MessageId]) -> Vec<Settlement> {
    let action = |i: usize| if i.is_multiple_of(2) { SettleAction::Done } else { SettleAction::Release };
    ids.iter().enumerate().map(|(i, id)| Settlement { id: id.clone(), action: action(i) }).collect()
}

/// A message with `id` and a small body derived from it.
#[must_use]
pub fn message(id: &str) -> Message {
    Message {
        message_id: Some(MessageId::from(id)),
        body: format!("body of {id}").into_bytes(),
        content_type: Some("text/plain".to_owned()),
        ..Message::default()
    }
}

/// A deterministic [`rand::CryptoRng`] for tests only: SplitMix64 from a seed.
///
/// It is *not* cryptographically secure; it carries the marker so tests can make
/// [`crate::LeaseToken`]s reproducibly. Production code passes a real CSPRNG.
#[derive(Debug, Clone)]
pub struct TestRng(u64);

impl TestRng {
    /// A generator from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        TestRng(seed)
    }
}

impl rand::TryRng for TestRng {
    type Error = core::convert::Infallible;
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        // Upper half of the next 64-bit output.
        Ok((self.try_next_u64()? >> 32) as u32)
    }
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Ok(z ^ (z >> 31))
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let v = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}

impl rand::TryCryptoRng for TestRng {}

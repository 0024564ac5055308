//! In-memory implementations of every port, a virtual clock, and the contract
//! suites that every implementation — in memory or real — must pass.
//!
//! Enabled by the `testkit` feature. The in-memory ports serve three purposes:
//! the core's own tests, the simulator, and the binary's embedded single-process
//! default. They are never a stand-in for testing an adapter: adapters run
//! [`contract`] against real servers.

pub mod contract;

mod clock;
mod executor;
mod observer;
mod source;
mod store;
mod submitter;
mod work;

pub use clock::ManualClock;
pub use executor::block_on;
pub use observer::RecordingObserver;
pub use source::MemorySource;
pub use store::MemoryStore;
pub use submitter::RecordingSubmitter;
pub use work::BacklogWork;

use crate::ports::Message;

/// A message with `id` and a small body derived from it.
#[must_use]
pub fn message(id: &str) -> Message {
    Message {
        message_id: Some(id.to_owned()),
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

//! [`FencedWrites`] on the memory store: values by lease and key, written while the
//! fence is the lease's row's.

use async_trait::async_trait;

use super::store::{MemoryStore, State};
use crate::error::PortError;
use crate::ports::{Fence, FencedWrites, LeaseName, LeaseStore, WriteVerdict};

/// The current fence of `lease`: its latest acquire's, 0 when never taken.
pub(crate) fn current_fence(s: &State, lease: &LeaseName) -> u64 {
    s.leases.get(lease).map_or(0, |row| row.fence)
}

#[async_trait]
impl FencedWrites for MemoryStore {
    fn leases(&self) -> &dyn LeaseStore {
        self
    }

    async fn write_fenced(&self, fence: &Fence, key: &str, value: &[u8]) -> Result<WriteVerdict, PortError> {
        self.call("write_fenced", |s, _| {
            let current = current_fence(s, fence.lease());
            if current == 0 || current != fence.number() {
                return Ok(WriteVerdict::Stale { current });
            }
            s.values.insert((fence.lease().clone(), key.to_owned()), value.to_vec());
            Ok(WriteVerdict::Written)
        })
    }

    async fn read_fenced(&self, lease: &LeaseName, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        self.call("read_fenced", |s, _| Ok(s.values.get(&(lease.clone(), key.to_owned())).cloned()))
    }
}

//! The fenced writes of the broken stores.

use async_trait::async_trait;

use super::{BrokenStore, Defect, YieldNow};
use crate::error::PortError;
use crate::memory::store::State;
use crate::ports::{Fence, FencedWrites, LeaseName, LeaseStore, WriteVerdict};
use crate::time::Time;

impl BrokenStore {
    /// The name a value is kept under: by lease and key, or by key alone.
    fn value_name(&self, lease: &LeaseName, key: &str) -> (LeaseName, String) {
        let lease = if self.is(Defect::WriteKeysShared) { LeaseName::job("") } else { lease.clone() };
        (lease, key.to_owned())
    }

    /// The verdict for `fence` as this store decides it.
    fn write_verdict(&self, s: &State, now: Time, fence: &Fence) -> WriteVerdict {
        let row = s.leases.get(fence.lease());
        let current = row.map_or(0, |r| r.fence);
        let lands = match self.defect {
            Some(Defect::WriteAnyFence) => true,
            Some(Defect::WriteNotBelowFence) => fence.number() >= current && fence.number() > 0,
            Some(Defect::WriteOnlyWhileHeld) => {
                current == fence.number() && current > 0 && row.is_some_and(|r| r.holder(now).is_some())
            }
            _ => current == fence.number() && current > 0,
        };
        if lands { WriteVerdict::Written } else { WriteVerdict::Stale { current } }
    }
}

#[async_trait]
impl FencedWrites for BrokenStore {
    fn leases(&self) -> &dyn LeaseStore {
        self
    }

    async fn write_fenced(&self, fence: &Fence, key: &str, value: &[u8]) -> Result<WriteVerdict, PortError> {
        self.stall().await;
        if self.failing(Defect::WriteErrorAsStale) {
            return Ok(WriteVerdict::Stale { current: 0 });
        }
        let name = self.value_name(fence.lease(), key);
        let checked = if self.is(Defect::WriteCheckThenSet) {
            let verdict = self.call("write_fenced", |s, now| Ok(self.write_verdict(s, now, fence)))?;
            YieldNow(false).await;
            Some(verdict)
        } else {
            None
        };
        self.call("write_fenced", |s, now| {
            let verdict = checked.unwrap_or_else(|| self.write_verdict(s, now, fence));
            if verdict == WriteVerdict::Written {
                s.values.insert(name, value.to_vec());
            }
            Ok(verdict)
        })
    }

    async fn read_fenced(&self, lease: &LeaseName, key: &str) -> Result<Option<Vec<u8>>, PortError> {
        self.stall().await;
        if self.failing(Defect::WriteErrorAsStale) {
            return Ok(None);
        }
        let name = self.value_name(lease, key);
        self.call("read_fenced", |s, _| Ok(s.values.get(&name).cloned()))
    }
}

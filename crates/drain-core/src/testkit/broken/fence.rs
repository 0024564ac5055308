//! The broken stores' fence marks: the in-memory marks with the fence defects.

use std::time::Duration;

use async_trait::async_trait;

use super::{BrokenStore, Defect, YieldNow};
use crate::error::PortError;
use crate::memory::store::State;
use crate::ports::{FenceMarks, FenceVerdict};
use crate::time::Time;

/// How long a mark lives with [`Defect::MarksExpire`].
const MARK_TTL: Duration = Duration::from_millis(100);
/// How long a quiet mark lives with [`Defect::MarksLapseWhenQuiet`].
const QUIET_TTL: Duration = Duration::from_secs(1);

impl BrokenStore {
    /// The name a resource's mark is kept under (merged with `ResourcesShareMarks`).
    fn mark_name(&self, resource: &str) -> String {
        if self.is(Defect::ResourcesShareMarks) {
            resource.chars().filter(char::is_ascii_alphanumeric).collect()
        } else {
            resource.to_owned()
        }
    }

    fn live_mark(&self, s: &State, now: Time, name: &str) -> Option<u64> {
        let &(mark, raised) = s.marks.get(name)?;
        let ttl = match self.defect {
            Some(Defect::MarksExpire) => MARK_TTL,
            Some(Defect::MarksLapseWhenQuiet) => QUIET_TTL,
            _ => return Some(mark),
        };
        let lapsed = now.saturating_since(raised) >= ttl;
        (!lapsed).then_some(mark)
    }

    /// Whether `mark` is above `fence`, as the store compares them.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_wrap)]
    fn above(&self, mark: u64, fence: u64) -> bool {
        match self.defect {
            Some(Defect::FencesAsFloats) => mark as f64 > fence as f64,
            Some(Defect::FencesSigned) => mark as i64 > fence as i64,
            _ => mark > fence,
        }
    }

    /// Decide with the mark seen (`seen`), then write.
    fn admit_in(&self, s: &mut State, now: Time, name: &str, seen: Option<u64>, fence: u64) -> FenceVerdict {
        match seen {
            Some(mark) if self.above(mark, fence) || (mark == fence && self.is(Defect::EqualFenceRefused)) => {
                FenceVerdict::Stale { mark }
            }
            Some(_) if self.is(Defect::MarkNeverRaised) => FenceVerdict::Accepted,
            _ => {
                s.marks.insert(name.to_owned(), (fence, now));
                FenceVerdict::Accepted
            }
        }
    }
}

#[async_trait]
impl FenceMarks for BrokenStore {
    async fn admit(&self, resource: &str, fence: u64) -> Result<FenceVerdict, PortError> {
        self.stall().await;
        if self.failing(Defect::AdmitErrorAsAccepted) {
            return Ok(FenceVerdict::Accepted);
        }
        let name = self.mark_name(resource);
        if self.is(Defect::NonAtomicAdmit) {
            let seen = self.call("admit", |s, now| Ok(self.live_mark(s, now, &name)))?;
            YieldNow(false).await;
            return self.call("admit", |s, now| Ok(self.admit_in(s, now, &name, seen, fence)));
        }
        self.call("admit", |s, now| {
            let seen = self.live_mark(s, now, &name);
            Ok(self.admit_in(s, now, &name, seen, fence))
        })
    }
}

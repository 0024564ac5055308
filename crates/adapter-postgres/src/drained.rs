//! [`DrainStamps`] on PostgreSQL: the `drain_marks` table (`src/schema_v4.sql`), one
//! function per operation, every time on the server's clock.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `peek_marked` (K owners) | `peek_marked()` (as `peek_owners()`, or `peek_and_wait()` with a waiter, and each owner's mark) | 1 |
//! | `acquire_marked` | `acquire_marked()` (as `acquire()` or `acquire_or_wait()`, then the start noted) | 1 |
//! | `release_drained` | `release_drained()` (as `release_and_wake()`, then the start made the mark) | 1 |

use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, DrainStamps, Release, StampedClaim, Waiter, WakeRelease};
use drain_core::{LeaseToken, PortError};

use crate::store::{PostgresStore, acquire_answer, get, micros, one, owner_answers, owner_names};

#[drain_core::async_trait]
impl DrainStamps for PostgresStore {
    async fn peek_stamped(&self, owners: &[OwnerId], waiter: Option<&Waiter>) -> Result<Vec<StampedClaim>, PortError> {
        let op = "peek_marked";
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let names = owner_names(owners);
        let instance = waiter.map(|w| w.instance.as_str());
        let wait = waiter.map_or(0, |w| micros(w.ttl));
        let rows = self.call(op, |s| &s.peek_marked, &[&self.prefix(), &names, &instance, &wait]).await?;
        let claims = owner_answers(self, op, &rows, owners.len())?;
        let mut out = Vec::with_capacity(claims.len());
        for (claim, row) in claims.into_iter().zip(&rows) {
            let us = get::<Option<i64>>(self, op, row, 3)?;
            let drained = us.map(|us| Duration::from_micros(u64::try_from(us).unwrap_or(0)));
            out.push(StampedClaim { claim, drained });
        }
        Ok(out)
    }

    async fn acquire_stamped(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: Option<&Waiter>,
    ) -> Result<Acquire, PortError> {
        let op = "acquire_marked";
        let (ttl, wait) = (micros(ttl), waiter.map_or(0, |w| micros(w.ttl)));
        let instance = waiter.map(|w| w.instance.as_str());
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&self.prefix(), &owner.as_str(), &token.as_str(), &token.holder(), &ttl, &instance, &wait];
        let rows = self.call(op, |s| &s.acquire_marked, &params).await?;
        acquire_answer(self, op, one(self, op, &rows)?)
    }

    async fn release_drained(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        drained: bool,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        let op = "release_drained";
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
            [&self.prefix(), &owner.as_str(), &token.as_str(), &drained, &wake];
        let rows = self.call(op, |s| &s.release_drained, &params).await?;
        let row = one(self, op, &rows)?;
        let release = if get::<bool>(self, op, row, 0)? { Release::Released } else { Release::NotOwner };
        Ok(WakeRelease { release, woke: get(self, op, row, 1)? })
    }
}

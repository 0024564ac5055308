//! The release wake-up on PostgreSQL: waiters in a table, registered by the call
//! that found the claim held; a release deletes the oldest live registration and
//! NOTIFYs that instance's channel, in its own call.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `subscribe` | `wake_channel()`, then `LISTEN` on a dedicated connection | 2 (once per subscription) |
//! | `peek_and_wait` (K owners) | `peek_and_wait()` | 1 |
//! | `acquire_or_wait` | `acquire_or_wait()` | 1 |
//! | `release_and_wake` | `release_and_wake()` (the `NOTIFY` is delivered at commit) | 1 |

use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, OwnerClaim, Release, ReleaseWake, Releases, Waiter, WakeRelease};
use drain_core::{LeaseToken, PortError};

use crate::store::{PostgresStore, acquire_answer, get, micros, one, owner_answers, owner_names};

#[drain_core::async_trait]
impl ReleaseWake for PostgresStore {
    async fn subscribe(&self, instance: &str) -> Result<Releases, PortError> {
        let op = "subscribe";
        let rows = self.call(op, |s| &s.wake_channel, &[&self.prefix(), &instance]).await?;
        let channel: String = get(self, op, one(self, op, &rows)?, 0)?;
        crate::releases::subscribe(self.inner.config.clone(), channel, self.inner.counters.clone()).await
    }

    async fn peek_and_wait(&self, owners: &[OwnerId], waiter: &Waiter) -> Result<Vec<OwnerClaim>, PortError> {
        let op = "peek_and_wait";
        if owners.is_empty() {
            return Ok(Vec::new());
        }
        let names = owner_names(owners);
        let wait = micros(waiter.ttl);
        let rows = self.call(op, |s| &s.peek_and_wait, &[&self.prefix(), &names, &waiter.instance, &wait]).await?;
        owner_answers(self, op, &rows, owners.len())
    }

    async fn acquire_or_wait(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        ttl: Duration,
        waiter: &Waiter,
    ) -> Result<Acquire, PortError> {
        let op = "acquire_or_wait";
        let (ttl, wait) = (micros(ttl), micros(waiter.ttl));
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&self.prefix(), &owner.as_str(), &token.as_str(), &token.holder(), &ttl, &waiter.instance, &wait];
        let rows = self.call(op, |s| &s.acquire_or_wait, &params).await?;
        acquire_answer(self, op, one(self, op, &rows)?)
    }

    async fn release_and_wake(
        &self,
        owner: &OwnerId,
        token: &LeaseToken,
        wake: bool,
    ) -> Result<WakeRelease, PortError> {
        let op = "release_and_wake";
        let rows =
            self.call(op, |s| &s.release_and_wake, &[&self.prefix(), &owner.as_str(), &token.as_str(), &wake]).await?;
        let row = one(self, op, &rows)?;
        let release = if get::<bool>(self, op, row, 0)? { Release::Released } else { Release::NotOwner };
        Ok(WakeRelease { release, woke: get(self, op, row, 1)? })
    }
}

//! [`ClaimStore`] on PostgreSQL: `claim_batch()` and `settle_batch()` over arrays,
//! one call each; the tick's `settle_then_claim` sends both calls pipelined on one
//! connection, one round trip.

use std::time::Duration;

use drain_core::ports::{
    ClaimState, ClaimStore, ClaimTtls, MessageId, SettleAction, SettleResult, SettledThenClaimed, Settlement,
};
use drain_core::{LeaseToken, PortError};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::store::{PostgresStore, get, micros};

#[drain_core::async_trait]
impl ClaimStore for PostgresStore {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        let op = "claim_batch";
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let args = ClaimArgs::new(self.prefix(), queue, ids, token, pending_ttl);
        let rows = self.call(op, |s| &s.claim_batch, &args.params()).await?;
        self.claim_states(op, &rows, ids.len())
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        let op = "settle_batch";
        if settlements.is_empty() {
            return Ok(Vec::new());
        }
        let args = SettleArgs::new(self.prefix(), queue, settlements, token, done_ttl);
        let rows = self.call(op, |s| &s.settle_batch, &args.params()).await?;
        self.settle_results(op, &rows, settlements.len())
    }

    /// `settle_batch()` then `claim_batch()`, pipelined on one connection: one round
    /// trip, the server running them in that order (so the claims see the
    /// settlements), each in a transaction of its own. Unlike the two calls made one
    /// after the other, the claims are taken even when the server refused the
    /// settlements; a broken connection or the response timeout fails both.
    async fn settle_then_claim(
        &self,
        queue: &str,
        settlements: &[Settlement],
        ids: &[MessageId],
        token: &LeaseToken,
        ttls: ClaimTtls,
    ) -> SettledThenClaimed {
        let op = "settle_then_claim";
        if settlements.is_empty() || ids.is_empty() {
            return drain_core::ports::settle_then_claim_in_two_calls(self, queue, settlements, ids, token, ttls).await;
        }
        let settle = SettleArgs::new(self.prefix(), queue, settlements, token, ttls.done);
        let claim = ClaimArgs::new(self.prefix(), queue, ids, token, ttls.pending);
        let [settled, claimed] = self
            .call_pipelined(op, [(|s| &s.settle_batch, &settle.params()), (|s| &s.claim_batch, &claim.params())])
            .await;
        SettledThenClaimed {
            settled: settled.and_then(|rows| self.settle_results(op, &rows, settlements.len())),
            claimed: claimed.and_then(|rows| self.claim_states(op, &rows, ids.len())),
        }
    }
}

impl PostgresStore {
    /// `claim_batch()`'s rows as claim states, one per id.
    fn claim_states(&self, op: &str, rows: &[Row], ids: usize) -> Result<Vec<ClaimState>, PortError> {
        if rows.len() != ids {
            return Err(self.bad(op, &format!("{} states for {ids} ids", rows.len())));
        }
        rows.iter()
            .map(|row| match get::<Option<String>>(self, op, row, 1)?.as_deref() {
                Some("claimed") => Ok(ClaimState::Claimed),
                Some("done") => Ok(ClaimState::Done),
                Some("pending") => {
                    let holder = get::<Option<String>>(self, op, row, 2)?
                        .ok_or_else(|| self.bad(op, "a pending claim without a holder"))?;
                    Ok(ClaimState::PendingElsewhere { holder })
                }
                other => Err(self.bad(op, &format!("the claim state {other:?}"))),
            })
            .collect()
    }

    /// `settle_batch()`'s rows as settle results, one per settlement.
    fn settle_results(&self, op: &str, rows: &[Row], settlements: usize) -> Result<Vec<SettleResult>, PortError> {
        if rows.len() != settlements {
            return Err(self.bad(op, &format!("{} results for {settlements} settlements", rows.len())));
        }
        rows.iter()
            .map(|row| Ok(if get::<bool>(self, op, row, 1)? { SettleResult::Settled } else { SettleResult::NotOwner }))
            .collect()
    }
}

/// `claim_batch()`'s arguments, in the function's order (`schema_v1.sql`).
struct ClaimArgs<'a> {
    prefix: &'a str,
    queue: &'a str,
    types: Vec<&'static str>,
    ids: Vec<Vec<u8>>,
    token: &'a str,
    holder: &'a str,
    ttl_us: i64,
}

impl<'a> ClaimArgs<'a> {
    fn new(prefix: &'a str, queue: &'a str, ids: &[MessageId], token: &'a LeaseToken, ttl: Duration) -> Self {
        let (types, ids) = id_parts(ids.iter().cloned());
        ClaimArgs { prefix, queue, types, ids, token: token.as_str(), holder: token.holder(), ttl_us: micros(ttl) }
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        [&self.prefix, &self.queue, &self.types, &self.ids, &self.token, &self.holder, &self.ttl_us]
    }
}

/// `settle_batch()`'s arguments, in the function's order (`schema_v1.sql`): per
/// settlement, whether it marks the claim done (otherwise it frees it).
struct SettleArgs<'a> {
    prefix: &'a str,
    queue: &'a str,
    types: Vec<&'static str>,
    ids: Vec<Vec<u8>>,
    done: Vec<bool>,
    token: &'a str,
    done_us: i64,
}

impl<'a> SettleArgs<'a> {
    fn new(prefix: &'a str, queue: &'a str, settlements: &[Settlement], token: &'a LeaseToken, ttl: Duration) -> Self {
        let (types, ids) = id_parts(settlements.iter().map(|s| s.id.clone()));
        let done = settlements.iter().map(|s| s.action == SettleAction::Done).collect();
        SettleArgs { prefix, queue, types, ids, done, token: token.as_str(), done_us: micros(ttl) }
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        [&self.prefix, &self.queue, &self.types, &self.ids, &self.done, &self.token, &self.done_us]
    }
}

/// A message id as the claims table keys it: its type and its bytes.
fn id_parts(ids: impl Iterator<Item = MessageId>) -> (Vec<&'static str>, Vec<Vec<u8>>) {
    ids.map(|id| {
        let t = id.type_name();
        let bytes = match id {
            MessageId::String(s) => s.into_bytes(),
            MessageId::Ulong(n) => n.to_be_bytes().to_vec(),
            MessageId::Uuid(b) => b.to_vec(),
            MessageId::Binary(b) => b,
            // A type a later drain-core adds: its Debug text keeps it apart from the others.
            #[allow(unreachable_patterns)]
            other => format!("{other:?}").into_bytes(),
        };
        (t, bytes)
    })
    .unzip()
}

//! A `LeaseStore` + `ClaimStore` of your own (rows, as a relational store keeps them), passing drain-core's
//! contract suites: `cargo run -p drain-core --features testkit --example custom_store`.

use std::collections::HashMap;
use std::sync::{Mutex, atomic::AtomicBool, atomic::Ordering::Relaxed};
use std::time::Duration;

use drain_core::memory::{ManualClock, block_on};
use drain_core::ports::{Acquire, ClaimState, ClaimStore, Clock, Holding, LeaseName, LeaseStore, MessageId};
use drain_core::ports::{Release, Renew, SettleAction, SettleResult, Settlement};
use drain_core::testkit::contract::{self, ContractEnv, Outage};
use drain_core::{ErrorKind, LeaseToken, PortError, Time};

/// A row of `leases` or `claims`; one whose `until` has passed holds nothing.
#[derive(Default)]
struct Row {
    token: String,
    until: Time,
    fence: u64,
    done: bool,
}

type Tables = (HashMap<LeaseName, Row>, HashMap<(String, MessageId), Row>);

/// One instance of the store: a process's way to the database the fleet shares.
struct RowStore<'a> {
    clock: &'a dyn Clock,
    tables: &'a Mutex<Tables>,
    down: &'a AtomicBool,
}

impl RowStore<'_> {
    fn tx<T>(&self, f: impl FnOnce(&mut Tables, Time) -> T) -> Result<T, PortError> {
        let mut tables = self.tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let refused = || PortError::new(ErrorKind::Connection, "row store: connection refused");
        (!self.down.load(Relaxed)).then(|| f(&mut tables, self.clock.now())).ok_or_else(refused)
    }

    fn mine(&self, lease: &LeaseName, token: &LeaseToken, f: impl FnOnce(&mut Row, Time)) -> Result<bool, PortError> {
        self.tx(|(leases, _), now| match leases.get_mut(lease) {
            Some(row) if row.until > now && row.token == token.as_str() => {
                f(row, now);
                true
            }
            _ => false,
        })
    }
}

fn holding(row: &Row, now: Time) -> Holding {
    Holding {
        holder: LeaseToken::holder_of(&row.token).into(),
        remaining: row.until.saturating_since(now),
        fence: row.fence,
    }
}

#[drain_core::async_trait]
impl LeaseStore for RowStore<'_> {
    async fn acquire(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Acquire, PortError> {
        self.tx(|(leases, _), now| {
            let row = leases.entry(lease.clone()).or_default();
            if row.until > now {
                let Holding { holder, remaining, .. } = holding(row, now);
                return Acquire::Busy { holder, remaining };
            }
            (row.token, row.until, row.fence) = (token.as_str().into(), now + ttl, row.fence + 1);
            Acquire::Acquired { fence: row.fence }
        })
    }

    async fn release(&self, lease: &LeaseName, token: &LeaseToken) -> Result<Release, PortError> {
        let ours = self.mine(lease, token, |row, _| row.until = Time::ZERO)?;
        Ok(if ours { Release::Released } else { Release::NotOwner })
    }

    async fn renew(&self, lease: &LeaseName, token: &LeaseToken, ttl: Duration) -> Result<Renew, PortError> {
        Ok(if self.mine(lease, token, |row, now| row.until = now + ttl)? { Renew::Renewed } else { Renew::Lost })
    }

    async fn peek(&self, lease: &LeaseName) -> Result<Option<Holding>, PortError> {
        self.tx(|(leases, _), now| leases.get(lease).filter(|row| row.until > now).map(|row| holding(row, now)))
    }
}

#[drain_core::async_trait]
impl ClaimStore for RowStore<'_> {
    async fn claim_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
        token: &LeaseToken,
        pending_ttl: Duration,
    ) -> Result<Vec<ClaimState>, PortError> {
        self.tx(|(_, claims), now| {
            let mut claim = |id: &MessageId| {
                let row = claims.entry((queue.to_owned(), id.clone())).or_default();
                match row.until > now {
                    true if row.done => ClaimState::Done,
                    true => ClaimState::PendingElsewhere { holder: LeaseToken::holder_of(&row.token).into() },
                    false => {
                        *row = Row { token: token.as_str().into(), until: now + pending_ttl, ..Row::default() };
                        ClaimState::Claimed
                    }
                }
            };
            ids.iter().map(&mut claim).collect()
        })
    }

    async fn settle_batch(
        &self,
        queue: &str,
        settlements: &[Settlement],
        token: &LeaseToken,
        done_ttl: Duration,
    ) -> Result<Vec<SettleResult>, PortError> {
        self.tx(|(_, claims), now| {
            let mut settle = |s: &Settlement| match claims.get_mut(&(queue.to_owned(), s.id.clone())) {
                Some(row) if row.until > now && !row.done && row.token == token.as_str() => {
                    match s.action {
                        SettleAction::Done => (row.done, row.until) = (true, now + done_ttl),
                        SettleAction::Release => row.until = Time::ZERO,
                    }
                    SettleResult::Settled
                }
                _ => SettleResult::NotOwner,
            };
            settlements.iter().map(&mut settle).collect()
        })
    }
}

/// The suites' outage: the store refuses every call until it ends.
#[drain_core::async_trait]
impl Outage for RowStore<'_> {
    async fn begin(&self) {
        self.down.store(true, Relaxed);
    }
    async fn end(&self) {
        self.down.store(false, Relaxed);
    }
}

fn main() {
    let clock = ManualClock::new();
    let (tables, down) = (Mutex::default(), AtomicBool::new(false));
    // Three instances on one database, as three processes of a fleet: the suites
    // spread their concurrent callers over them and check that they agree on expiry.
    let fleet: Vec<RowStore<'_>> = (0..3).map(|_| RowStore { clock: &clock, tables: &tables, down: &down }).collect();
    let all: Vec<&RowStore<'_>> = fleet.iter().collect();
    let env = ContractEnv::new(&clock).outage(&fleet[0]).instances(&all);
    let store = &fleet[0];
    let leases = block_on(&clock, contract::lease_store(store, &env)).unwrap_or_else(|v| panic!("{v}"));
    let claims = block_on(&clock, contract::claim_store(store, &env)).unwrap_or_else(|v| panic!("{v}"));
    assert!(leases.skipped.is_empty() && claims.skipped.is_empty());
    println!("the row store keeps {} lease and {} claim rules", leases.checked.len(), claims.checked.len());
}

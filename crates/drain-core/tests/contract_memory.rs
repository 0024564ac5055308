//! The shared contract suites against the in-memory ports (the real adapters run
//! the same suites against real servers).

use std::sync::Arc;
use std::time::Duration;

use drain_core::KeySpace;
use drain_core::ports::Clock;
use drain_core::testkit::contract::{self, ContractEnv};
use drain_core::testkit::{ManualClock, MemorySource, MemoryStore, block_on};

fn env(clock: &ManualClock) -> ContractEnv<'_> {
    ContractEnv { clock, keys: KeySpace::new("contract"), short_ttl: Duration::from_millis(300) }
}

#[test]
fn memory_store_passes_the_lease_contract() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    block_on(&clock, contract::lease_store(&store, &env(&clock)));
}

#[test]
fn memory_store_passes_the_claim_contract() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    block_on(&clock, contract::claim_store(&store, &env(&clock)));
}

#[test]
fn memory_source_passes_the_source_contract() {
    let clock = Arc::new(ManualClock::new());
    let source = MemorySource::new(clock.clone() as Arc<dyn Clock>, Duration::from_secs(30));
    // The in-memory source keeps its dead letters in a list rather than a queue.
    block_on(&clock, contract::message_source(&source, &source, None, Duration::from_millis(200)));
    let dead = source.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0.message_id.as_deref(), Some("c3"));
    assert_eq!(dead[0].1, "ContractTest");
}

#[test]
fn memory_source_redelivers_after_lock_expiry() {
    let clock = Arc::new(ManualClock::new());
    let source = MemorySource::new(clock.clone() as Arc<dyn Clock>, Duration::from_secs(30));
    source.push(drain_core::testkit::message("x"));
    let first = block_on(&clock, drain_core::ports::MessageSource::receive(&source, 10, Duration::ZERO)).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].delivery_count, 0);
    // Within the lock: nothing to receive.
    clock.advance(Duration::from_secs(29));
    assert!(
        block_on(&clock, drain_core::ports::MessageSource::receive(&source, 10, Duration::ZERO)).unwrap().is_empty()
    );
    clock.advance(Duration::from_secs(2));
    let again = block_on(&clock, drain_core::ports::MessageSource::receive(&source, 10, Duration::ZERO)).unwrap();
    assert_eq!(again.len(), 1, "redelivered after the lock expired");
    assert_eq!(again[0].delivery_count, 1);
    let late = block_on(&clock, drain_core::ports::MessageSource::complete(&source, first[0].handle));
    assert_eq!(late.unwrap_err().kind, drain_core::ErrorKind::LockLost, "the old lock is gone");
}

#[test]
fn memory_store_reports_wrong_type() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    let keys = KeySpace::new("t");
    let lk = keys.lease("q");
    store.set_foreign_type(&lk.lease);
    let token = drain_core::LeaseToken::generate("me", &mut drain_core::testkit::TestRng::new(1));
    let e = block_on(&clock, drain_core::ports::LeaseStore::acquire(&store, &lk, &token, Duration::from_secs(5)))
        .unwrap_err();
    assert_eq!(e.kind, drain_core::ErrorKind::WrongType);
    assert!(!e.is_temporary());
}

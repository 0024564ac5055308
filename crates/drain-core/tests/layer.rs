//! The one forwarding layer: a store wrapped in `layer::Forward` with hooks that
//! change nothing keeps every store contract (so every broken store is still caught
//! through it, by its rule), and hooks that hide an optional port hide it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use drain_core::layer::Forward;
use drain_core::memory::{ManualClock, MemoryStore, block_on};
use drain_core::ports::{
    ClaimStore, Clock, DrainStamps, FenceMarks, LeaseStore, OwnerClaims, ReleaseWake, StoreOffers,
};
use drain_core::testkit::broken::{BrokenStore, Defect};
use drain_core::testkit::contract::{self, Checked, ContractEnv, Port, Rule, Violation};
use drain_core::{ErrorKind, LeaseToken, OwnerId};

/// The suites of every port the layer forwards, against `store`.
async fn forwarded_suites<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: LeaseStore + ClaimStore + OwnerClaims + ReleaseWake + FenceMarks + DrainStamps,
{
    let mut all = Checked::default();
    for checked in [
        contract::lease_store(store, env).await?,
        contract::claim_store(store, env).await?,
        contract::owner_claims(store, env).await?,
        contract::release_wake(store, env).await?,
        contract::fence_marks(store, env).await?,
        contract::drain_stamps(store, env).await?,
    ] {
        all.checked.extend(checked.checked);
        all.skipped.extend(checked.skipped);
    }
    Ok(all)
}

/// The ports of the suites above.
fn forwarded(port: Port) -> bool {
    matches!(port, Port::Lease | Port::Claim | Port::Owners | Port::Wake | Port::Fence | Port::Stamps)
}

#[test]
fn the_memory_store_through_the_layer_passes_every_forwarded_suite() {
    let clock = Arc::new(ManualClock::new());
    let inner = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
    let store = Forward::new(inner.clone(), ());
    assert_eq!(store.offers(), StoreOffers::ALL);
    let all = [&store, &store, &store];
    let env = ContractEnv::new(&*clock).outage(&*inner).instances(&all);
    let checked = block_on(&clock, forwarded_suites(&store, &env)).unwrap_or_else(|v| panic!("{v}"));
    assert!(checked.skipped.is_empty(), "{:?}", checked.skipped);
    let seen: BTreeSet<Rule> = checked.checked.into_iter().collect();
    let missed: Vec<&str> =
        Rule::ALL.iter().filter(|r| forwarded(r.port()) && !seen.contains(r)).map(|r| r.id()).collect();
    assert!(missed.is_empty(), "rules no suite checked through the layer: {missed:?}");
}

/// A layer that lost or changed a call would let some defect through: every broken
/// store of the forwarded ports is caught through it, by the rule its defect breaks.
#[test]
fn every_broken_store_is_caught_through_the_layer() {
    let mut wrong = Vec::new();
    for &defect in Defect::ALL.iter().filter(|d| forwarded(d.rule().port())) {
        let clock = Arc::new(ManualClock::new());
        clock.advance(Duration::from_secs(24 * 3600));
        let broken = BrokenStore::new(clock.clone() as Arc<dyn Clock>, defect);
        let (ahead, behind) = (broken.instance().clock_skew(3_600_000), broken.instance().clock_skew(-3_600_000));
        let [a, b, c] = [broken.instance(), ahead, behind].map(|s| Forward::new(Arc::new(s), ()));
        let all = [&a, &b, &c];
        let env = ContractEnv::new(&*clock).outage(&broken).instances(&all);
        match block_on(&clock, forwarded_suites(&a, &env)) {
            Err(v) if v.rule == defect.rule() => {}
            Err(v) => wrong.push(format!("{defect:?}: wanted `{}`, got {v}", defect.rule().id())),
            Ok(_) => wrong.push(format!("{defect:?}: every suite passed through the layer")),
        }
    }
    assert!(wrong.is_empty(), "not caught through the layer:\n{}", wrong.join("\n"));
}

#[test]
fn hooks_that_hide_a_port_hide_its_accessor_and_fail_its_calls_unsent() {
    let clock = Arc::new(ManualClock::new());
    let inner = Arc::new(MemoryStore::new(clock.clone() as Arc<dyn Clock>));
    let stamps_only = Forward::new(inner.clone(), StoreOffers { release_wake: false, drain_stamps: true });
    assert!(stamps_only.release_wake().is_none());
    assert!(stamps_only.drain_stamps().is_some());
    assert_eq!(stamps_only.offers(), StoreOffers { release_wake: false, drain_stamps: true });
    let owner = OwnerId::from("o");
    let e = block_on(&clock, stamps_only.release_and_wake(&owner, &LeaseToken::from_random("i", [7; 16]), false))
        .expect_err("a hidden wake-up answered");
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(e.unsent, "{e}");
    // Hiding more of less: a layer over a layer offers what both offer.
    let nothing = Forward::new(Arc::new(stamps_only), StoreOffers { release_wake: true, drain_stamps: false });
    assert_eq!(nothing.offers(), StoreOffers::NONE);
    assert!(nothing.release_wake().is_none() && nothing.drain_stamps().is_none());
}

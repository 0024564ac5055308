//! `LazyStore` offers the optional owner-claim ports it was built with, and reaches
//! them through the store it connects.

use std::sync::Arc;
use std::time::Duration;

use drain_core::layer::Forward;
use drain_core::memory::{ManualClock, MemoryStore};
use drain_core::ports::{Clock, OwnerClaim, OwnerClaims, ReleaseWake, StoreOffers, Waiter};
use drain_core::{ErrorKind, OwnerId};
use drain_runtime::LazyStore;

/// A memory store behind the layer, offering `offers`.
type Inner = Forward<Arc<MemoryStore>, StoreOffers>;

fn lazy(inner: StoreOffers, offering: StoreOffers) -> Forward<LazyStore<Inner>, ()> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new());
    let store = Forward::new(Arc::new(MemoryStore::new(clock)), inner);
    LazyStore::new(
        "memory",
        "in this process",
        Arc::new(move || {
            let store = store.clone();
            Box::pin(async move { Ok(store) })
        }),
    )
    .offering(offering)
    .layer()
}

fn waiter() -> Waiter {
    Waiter { instance: "i".into(), ttl: Duration::from_secs(30) }
}

#[tokio::test]
async fn a_lazy_store_offering_nothing_hides_the_wake_up_and_the_stamps() {
    let store = lazy(StoreOffers::ALL, StoreOffers::NONE);
    assert_eq!(store.offers(), StoreOffers::NONE);
    assert!(store.release_wake().is_none());
    assert!(store.drain_stamps().is_none());
}

#[tokio::test]
async fn a_lazy_store_offering_the_wake_up_shows_it_and_reaches_the_store_through_it() {
    let store = lazy(StoreOffers::ALL, StoreOffers { release_wake: true, drain_stamps: false });
    assert!(store.drain_stamps().is_none());
    let wake = store.release_wake().expect("the wake-up it was built with");
    let owners = [OwnerId::from("a")];
    assert_eq!(wake.peek_and_wait(&owners, &waiter()).await.expect("answered"), [OwnerClaim::Free]);
    let _releases = wake.subscribe("i").await.expect("subscribed through the connected store");
}

#[tokio::test]
async fn a_port_offered_that_the_connected_store_lacks_fails_unsent() {
    let store = lazy(StoreOffers::NONE, StoreOffers::ALL);
    let wake = store.release_wake().expect("offered, as built");
    let e = wake.peek_and_wait(&[OwnerId::from("a")], &waiter()).await.expect_err("the store has none");
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(e.unsent, "{e}");
    let Err(e) = store.subscribe("i").await else { panic!("subscribed to a store that has no wake-up") };
    assert_eq!(e.kind, ErrorKind::Unsupported);
}

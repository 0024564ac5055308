//! The lease guard on a task, in paused Tokio time over the in-memory store: held and
//! renewed while the `HeldLease` lives, skipped while held elsewhere, released on
//! release and on drop, and lost at the deadline when no renewal is confirmed.

use std::sync::Arc;
use std::time::Duration;

use drain_core::guard::Loss;
use drain_core::memory::MemoryStore;
use drain_core::ports::{Clock, LeaseName, LeaseStore};
use drain_core::testkit::TestRng;
use drain_core::{ErrorKind, LeaseToken};
use drain_runtime::{Taken, TokioClock, take};

const TTL: Duration = Duration::from_secs(30);

fn setup() -> (Arc<MemoryStore>, LeaseName) {
    let store = Arc::new(MemoryStore::new(Arc::new(TokioClock::new()) as Arc<dyn Clock>));
    (store, LeaseName::job("nightly"))
}

fn token(name: &str, seed: u64) -> LeaseToken {
    LeaseToken::generate(name, &mut TestRng::new(seed))
}

async fn take_as(store: &Arc<MemoryStore>, lease: &LeaseName, name: &str, seed: u64) -> Taken {
    take(store.clone() as Arc<dyn LeaseStore>, lease.clone(), TTL, token(name, seed), None).await
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_is_renewed_until_released_and_skips_others_meanwhile() {
    let (store, lease) = setup();
    let Taken::Held(held) = take_as(&store, &lease, "a", 1).await else { panic!("the free lease is taken") };
    assert_eq!(held.fence().number(), 1);
    // Four times the time to live: only renewals keep it.
    tokio::time::sleep(TTL * 4).await;
    assert!(held.check().is_ok());
    match take_as(&store, &lease, "b", 2).await {
        Taken::Skipped { holder, .. } => assert_eq!(holder, "a"),
        other => panic!("{other:?}"),
    }
    assert!(store.calls().get("renew").copied().unwrap_or(0) >= 11, "{:?}", store.calls());
    assert_eq!(held.release().await, None);
    assert_eq!(store.lease_token(&lease), None, "released");
}

#[tokio::test(start_paused = true)]
async fn dropping_a_held_lease_releases_it() {
    let (store, lease) = setup();
    let Taken::Held(held) = take_as(&store, &lease, "a", 1).await else { panic!("taken") };
    drop(held);
    // The task releases in the background.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.lease_token(&lease), None);
    assert!(matches!(take_as(&store, &lease, "b", 2).await, Taken::Held(_)));
}

#[tokio::test(start_paused = true)]
async fn without_a_confirmed_renewal_the_lease_is_lost_at_its_deadline() {
    let (store, lease) = setup();
    let Taken::Held(held) = take_as(&store, &lease, "a", 1).await else { panic!("taken") };
    store.set_failing(Some(ErrorKind::Timeout));
    tokio::time::sleep(Duration::from_secs(26)).await;
    assert!(held.check().is_ok(), "26 s: before the deadline (27 s)");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(held.check(), Err(Loss::Expired));
    assert_eq!(held.lost().await, Loss::Expired);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_cannot_answer_refuses_the_lease() {
    let (store, lease) = setup();
    store.set_failing(Some(ErrorKind::Connection));
    assert!(matches!(take_as(&store, &lease, "a", 1).await, Taken::Refused(e) if e.kind == ErrorKind::Connection));
}

/// A runtime of its own, as `#[tokio::main]` builds one: what is left of a held
/// lease when `main` returns or panics is what the runtime did before it was dropped.
fn in_main<T>(body: impl Future<Output = T>) -> std::thread::Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(body)))
}

#[test]
fn a_lease_dropped_as_main_returns_is_released_before_the_runtime_ends() {
    for seed in 0..20 {
        let (store, lease) = setup();
        let held = in_main(async {
            let Taken::Held(held) = take_as(&store, &lease, "a", seed).await else { panic!("taken") };
            held.fence().number()
        });
        assert!(held.is_ok());
        assert_eq!(store.lease_token(&lease), None, "run {seed}: released before the process would exit");
    }
}

#[test]
fn a_lease_held_when_the_job_panics_is_released() {
    for seed in 0..20 {
        let (store, lease) = setup();
        let ran = in_main(async {
            let Taken::Held(_held) = take_as(&store, &lease, "a", seed).await else { panic!("taken") };
            panic!("the job failed");
        });
        assert!(ran.is_err(), "the panic reaches main");
        assert_eq!(store.lease_token(&lease), None, "run {seed}: released on the way out");
    }
}

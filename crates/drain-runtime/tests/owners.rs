//! `owner_passes`: how passes end, and what a failing pass costs.

use std::cell::Cell;
use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::{ErrorKind, PortError};
use drain_runtime::owner_passes;
use futures::StreamExt as _;

const EVERY: Duration = Duration::from_millis(100);

fn down() -> PortError {
    PortError::new(ErrorKind::Connection, "connection refused")
}

#[tokio::test(start_paused = true)]
async fn a_pass_that_names_nobody_ends_the_passes_after_requesting_the_others() {
    let mut left = vec![vec![OwnerId::from("a"), OwnerId::from("b")], vec![OwnerId::from("a")], vec![]];
    let (requests, all_done) = owner_passes(EVERY, move || {
        let owners = left.remove(0);
        async move { Ok(owners) }
    });
    all_done.await.expect("all done");
    let asked: Vec<OwnerId> = requests.collect().await;
    assert_eq!(asked, ["a", "b", "a"].map(OwnerId::from));
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_stops_the_passes_with_it() {
    let calls = Cell::new(0);
    let (_requests, all_done) = owner_passes(EVERY, || {
        calls.set(calls.get() + 1);
        async { Err(PortError::new(ErrorKind::Permission, "NOPERM llen")) }
    });
    let e = all_done.await.expect_err("a missing right stops the passes");
    assert_eq!(e.kind, ErrorKind::Permission);
    assert_eq!(calls.get(), 1, "never passed again");
}

/// A store down for a minute: the passes back off to about one every 2.5–5 s
/// instead of one every 100 ms (600), and go on when it answers again.
#[tokio::test(start_paused = true)]
async fn a_temporary_error_backs_off_and_the_passes_go_on() {
    let start = tokio::time::Instant::now();
    let calls = Cell::new(0u32);
    let (requests, all_done) = owner_passes(EVERY, || {
        calls.set(calls.get() + 1);
        let elapsed = start.elapsed();
        async move {
            if elapsed < Duration::from_secs(60) {
                Err(down())
            } else if elapsed < Duration::from_secs(70) {
                Ok(vec![OwnerId::from("a")])
            } else {
                Ok(vec![])
            }
        }
    });
    all_done.await.expect("the store came back");
    let failed = calls.get() - u32::try_from(requests.collect::<Vec<_>>().await.len()).expect("few") - 1;
    assert!((12..=40).contains(&failed), "{failed} failed passes in 60 s");
    assert!(start.elapsed() < Duration::from_secs(76), "passes resumed within one back-off: {:?}", start.elapsed());
}

//! End to end against Azure Service Bus (or its emulator), only when
//! `DRAIN_TEST_SERVICEBUS` holds a connection string whose `EntityPath` names an
//! empty queue with dead-lettering on. Otherwise every test prints why it skips and
//! passes: the one allowed skip.

use std::sync::Arc;
use std::time::Duration;

use adapter_servicebus::{
    AmqpSource, AmqpSubmitter, Endpoint, LockRenewal, Profile, RenewEvent, SourceOptions, SubmitterOptions,
};
use drain_core::ErrorKind;
use drain_core::ports::{MessageSource, SubmitContext, Submitter};
use drain_core::testkit::{contract, message};

const WAIT: Duration = Duration::from_secs(2);

fn service_bus(test: &str) -> Option<Endpoint> {
    let Ok(conn) = std::env::var("DRAIN_TEST_SERVICEBUS") else {
        eprintln!("SKIP {test}: DRAIN_TEST_SERVICEBUS is not set (a Service Bus connection string with EntityPath)");
        return None;
    };
    let parsed = Endpoint::parse(&conn).expect("DRAIN_TEST_SERVICEBUS parses");
    assert_eq!(parsed.endpoint.profile, Profile::ServiceBus);
    assert!(parsed.endpoint.entity.is_some(), "DRAIN_TEST_SERVICEBUS needs EntityPath=<queue>");
    Some(parsed.endpoint)
}

fn dead_letter_queue(e: &Endpoint) -> Endpoint {
    let q = e.entity.clone().unwrap_or_default();
    e.clone().with_entity(format!("{q}/$deadletterqueue"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_bus_passes_the_message_source_contract() {
    let Some(e) = service_bus("servicebus-contract") else { return };
    let source = AmqpSource::connect(e.clone(), SourceOptions::default()).await.expect("source");
    let feed = AmqpSubmitter::connect(e.clone(), SubmitterOptions::default()).await.expect("submitter");
    let dlq = AmqpSource::connect(dead_letter_queue(&e), SourceOptions::default()).await.expect("dead-letter queue");
    contract::message_source(&source, &feed, Some(&dlq), WAIT).await.unwrap_or_else(|v| panic!("{v}"));
    source.close().await.unwrap();
    dlq.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_bus_renews_received_locks_automatically_until_settled() {
    let Some(e) = service_bus("servicebus-auto-renew") else { return };
    // Longer than the queue's lock (60 s by default): the first renewal falls 10 s
    // before the lock expires, inside the maximum.
    let options = SourceOptions { max_lock_renewal: Duration::from_secs(600), ..SourceOptions::default() };
    let source = AmqpSource::connect(e.clone(), options).await.expect("source");
    let feed = AmqpSubmitter::connect(e, SubmitterOptions::default()).await.expect("submitter");
    feed.submit(&message("auto-renew-me"), &SubmitContext { queue: "sb", fence: None }).await.unwrap();
    let mut events = source.lock_events();
    let got = source.receive(1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(got.len(), 1);
    let handle = got[0].handle;
    assert_eq!(source.renewing(), 1, "renewal starts on receive");
    let before = source.locked_until(handle).await.unwrap().expect("Service Bus says when the lock expires");
    let lock_duration = before.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    let first = tokio::time::timeout(lock_duration + Duration::from_secs(30), events.recv())
        .await
        .expect("a lock event before the lock expires")
        .expect("an event");
    assert_eq!(first.handle, handle);
    assert_eq!(first.message_id.as_deref(), Some("auto-renew-me"));
    assert!(first.lock_token.is_some());
    assert!(matches!(first.event, RenewEvent::Renewed { .. }), "{first:?}");
    source.complete(handle).await.expect("complete after the original lock would have run out");
    assert_eq!(source.renewing(), 0, "settling stops the renewal");
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_bus_renews_locks_by_hand_and_reports_the_max_duration() {
    let Some(e) = service_bus("servicebus-renew") else { return };
    let options = SourceOptions { max_lock_renewal: Duration::ZERO, ..SourceOptions::default() };
    let source = Arc::new(AmqpSource::connect(e.clone(), options).await.expect("source"));
    let feed = AmqpSubmitter::connect(e, SubmitterOptions::default()).await.expect("submitter");
    feed.submit(&message("renew-me"), &SubmitContext { queue: "sb", fence: None }).await.unwrap();
    let got = source.receive(1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(got.len(), 1);
    let handle = got[0].handle;
    assert_eq!(source.renewing(), 0, "automatic renewal is off");
    assert!(source.locked_until(handle).await.unwrap().is_some(), "Service Bus says when the lock expires");
    let lock = source.renew_lock(handle).await.expect("renew-lock");
    assert!(lock > Duration::ZERO);
    // Renew for a short maximum: the renewer reports when it stops.
    let mut renewal =
        LockRenewal::start(source.clone(), handle, lock.min(Duration::from_secs(4)), Duration::from_secs(3));
    let mut last = None;
    while let Some(ev) = renewal.next_event().await {
        last = Some(ev);
    }
    assert_eq!(last, Some(RenewEvent::MaxDurationReached));
    source.complete(handle).await.unwrap();
    assert_eq!(source.renew_lock(handle).await.unwrap_err().kind, ErrorKind::LockLost);
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

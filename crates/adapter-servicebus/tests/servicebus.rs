//! drain's Service Bus suite. Every test runs against `test-servicebus`, the broker
//! that speaks Service Bus (crates/test-servicebus, itself checked with Microsoft's
//! SDK), reached through its emulator connection string (`UseDevelopmentEmulator=true`:
//! plain AMQP on the endpoint's port). The tests that need no look inside the broker
//! also run against a real namespace (or Microsoft's emulator) when
//! `DRAIN_TEST_SERVICEBUS` holds a connection string whose `EntityPath` names an
//! empty queue with dead-lettering on; without it they print why they skip that part.
#![allow(clippy::disallowed_methods, reason = "a test harness reads its DRAIN_TEST_* and CI variables")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use adapter_servicebus::{
    AmqpSource, AmqpSubmitter, Backoff, Endpoint, LockRenewal, Profile, RenewEvent, SourceOptions, SubmitterOptions,
};
use drain_core::memory::MemoryStore;
use drain_core::ports::{
    ClaimState, ClaimStore, Clock, Delivery, MessageId, MessageSource, NoopObserver, SubmitContext, Submitter,
};
use drain_core::testkit::{RecordingSubmitter, TestRng, contract, message};
use drain_core::tick::{TickConfig, TickPorts, run_tick};
use drain_core::{ErrorKind, LeaseToken};
use drain_runtime::TokioClock;
use test_servicebus::{Broker, BrokerConfig, MAX_DELIVERY_COUNT_EXCEEDED, QueueConfig, SubQueue};

const WAIT: Duration = Duration::from_secs(2);
const CTX: SubmitContext<'static> = SubmitContext { queue: "sb", fence: None };

/// A broker with one queue, `requests`, and the endpoints of it and its dead letters.
struct Local {
    broker: Broker,
}

impl Local {
    fn new(queue: QueueConfig) -> Local {
        let broker = Broker::start(BrokerConfig::default().queue("requests", queue)).expect("test-servicebus starts");
        Local { broker }
    }

    fn endpoint(&self) -> Endpoint {
        let parsed =
            Endpoint::parse(&self.broker.entity_connection_string("requests")).expect("the emulator string parses");
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let e = parsed.endpoint;
        assert_eq!(
            (e.profile, e.tls, e.port),
            (Profile::ServiceBus, false, self.broker.addr().port()),
            "plain AMQP on the port"
        );
        e
    }

    fn dead_letters(&self) -> Endpoint {
        dead_letter_queue(&self.endpoint())
    }

    fn stats(&self) -> test_servicebus::QueueStats {
        self.broker.stats("requests").expect("the queue exists")
    }
}

/// Wait (bounded) for the broker to have applied what the client sent: settlements
/// with `rcv-settle-mode first` are not answered.
async fn settled(local: &Local, want: (usize, usize, usize)) -> test_servicebus::QueueStats {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = local.stats();
        if (s.active, s.locked, s.dead_lettered) == want || Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lock(ms: u64) -> QueueConfig {
    QueueConfig { lock_duration: Duration::from_millis(ms), ..QueueConfig::default() }
}

fn service_bus(test: &str) -> Option<Endpoint> {
    let Ok(conn) = std::env::var("DRAIN_TEST_SERVICEBUS") else {
        eprintln!(
            "SKIP {test} on a real namespace: DRAIN_TEST_SERVICEBUS is not set (a Service Bus connection string with EntityPath); it ran on test-servicebus"
        );
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

/// Receive until `n` deliveries arrived (bounded).
async fn receive_n(source: &AmqpSource, n: usize) -> Vec<Delivery> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} messages arrived", got.len());
        got.extend(source.receive(n - got.len(), WAIT).await.expect("receive"));
    }
    got
}

async fn contract_on(e: Endpoint) {
    let source = AmqpSource::connect(e.clone(), SourceOptions::default()).await.expect("source");
    let feed = AmqpSubmitter::connect(e.clone(), SubmitterOptions::default()).await.expect("submitter");
    let dlq = AmqpSource::connect(dead_letter_queue(&e), SourceOptions::default()).await.expect("dead-letter queue");
    contract::message_source(&source, &feed, Some(&dlq), WAIT).await.unwrap_or_else(|v| panic!("{v}"));
    source.close().await.unwrap();
    dlq.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_source_contract_holds_on_service_bus() {
    let local = Local::new(QueueConfig::default());
    contract_on(local.endpoint()).await;
    let stats = settled(&local, (0, 0, 0)).await;
    assert_eq!((stats.active, stats.locked, stats.dead_lettered), (0, 0, 0), "{stats:?}");
    assert_eq!(stats.counters.abandoned, 1, "the contract's abandon reached the broker as one");
    assert_eq!(local.broker.counters().unsupported_requests, 0);
    if let Some(e) = service_bus("servicebus-contract") {
        contract_on(e).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandon_counts_a_delivery_and_dead_letter_keeps_reason_and_description() {
    let local = Local::new(QueueConfig::default());
    let source = AmqpSource::connect(local.endpoint(), SourceOptions::default()).await.unwrap();
    let feed = AmqpSubmitter::connect(local.endpoint(), SubmitterOptions::default()).await.unwrap();
    feed.submit(&message("again"), &CTX).await.unwrap();
    let [first] = receive_n(&source, 1).await.try_into().unwrap();
    assert_eq!(first.delivery_count, 0);
    assert!(source.locked_until(first.handle).await.unwrap().is_some(), "x-opt-locked-until arrives");
    source.abandon(first.handle).await.unwrap();
    let [second] = receive_n(&source, 1).await.try_into().unwrap();
    assert_eq!(second.message.message_id, Some("again".into()));
    assert_eq!(second.delivery_count, 1, "an abandon is a failed delivery on Service Bus");
    source.dead_letter(second.handle, "BadPayload", "cannot parse the body").await.unwrap();

    let dlq = AmqpSource::connect(local.dead_letters(), SourceOptions::default()).await.unwrap();
    let [dead] = receive_n(&dlq, 1).await.try_into().unwrap();
    let prop = |k: &str| dead.message.properties.iter().find(|(n, _)| n.as_str() == k).map(|(_, v)| format!("{v:?}"));
    assert!(prop("DeadLetterReason").is_some_and(|v| v.contains("BadPayload")), "{:?}", dead.message.properties);
    assert!(prop("DeadLetterErrorDescription").is_some_and(|v| v.contains("cannot parse the body")));
    assert_eq!(dead.delivery_count, 1);
    dlq.complete(dead.handle).await.unwrap();
    let stats = settled(&local, (0, 0, 0)).await;
    assert_eq!((stats.active, stats.locked, stats.dead_lettered, stats.counters.completed), (0, 0, 0, 1), "{stats:?}");
    for s in [&source, &dlq] {
        s.close().await.unwrap();
    }
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_abandoned_max_delivery_count_times_is_dead_lettered() {
    let local = Local::new(QueueConfig { max_delivery_count: 3, ..QueueConfig::default() });
    let source = AmqpSource::connect(local.endpoint(), SourceOptions::default()).await.unwrap();
    local.broker.send("requests", b"poison", Some("poison"));
    for attempt in 0..3 {
        let [d] = receive_n(&source, 1).await.try_into().unwrap();
        assert_eq!(d.delivery_count, attempt);
        source.abandon(d.handle).await.unwrap();
    }
    assert!(source.receive(1, Duration::from_millis(500)).await.unwrap().is_empty(), "gone from the queue");
    let dead = local.broker.messages("requests", SubQueue::DeadLetter);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].dead_letter_reason.as_deref(), Some(MAX_DELIVERY_COUNT_EXCEEDED));
    assert_eq!(dead[0].delivery_count, 3);
    source.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automatic_renewal_keeps_a_slow_message_locked_past_its_lock_duration() {
    let local = Local::new(lock(2_000));
    let options = SourceOptions { max_lock_renewal: Duration::from_secs(30), ..SourceOptions::default() };
    let source = AmqpSource::connect(local.endpoint(), options).await.unwrap();
    local.broker.send("requests", b"slow", Some("slow"));
    let mut events = source.lock_events();
    let [d] = receive_n(&source, 1).await.try_into().unwrap();
    let first_until = source.locked_until(d.handle).await.unwrap().expect("a lock");
    assert_eq!(source.renewing(), 1);
    // Hold it for more than twice its lock.
    let held = Instant::now();
    let mut renewals = 0;
    while held.elapsed() < Duration::from_millis(5_000) {
        if let Ok(Ok(ev)) = tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
            assert!(matches!(ev.event, RenewEvent::Renewed { .. }), "{ev:?}");
            assert_eq!(ev.message_id.as_deref(), Some("slow"));
            renewals += 1;
        }
    }
    assert!(renewals >= 2, "renewed {renewals} times in 5 s of a 2 s lock");
    assert!(source.locked_until(d.handle).await.unwrap().unwrap() > first_until, "the lock moved");
    let stats = local.stats();
    assert_eq!((stats.locked, stats.counters.locks_expired), (1, 0), "still locked, never expired: {stats:?}");
    assert!(stats.counters.renewals >= 2);
    source.complete(d.handle).await.expect("complete after the original lock would have run out");
    assert_eq!(source.renewing(), 0, "settling stops the renewal");
    let stats = settled(&local, (0, 0, 0)).await;
    assert_eq!(
        (stats.active, stats.locked, stats.counters.completed, stats.counters.deliveries),
        (0, 0, 1, 1),
        "{stats:?}"
    );
    source.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_renewal_a_lock_that_ran_out_is_reported_as_lost() {
    let local = Local::new(lock(1_000));
    let options = SourceOptions { max_lock_renewal: Duration::ZERO, ..SourceOptions::default() };
    let source = AmqpSource::connect(local.endpoint(), options).await.unwrap();
    local.broker.send("requests", b"forgotten", Some("forgotten"));
    let [d] = receive_n(&source, 1).await.try_into().unwrap();
    assert_eq!(source.renewing(), 0, "automatic renewal is off");
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let e = source.complete(d.handle).await.expect_err("completing after the lock expired");
    assert_eq!(e.kind, ErrorKind::LockLost, "{e}");
    assert!(e.to_string().contains("expired"), "{e}");
    // Service Bus put it back, counted; it comes again.
    let [again] = receive_n(&source, 1).await.try_into().unwrap();
    assert_eq!(again.message.message_id, Some("forgotten".into()));
    assert_eq!(again.delivery_count, 1);
    source.complete(again.handle).await.unwrap();
    let stats = settled(&local, (0, 0, 0)).await;
    assert_eq!((stats.active, stats.locked, stats.counters.completed, stats.counters.locks_expired), (0, 0, 1, 1));
    source.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cbs_token_is_put_again_before_it_expires() {
    let local = Local::new(QueueConfig::default());
    let lifetime = Duration::from_secs(3);
    let source =
        AmqpSource::connect(local.endpoint(), SourceOptions { token_lifetime: lifetime, ..SourceOptions::default() })
            .await
            .unwrap();
    let feed = AmqpSubmitter::connect(
        local.endpoint(),
        SubmitterOptions { token_lifetime: lifetime, ..SubmitterOptions::default() },
    )
    .await
    .unwrap();
    let before = local.broker.counters();
    assert_eq!(before.tokens_accepted, 2, "one token per connection");
    // Three lifetimes: each connection refreshes several times, no link is detached.
    tokio::time::sleep(3 * lifetime).await;
    feed.submit(&message("late"), &CTX).await.expect("the sender still works");
    let [d] = receive_n(&source, 1).await.try_into().unwrap();
    source.complete(d.handle).await.unwrap();
    let after = local.broker.counters();
    assert!(after.tokens_accepted >= 2 + 2 * 3, "tokens put: {after:?}");
    assert_eq!((after.links_expired, after.tokens_refused, after.connections), (0, 0, before.connections), "{after:?}");
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_and_submitter_reconnect_after_the_broker_restarts() {
    let local = Local::new(QueueConfig::default());
    let fast = Backoff { initial: Duration::from_millis(100), max: Duration::from_millis(500) };
    let source = AmqpSource::connect(local.endpoint(), SourceOptions { backoff: fast, ..SourceOptions::default() })
        .await
        .unwrap();
    let feed = AmqpSubmitter::connect(
        local.endpoint(),
        SubmitterOptions { backoff: fast, send_timeout: Duration::from_secs(15), ..SubmitterOptions::default() },
    )
    .await
    .unwrap();
    feed.submit(&message("before"), &CTX).await.unwrap();
    let [d] = receive_n(&source, 1).await.try_into().unwrap();
    source.complete(d.handle).await.unwrap();
    let connections = local.broker.counters().connections;

    local.broker.go_down();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    local.broker.come_up().expect("listens again");
    feed.submit(&message("after"), &CTX).await.expect("the submitter reconnects");
    let got = receive_n(&source, 1).await;
    assert_eq!(got[0].message.message_id, Some("after".into()));
    source.complete(got[0].handle).await.unwrap();
    assert!(local.broker.counters().connections >= connections + 2, "both reconnected");
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

async fn renew_by_hand(e: Endpoint, feed_with: impl AsyncFnOnce(&AmqpSubmitter)) {
    let options = SourceOptions { max_lock_renewal: Duration::ZERO, ..SourceOptions::default() };
    let source = Arc::new(AmqpSource::connect(e.clone(), options).await.expect("source"));
    let feed = AmqpSubmitter::connect(e, SubmitterOptions::default()).await.expect("submitter");
    feed_with(&feed).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_are_renewed_by_hand_and_the_renewer_reports_its_max_duration() {
    let local = Local::new(lock(5_000));
    renew_by_hand(local.endpoint(), async |feed| feed.submit(&message("renew-me"), &CTX).await.unwrap()).await;
    let counters = local.broker.counters();
    assert!(counters.renew_lock_requests >= 2, "{counters:?}");
    assert_eq!(counters.unsupported_requests, 0);
    if let Some(e) = service_bus("servicebus-renew") {
        renew_by_hand(e, async |feed| feed.submit(&message("renew-me"), &CTX).await.unwrap()).await;
    }
}

/// Against a real namespace: its default lock (60 s) is renewed automatically.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_namespace_renews_received_locks_automatically_until_settled() {
    let Some(e) = service_bus("servicebus-auto-renew") else { return };
    let options = SourceOptions { max_lock_renewal: Duration::from_secs(600), ..SourceOptions::default() };
    let source = AmqpSource::connect(e.clone(), options).await.expect("source");
    let feed = AmqpSubmitter::connect(e, SubmitterOptions::default()).await.expect("submitter");
    feed.submit(&message("auto-renew-me"), &CTX).await.unwrap();
    let mut events = source.lock_events();
    let got = source.receive(1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(got.len(), 1);
    let handle = got[0].handle;
    let before = source.locked_until(handle).await.unwrap().expect("Service Bus says when the lock expires");
    let lock_duration = before.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    let first = tokio::time::timeout(lock_duration + Duration::from_secs(30), events.recv())
        .await
        .expect("a lock event before the lock expires")
        .expect("an event");
    assert!(matches!(first.event, RenewEvent::Renewed { .. }), "{first:?}");
    source.complete(handle).await.expect("complete after the original lock would have run out");
    source.close().await.unwrap();
    feed.close().await.unwrap();
}

/// `AmqpSource::park` on Service Bus: the messages that arrived on credit left open
/// by an early receive are released, so they are available at once (not locked until
/// their lock runs out) with their delivery count unchanged; nothing that arrives
/// while parked is locked to the source; the next receive attaches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_source_holds_no_lock_and_its_prefetched_messages_keep_their_delivery_count() {
    let local = Local::new(QueueConfig::default());
    let options = SourceOptions { prefetch: 32, ..SourceOptions::default() };
    let source = AmqpSource::connect(local.endpoint(), options).await.expect("source");
    // An empty receive returns early with its credit window open: what is sent next
    // is pushed to this source and locked to it.
    assert!(source.receive(32, Duration::from_millis(200)).await.expect("receive").is_empty());
    let ids: Vec<String> = (0..10).map(|i| format!("p-{i}")).collect();
    for id in &ids {
        local.broker.send("requests", id.as_bytes(), Some(id));
    }
    let stats = settled(&local, (0, 10, 0)).await;
    assert_eq!((stats.active, stats.locked), (0, 10), "the open credit took every message: {stats:?}");

    assert!(source.park().await, "nothing is handed out: the source parks");
    let stats = settled(&local, (10, 0, 0)).await;
    assert_eq!((stats.active, stats.locked), (10, 0), "parked, it holds no lock: {stats:?}");
    let messages = local.broker.messages("requests", SubQueue::Main);
    assert!(
        messages.iter().all(|m| m.delivery_count == 0 && m.lock.is_none()),
        "released, not abandoned: {messages:?}"
    );
    assert_eq!(stats.counters.abandoned + stats.counters.locks_expired, 0, "{stats:?}");
    for i in 10..20 {
        local.broker.send("requests", b"later", Some(&format!("p-{i}")));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = local.stats();
    assert_eq!((stats.active, stats.locked), (20, 0), "nor any sent while it is parked");

    // The next receive attaches again; a source in use does not park.
    let got = receive_n(&source, 20).await;
    assert!(got.iter().all(|d| d.delivery_count == 0), "no delivery was counted");
    assert!(!source.park().await, "deliveries are handed out and not settled: no park");
    for d in &got {
        source.complete(d.handle).await.expect("complete after park");
    }
    let stats = settled(&local, (0, 0, 0)).await;
    assert_eq!((stats.active, stats.locked, stats.counters.completed), (0, 0, 20), "{stats:?}");
    assert!(source.park().await, "settled: it parks again");
    source.close().await.expect("close");
}

/// A tick that meets a message whose claim another holder has pending gives it back
/// with `released` on Service Bus: three such ticks (each parking the source after
/// it, as `drain run` does with the lease) on a queue that dead-letters at two
/// deliveries leave its copies in the queue with their delivery count at 0 (with
/// abandon, the second tick would have dead-lettered it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_busy_message_is_released_by_the_tick_and_never_counted() {
    let local = Local::new(QueueConfig { max_delivery_count: 2, ..QueueConfig::default() });
    let source = AmqpSource::connect(local.endpoint(), SourceOptions::default()).await.unwrap();
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    let target = RecordingSubmitter::new(clock.clone() as Arc<dyn Clock>);
    let mut cfg = TickConfig::new("requests");
    cfg.max_wait = Duration::from_millis(300);
    let other = LeaseToken::generate("other-host", &mut TestRng::new(1));
    let busy = [MessageId::String("busy".into())];
    let held = store.claim_batch("requests", &busy, &other, Duration::from_secs(600)).await.unwrap();
    assert_eq!(held, [ClaimState::Claimed], "another holder's claim is pending");
    for n in 0..3u64 {
        local.broker.send("requests", b"busy", Some("busy"));
        local.broker.send("requests", b"free", Some(&format!("free-{n}")));
        let ports = TickPorts::new(&source, &target, &*clock, &NoopObserver).claims(&store);
        let token = LeaseToken::generate("me", &mut TestRng::new(n + 2));
        let report = run_tick(&cfg, &ports, &token, &Default::default()).await;
        let stats = report.stats.expect("stats");
        assert!(stats.submitted >= 1 && stats.abandoned >= 1, "tick {n}: {stats:?}");
        // Between ticks, as `drain run` with the lease: the released copies that came
        // back on the open credit are given back too.
        assert!(source.park().await, "tick {n} left nothing handed out");
        // The copies of `busy` pile up in the queue (each tick released them all).
        let copies = settled(&local, (usize::try_from(n + 1).unwrap(), 0, 0)).await;
        assert_eq!((copies.active, copies.locked, copies.dead_lettered), (n as usize + 1, 0, 0), "{copies:?}");
    }
    let left = local.broker.messages("requests", SubQueue::Main);
    assert!(left.iter().all(|m| m.message_id.as_deref() == Some("busy") && m.delivery_count == 0), "{left:?}");
    let stats = local.stats();
    assert_eq!((stats.counters.abandoned, stats.dead_lettered), (0, 0), "released, never abandoned: {stats:?}");
    assert_eq!(target.submitted_ids(), ["free-0", "free-1", "free-2"]);
    source.close().await.unwrap();
}

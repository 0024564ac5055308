//! A claim call that timed out on a frozen redis-server runs when the server thaws:
//! it takes `pending` claims, with the failed tick's token, for messages that tick
//! gave back. The tick names them (`TickReport::stale_claims`), the release after the
//! probe frees them, and the next tick submits every message once.

mod support;

use std::sync::Arc;
use std::time::Duration;

use adapter_redis::RedisStore;
use drain_core::memory::MemorySource;
use drain_core::ports::{ClaimState, ClaimStore, Clock, MessageId};
use drain_core::testkit::{RecordingObserver, RecordingSubmitter, message};
use drain_core::tick::{ClaimHealth, StaleClaims, TickConfig, TickPorts, probe_claims, release_stale_claims, run_tick};
use test_servers::RedisServer;

use support::{TokioClock, config, token};

#[tokio::test]
async fn the_claims_of_a_call_that_timed_out_are_released_before_the_next_receive() {
    let mut redis = RedisServer::start();
    let cfg_store = config(&redis.url()).timeouts(Duration::from_millis(300), Duration::from_millis(300));
    let store = RedisStore::connect(cfg_store).await.expect("connect");
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
    let source = MemorySource::new(clock.clone(), Duration::from_secs(60));
    let target = RecordingSubmitter::new(clock.clone());
    let observer = RecordingObserver::new();
    let mut cfg = TickConfig::new("requests");
    cfg.batch = 8;
    cfg.max_wait = Duration::from_millis(50);
    let ids: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    for id in &ids {
        source.push(message(id));
    }
    let ports = TickPorts::new(&source, &target, &*clock, &observer).claims(&store);
    // Warm the connection so that the tick's claim call is sent, then freeze.
    probe_claims(&cfg, &store, &token("warm", 1)).await.expect("healthy");

    redis.pause();
    let first = token("first", 2);
    let r = run_tick(&cfg, &ports, &first, &Default::default()).await;
    redis.resume();
    assert_eq!(r.claims, ClaimHealth::Failed, "{r:?}");
    assert_eq!(target.attempts(), 0, "fail closed");
    let expected: Vec<MessageId> = ids.iter().map(|id| MessageId::from(id.as_str())).collect();
    assert_eq!(r.stale_claims, expected, "every id of the call that timed out");

    // The probe answers once the server works again; by then it ran the late call.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while let Err(e) = probe_claims(&cfg, &store, &token("probe", 3)).await {
        assert!(tokio::time::Instant::now() < deadline, "no answer after the thaw: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = token("other", 4);
    let seen = store.claim_batch("requests", &expected, &other, Duration::from_secs(10)).await.expect("answers");
    assert!(
        seen.iter().all(|s| matches!(s, ClaimState::PendingElsewhere { holder } if holder == first.holder())),
        "the late call took every claim with the failed tick's token: {seen:?}"
    );
    let stale = StaleClaims { token: first, ids: r.stale_claims.clone() };
    release_stale_claims(&cfg, &store, &stale).await.expect("released");

    let r = run_tick(&cfg, &ports, &token("second", 5), &Default::default()).await;
    assert_eq!(r.claims, ClaimHealth::Answered, "{r:?}");
    let mut submitted = target.submitted_ids();
    submitted.sort();
    assert_eq!(submitted, ids, "each message submitted once, none held by the late claims");
}

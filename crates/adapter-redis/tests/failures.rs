//! Failures on a real redis-server: killed, restarted, paused, connections cut,
//! wrong credentials, missing rights. Every call is wrapped in a generous outer
//! timeout so a hang fails the test instead of stalling it.

mod support;

use std::time::Duration;

use adapter_redis::rights::LEASES_AND_CLAIMS;
use adapter_redis::{RedisConfig, RedisStore};
use drain_core::admission::OwnerId;
use drain_core::ports::{Acquire, ClaimStore, LeaseName, LeaseStore, MessageId, OwnerClaims, Release};
use drain_core::{ErrorKind, LeaseToken, PortError};
use test_servers::{RedisServer, Reply};

use support::{config, connect, token};

const BOUND: Duration = Duration::from_secs(10);

async fn cycle(store: &RedisStore, lease: &LeaseName, me: &LeaseToken) -> Result<(), PortError> {
    let call = async {
        match store.acquire(lease, me, Duration::from_secs(30)).await? {
            Acquire::Acquired { .. } => {}
            Acquire::Busy { holder, .. } => panic!("unexpectedly held by {holder}"),
        }
        assert_eq!(store.release(lease, me).await?, Release::Released);
        Ok(())
    };
    tokio::time::timeout(BOUND, call).await.expect("a call MUST NOT hang past the store's deadline")
}

/// Calls until one succeeds; returns how many failed (each MUST be temporary).
async fn failures_until_recovered(store: &RedisStore, lease: &LeaseName, me: &LeaseToken) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    let mut failed = 0;
    loop {
        match cycle(store, lease, me).await {
            Ok(()) => return failed,
            Err(e) => {
                assert!(e.is_temporary(), "a transient outage MUST give temporary errors: {e}");
                failed += 1;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no recovery within 8 s ({failed} failed calls)");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The error MUST arrive within the configured deadline (connect plus response
/// timeout), not the test's outer bound. The slack covers scheduling on a loaded
/// machine; without the store's own timeouts a paused server would hang the call
/// until `BOUND`.
fn assert_within_deadline(started: tokio::time::Instant, deadline: Duration) {
    let took = started.elapsed();
    assert!(
        took <= deadline + Duration::from_secs(1),
        "the error came after {took:?}, the configured deadline is {deadline:?}"
    );
}

#[tokio::test]
async fn killed_server_gives_temporary_errors_then_the_same_store_recovers() {
    let mut redis = RedisServer::start();
    let cfg = config(&redis.url()).timeouts(Duration::from_millis(500), Duration::from_millis(500));
    let deadline = cfg.operation_deadline();
    let store = RedisStore::connect(cfg).await.expect("connect");
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    cycle(&store, &lease, &me).await.expect("healthy");

    redis.kill();
    for round in 0..3 {
        let started = tokio::time::Instant::now();
        let e = cycle(&store, &lease, &me).await.expect_err("the server is gone");
        assert_within_deadline(started, deadline);
        assert!(e.is_temporary(), "{e}");
        assert!(matches!(e.kind, ErrorKind::Connection | ErrorKind::Timeout), "{e}");
        assert!(e.message.contains(&format!("127.0.0.1:{}", redis.port())), "names the endpoint: {e}");
        // Once the broken connection is gone, each call's reconnect is refused: it
        // sent nothing, so no claim of it can be taken late.
        if round > 0 {
            assert!(!e.may_have_run(), "round {round}: {e}");
        }
    }

    redis.restart();
    let failed = failures_until_recovered(&store, &lease, &me).await;
    assert!(failed <= 1, "recovery after a restart MUST cost at most one failed call, cost {failed}");
    // The restarted server has no scripts and no data: EVAL fallback, fresh fences.
    cycle(&store, &lease, &me).await.expect("healthy again");
}

#[tokio::test]
async fn paused_server_times_out_then_recovers() {
    let mut redis = RedisServer::start();
    let cfg = config(&redis.url()).timeouts(Duration::from_millis(300), Duration::from_millis(300));
    let deadline = cfg.operation_deadline();
    let store = RedisStore::connect(cfg).await.expect("connect");
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    cycle(&store, &lease, &me).await.expect("healthy");

    redis.pause();
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        let e = store.peek(&lease).await.expect_err("paused");
        assert_within_deadline(started, deadline);
        assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
        assert!(e.is_temporary());
    }
    redis.resume();
    let failed = failures_until_recovered(&store, &lease, &me).await;
    assert!(failed <= 2, "recovered after {failed} failed calls");
}

#[tokio::test]
async fn a_cut_connection_costs_at_most_one_failed_call() {
    let redis = RedisServer::start();
    let store = connect(&redis.url()).await;
    let lease = LeaseName::queue("q");
    let me = token("me", 1);
    for round in 0..3 {
        cycle(&store, &lease, &me).await.expect("healthy");
        // Kill every client connection but the one sending the command.
        match redis.command(&["CLIENT", "KILL", "TYPE", "normal"]).expect("client kill") {
            Reply::Int(n) => assert!(n >= 1, "round {round}: the store's connection was killed"),
            other => panic!("CLIENT KILL answered {other:?}"),
        }
        let failed = failures_until_recovered(&store, &lease, &me).await;
        assert!(failed <= 1, "round {round}: {failed} failed calls after the connection was cut");
    }
}

#[tokio::test]
async fn nothing_listening_is_a_temporary_connection_error_with_a_hint() {
    let port = test_servers::free_port();
    let e = RedisStore::connect(config(&format!("redis://drain:hunter2-secret@127.0.0.1:{port}")))
        .await
        .expect_err("nothing listens there");
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert!(e.is_temporary());
    assert!(!e.may_have_run(), "a refused connection sent nothing: {e}");
    assert!(
        e.message.contains(&format!(
            "Redis at 127.0.0.1:{port} refused the connection: is redis-server running and DRAIN_REDIS_URL right?"
        )),
        "{e}"
    );
    assert!(!e.message.contains("hunter2-secret"), "{e}");
}

#[tokio::test]
async fn bad_configuration_is_a_permanent_config_error() {
    for (cfg, hint) in [
        (RedisConfig::new(""), "empty"),
        (RedisConfig::new("http://u:hunter2-secret@h"), "not a redis://, rediss:// or redis+sentinel:// URL"),
        (RedisConfig::new("redis://a:1,redis://b:2"), "DRAIN_REDIS_CLUSTER"),
    ] {
        let e = RedisStore::connect(cfg).await.expect_err("bad config");
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(!e.is_temporary());
        assert!(e.message.contains(hint), "{e} should mention {hint}");
        assert!(!e.message.contains("hunter2-secret"), "{e}");
    }
}

#[tokio::test]
async fn passwords_work_and_wrong_ones_are_permanent_auth_errors() {
    let redis = RedisServer::start_with(&["--requirepass", "hunter2-secret"]);
    let port = redis.port();
    let store = connect(&format!("redis://:hunter2-secret@127.0.0.1:{port}")).await;
    cycle(&store, &LeaseName::queue("q"), &token("me", 1)).await.expect("authenticated");

    for url in [
        format!("redis://:wrong-pass-xyz@127.0.0.1:{port}"),
        format!("redis://default:wrong-pass-xyz@127.0.0.1:{port}"),
    ] {
        let e = RedisStore::connect(config(&url)).await.expect_err("wrong password");
        assert_eq!(e.kind, ErrorKind::Auth, "{e}");
        assert!(!e.is_temporary());
        assert!(e.message.contains("DRAIN_REDIS_URL"), "{e}");
        assert!(!e.message.contains("wrong-pass-xyz"), "the password never appears: {e}");
    }
    let e = RedisStore::connect(config(&format!("redis://127.0.0.1:{port}"))).await.expect_err("no password");
    assert_eq!(e.kind, ErrorKind::Auth, "{e}");
}

/// The minimal ACL of docs/operations.md is enough for every operation; without a
/// right, calls fail with a permanent `Permission` error that names the command.
#[tokio::test]
async fn minimal_acl_suffices_and_missing_rights_are_permission_errors() {
    let redis = RedisServer::start();
    // The lease and claim rights (`drain doctor` checks them; they are the documented
    // ones), and `drain leases`' scan.
    let minimal = [LEASES_AND_CLAIMS, &["+scan", "+cluster|nodes"]].concat();
    redis.acl_user("drain", "drain-pass-1", &["drain:*"], &[], &minimal).expect("acl");
    let url = format!("redis://drain:drain-pass-1@127.0.0.1:{}", redis.port());
    let store = connect(&url).await;
    let me = token("me", 1);
    let q = LeaseName::queue("q");
    cycle(&store, &q, &me).await.expect("lease cycle under the minimal ACL");
    store.claim_batch("q", &[MessageId::from("m1")], &me, Duration::from_secs(5)).await.expect("claim");
    store.peek_owners(&[OwnerId::from("o")]).await.expect("peek");
    store.peek(&q).await.expect("peek");
    store.scan().await.expect("scan");
    store.ping().await.expect("ping");

    // Outside the prefix: NOPERM.
    let other = RedisStore::connect(config(&url).key_prefix("other")).await.expect("connect");
    let e = other.acquire(&q, &me, Duration::from_secs(5)).await.expect_err("NOPERM");
    assert_eq!(e.kind, ErrorKind::Permission, "{e}");
    assert!(!e.is_temporary());

    // Without EVALSHA: NOPERM naming the command.
    redis.command(&["ACL", "SETUSER", "drain", "-evalsha"]).expect("acl");
    let e = store.release(&q, &me).await.expect_err("NOPERM");
    assert_eq!(e.kind, ErrorKind::Permission, "{e}");
    assert!(e.message.to_ascii_lowercase().contains("evalsha"), "{e}");
    assert!(!e.message.contains("drain-pass-1"), "{e}");
}

/// `rediss://` goes through rustls (the ring provider is installed on demand): a
/// plain-text server fails the handshake with a typed error, not a panic.
#[tokio::test]
async fn tls_against_a_plain_server_is_a_typed_error() {
    let redis = RedisServer::start();
    let url = format!("rediss://drain:hunter2-secret@127.0.0.1:{}", redis.port());
    let e = RedisStore::connect(config(&url)).await.expect_err("no TLS on this port");
    assert!(matches!(e.kind, ErrorKind::Connection | ErrorKind::Timeout | ErrorKind::Protocol), "{e}");
    assert!(e.message.contains(&format!("127.0.0.1:{}", redis.port())), "{e}");
    assert!(!e.message.contains("hunter2-secret"), "{e}");
}

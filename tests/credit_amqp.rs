//! No credit outside a tick: with the single-flight lease on, a `drain run` process
//! that does not hold the lease sits on no message of the queue between its ticks
//! (RabbitMQ counts none unacknowledged for it), so the holder can have them all.

use std::time::{Duration, Instant};

use drain_e2e::rabbit::{Broker, Queue};
use drain_e2e::{Running, drain, redis};
use test_servers::Reply;

/// Messages fed while another process holds the lease.
const N: usize = 64;

fn await_counts(broker: &Broker, queue: &str, want: (u64, u64), within: Duration) -> (u64, u64) {
    let deadline = Instant::now() + within;
    loop {
        let got = broker.counts(queue);
        if got == want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_process_that_does_not_hold_the_lease_holds_no_messages_between_ticks() {
    let Some(server) = redis() else { return };
    let Some(broker) = Broker::shared("credit_amqp") else { return };
    let (source, target) = (Queue::declare(&broker, "credit-src"), Queue::declare(&broker, "credit-dst"));
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_LOG", "info,drain::tick=debug")
        .env("DRAIN_REDIS_URL", server.url())
        .env("DRAIN_SOURCE_URL", broker.url(&source.name))
        .env("DRAIN_TARGET_URL", broker.url(&target.name))
        .env("DRAIN_METRICS_ADDR", "off")
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("SERVICEBUS_DRAIN_BATCH", "32")
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "300");
    let mut p = Running::spawn(cmd);
    assert!(p.wait_for("beat started", Duration::from_secs(60)), "drain did not start: {}", p.log());
    // It ran ticks of its own on the empty queue first (holding the lease).
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.count("tick done") < 2 {
        assert!(Instant::now() < deadline, "no tick ran: {}", p.log());
        std::thread::sleep(Duration::from_millis(200));
    }

    // Another process takes the lease; this one only skips from now on.
    let key = format!("drain:lease:{{{}}}", source.name);
    let foreign = "other-host:00112233445566778899aabbccddeeff";
    assert_eq!(server.command(&["SET", &key, foreign, "PX", "600000"]).unwrap(), Reply::Simple("OK".into()));
    let skipped = p.count("tick skipped");
    let ids: Vec<String> = (0..N).map(|i| format!("credit-{i}")).collect();
    broker.feed(&source.name, &ids);
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.count("tick skipped") < skipped + 3 {
        assert!(Instant::now() < deadline, "the ticks did not skip: {}", p.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        broker.counts(&source.name),
        (N as u64, 0),
        "a non-holder holds no message between ticks: all {N} are ready for the lease holder"
    );

    // The lease is free again: the process drains everything (its next tick attaches).
    assert_eq!(server.command(&["DEL", &key]).unwrap(), Reply::Int(1));
    assert_eq!(await_counts(&broker, &source.name, (0, 0), Duration::from_secs(30)), (0, 0), "{}", p.log());
    let landed = broker.collect(&target.name);
    assert_eq!(landed.len(), N, "every message reached the target");
    assert!(landed.values().all(|n| *n == 1), "each once: {landed:?}");
    p.terminate();
    assert!(p.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", p.log());
}

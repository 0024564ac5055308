//! No credit outside a tick: with the single-flight lease on, a `drain run` process
//! that does not hold the lease sits on no message of the queue between its ticks
//! (RabbitMQ counts none unacknowledged for it; Service Bus has no message locked to
//! it), so the holder can have them all.

use std::time::{Duration, Instant};

use drain_e2e::proxy::Proxy;
use drain_e2e::rabbit::{Broker, Queue};
use drain_e2e::servicebus::{self, counts, eventually, ids};
use drain_e2e::{Running, drain, redis};
use test_servers::Reply;
use test_servicebus::{QueueConfig, SubQueue};

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
    let server = redis();
    let broker = Broker::shared("credit_amqp");
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

/// Messages on the Service Bus queue: enough that the tick is still draining when
/// its lease renewal (every TTL/3, 3.3 s) finds the lease taken.
const SB_N: usize = 20_000;
/// `SERVICEBUS_DRAIN_BATCH`: the first receive's size.
const SB_BATCH: usize = 32;
/// `SERVICEBUS_DRAIN_MAX_IN_FLIGHT`: the most a receive asks for, and the credit the
/// receiver keeps open.
const SB_WINDOW: usize = 128;

/// On Service Bus, the credit a tick leaves open is filled with messages locked to
/// the process: the lease holder loses the lease mid-drain (another process takes
/// it), its tick stops with a batch of credit open, and the park after the tick
/// must give those messages back (drained, released), not leave them locked until
/// their lock runs out. From then on, across its skipped ticks, the process holds no
/// lock; the messages it gave back keep their delivery count (only the batches in
/// hand when the tick stopped, a window each at most, were abandoned, which counts
/// one); once the lease is free it
/// drains them all, each once.
#[test]
fn on_service_bus_a_process_that_lost_the_lease_holds_no_lock_between_ticks() {
    let server = redis();
    let b = servicebus::broker(&[("requests", QueueConfig::default()), ("work", QueueConfig::default())]);
    let sent: Vec<String> = (0..SB_N).map(|i| format!("sb-{i:05}")).collect();
    servicebus::feed(&b, "requests", &sent);
    // The target behind a proxy the test holds while it takes the lease away: the
    // tick cannot drain everything before its renewal (every 3.3 s) finds it lost.
    let proxy = Proxy::start(b.addr());
    let target_url =
        servicebus::url(&b, "work").replace(&format!(":{};", b.addr().port()), &format!(":{};", proxy.port()));
    let mut cmd = drain();
    cmd.arg("run")
        .env("DRAIN_LOG", "info,drain::tick=debug,drain::observe=debug,adapter_servicebus=debug")
        .env("DRAIN_REDIS_URL", server.url())
        .env("DRAIN_SOURCE_URL", servicebus::url(&b, "requests"))
        .env("DRAIN_TARGET_URL", target_url)
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "10")
        .env("DRAIN_BEAT_INTERVAL_SECONDS", "1")
        .env("SERVICEBUS_DRAIN_BATCH", SB_BATCH.to_string())
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "1")
        .env("SERVICEBUS_DRAIN_MAX_IN_FLIGHT", SB_WINDOW.to_string())
        .env("SERVICEBUS_DRAIN_MAX_WAIT_MS", "300");
    let mut p = Running::spawn(cmd);
    assert!(p.wait_for("beat started", Duration::from_secs(60)), "drain did not start: {}", p.log());
    assert!(eventually(Duration::from_secs(30), || counts(&b, "work").0 >= 100), "no tick drained: {}", p.log());

    // Another process takes the lease: the next renewal finds it lost and the tick stops.
    proxy.hold();
    let key = "drain:lease:{requests}";
    let foreign = "other-host:00112233445566778899aabbccddeeff";
    assert_eq!(server.command(&["SET", key, foreign, "PX", "600000"]).unwrap(), Reply::Simple("OK".into()));
    assert!(p.wait_for("lease lost", Duration::from_secs(30)), "the tick did not lose the lease: {}", p.log());
    proxy.release();
    assert!(p.wait_for("tick ended early", Duration::from_secs(30)), "the tick did not stop: {}", p.log());
    let skipped = p.count("tick skipped");
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.count("tick skipped") < skipped + 3 {
        assert!(Instant::now() < deadline, "the ticks did not skip: {}", p.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (active, locked) = counts(&b, "requests");
    let moved = counts(&b, "work").0;
    assert!(active > SB_BATCH, "the tick stopped mid-drain ({moved} of {SB_N} moved): {}", p.log());
    assert_eq!(locked, 0, "a non-holder holds no lock between ticks ({active} available): {}", p.log());
    let counted = b.messages("requests", SubQueue::Main).iter().filter(|m| m.delivery_count > 0).count();
    assert!(
        counted <= 2 * SB_WINDOW,
        "{counted} messages had a delivery counted: only the batches in hand when the tick stopped (two windows \
         at most) may"
    );

    // The lease is free again: the process drains everything (its next tick attaches).
    assert_eq!(server.command(&["DEL", key]).unwrap(), Reply::Int(1));
    let drained = eventually(Duration::from_secs(180), || counts(&b, "requests") == (0, 0));
    assert!(drained, "{:?} left in the source: {}", counts(&b, "requests"), p.log());
    let landed = ids(&b, "work", SubQueue::Main);
    assert_eq!(landed.len(), SB_N, "every message reached the target");
    assert!(landed.values().all(|n| *n == 1), "each once");
    assert_eq!(b.stats("requests").map(|s| s.dead_lettered), Some(0));
    p.terminate();
    assert!(p.wait_exit(Duration::from_secs(20)).is_some_and(|s| s.success()), "{}", p.log());
}

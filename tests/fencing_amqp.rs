//! A tick's holder frozen past its lease's TTL, end to end: two `drain run` processes
//! drain a RabbitMQ queue into another with single-flight on, a private Redis for
//! leases and claims, and every message stamped with its tick's fence
//! (`DRAIN_TARGET_FENCE_PROPERTY`). The test SIGSTOPs the holder mid-drain, lets the
//! other process take the lease and drain, SIGCONTs the first, and reads the target
//! as the example consumer of `crates/adapter-servicebus/tests/rabbitmq_fence_check.rs`
//! does, with drain-core's `FenceCheck`: nothing the frozen holder sent may arrive
//! after the new holder's first message, and every message arrives.
//!
//! The frozen holder must have nothing on its way when it stops, or whatever was
//! still inside the process would go out after the thaw, a write in flight that only
//! the consumer's check can refuse (docs/reliability.md, "Fencing"). So its target
//! connection runs through a proxy (`support/proxy.rs`) that the test holds first,
//! until the holder has sent nothing for half a second: the submits it started have
//! gone out and wait for their outcomes, and it cannot start more (a fixed pause
//! was not enough on a loaded machine: a message the holder had started went out
//! after the thaw, once in ten runs). Then SIGSTOP, then the proxy lets the held
//! messages through, long before the other process can take the lease.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use adapter_redis::KeySpace;
use adapter_redis::keys::KeyKind;
use adapter_servicebus::{AmqpSource, Endpoint, SourceOptions};
use drain_core::fence::{FenceCheck, FenceDecision};
use drain_core::memory::MemoryStore;
use drain_core::ports::{Clock, LeaseName, MessageSource};
use drain_e2e::proxy::Proxy;
use drain_e2e::rabbit::{self, Broker};
use drain_e2e::{RedisServer, Running, TokioClock, beat_started, drain_bin, fleet_member, redis};
use test_servers::Reply;

/// `DRAIN_KEY_PREFIX` (the default).
const PREFIX: &str = "drain";
/// The lease's TTL, seconds: the floor of `SERVICEBUS_DRAIN_LOCK_TTL_SECONDS`.
const TTL: u64 = 10;
/// The application property the target stamps with the fence.
const PROPERTY: &str = "drain-fence";
/// Bound on each wait.
const BOUND: Duration = Duration::from_secs(60);

/// One `drain run` from `source` to `target` (through its proxy): lease and claims
/// on, a beat every second. Claims stay pending for 60 s, longer than the freeze, so
/// no other process takes over a message the frozen one may still submit.
fn start(redis: &RedisServer, source: &str, target: &str, instance: &str) -> Running {
    let mut cmd = fleet_member(&redis.url(), (source, target), instance);
    cmd.env("DRAIN_TARGET_FENCE_PROPERTY", PROPERTY)
        .env("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", TTL.to_string())
        .env("SERVICEBUS_ATOMIC_CLAIM_PENDING_SECONDS", "60")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "2");
    beat_started(cmd, instance)
}

fn string(reply: Reply) -> Option<String> {
    match reply {
        Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
        _ => None,
    }
}

/// The instance holding `queue`'s lease, and the lease's last fence.
fn holder(redis: &RedisServer, queue: &str) -> (Option<String>, u64) {
    let keys = KeySpace::new(PREFIX).lease(&LeaseName::queue(queue));
    let token = string(redis.command(&["GET", &keys.lease]).expect("GET lease"));
    let fence = string(redis.command(&["GET", &keys.fence]).expect("GET fence")).and_then(|f| f.parse().ok());
    (token.and_then(|t| Some(t.rsplit_once(':')?.0.to_owned())), fence.unwrap_or(0))
}

/// Keys in Redis: the lease, its fence, and one claim per message claimed so far.
fn keys(redis: &RedisServer) -> u64 {
    match redis.command(&["DBSIZE"]).expect("DBSIZE") {
        Reply::Int(n) => u64::try_from(n).unwrap_or(0),
        other => panic!("DBSIZE answered {other:?}"),
    }
}

/// Message ids of `queue` whose claim is pending under `instance`: taken, perhaps
/// submitted, not yet marked done.
fn pending(redis: &RedisServer, queue: &str, instance: &str) -> BTreeSet<String> {
    let space = KeySpace::new(PREFIX);
    let Reply::Array(Some(keys)) = redis.command(&["KEYS", &format!("{PREFIX}:msg:*")]).expect("KEYS") else {
        panic!("KEYS answered no array")
    };
    let mine = format!("pending:{instance}:");
    keys.into_iter()
        .filter_map(string)
        .filter(|key| string(redis.command(&["GET", key]).expect("GET")).is_some_and(|v| v.starts_with(&mine)))
        .filter_map(|key| match space.parse(&key) {
            Some(KeyKind::MessageClaim { queue: q, message_id }) if q == queue.as_bytes() => {
                Some(message_id.to_string())
            }
            _ => None,
        })
        .collect()
}

/// Wait (bounded) until `cond` holds.
fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A message in the target: its id and fence.
type Arrived = (String, Option<u64>);

/// What the target holds, in the order it arrived, each taken off: (message id,
/// fence), and the ones the consumer's fence check refused (with the mark they were
/// below), as the example consumer would dead-letter them.
fn read_target(broker: &Broker, queue: &str) -> (Vec<Arrived>, Vec<(String, FenceDecision)>) {
    let endpoint = Endpoint::parse(&broker.url(queue)).expect("the target's URL").endpoint;
    rabbit::block_on(async {
        let options = SourceOptions { prefetch: 256, ..SourceOptions::default() };
        let source = AmqpSource::connect(endpoint, options).await.expect("the target's consumer");
        let marks = MemoryStore::new(Arc::new(TokioClock::new()) as Arc<dyn Clock>);
        let check = FenceCheck::new(&marks, PROPERTY);
        let (mut arrived, mut refused) = (Vec::new(), Vec::new());
        for _ in 0..10_000 {
            let batch = source.receive(256, Duration::from_millis(500)).await.expect("receive");
            if batch.is_empty() {
                break;
            }
            for d in batch {
                let id = d.message.message_id.as_ref().map(ToString::to_string).unwrap_or_default();
                arrived.push((id.clone(), check.fence_of(&d.message).expect("a fence or none")));
                let why = check.check(queue, &d.message).await.expect("the marks answer");
                if why.must_refuse() {
                    refused.push((id, why));
                }
                source.complete(d.handle).await.expect("complete");
            }
        }
        source.close().await.expect("close the consumer");
        (arrived, refused)
    })
}

/// The report of a tick that lost its lease, as the process logged it (JSON in the log
/// line's `report` field), if one did.
fn ended_early(p: &mut Running) -> Option<serde_json::Value> {
    p.count("");
    p.seen.iter().filter(|l| l.contains("tick ended early")).find_map(|line| {
        let line: serde_json::Value = serde_json::from_str(line).ok()?;
        let report: serde_json::Value = serde_json::from_str(line["report"].as_str()?).ok()?;
        report["lease_lost"].as_bool()?.then_some(report)
    })
}

/// Without the guard's deadline this test fails: after the SIGCONT, the submits the
/// holder had on the wire complete at once (their outcomes came while it was stopped),
/// so the drain starts its next submits, claimed under its own token, before its first
/// renewal can come back `Lost`; those carry the old fence and reach the target after
/// the new holder's messages, and the consumer refuses them (before the deadline, the
/// tick submitted 2 more messages after the thaw). With the deadline, the guard finds
/// the lease lost before it polls the drain again, and the drain starts nothing more.
#[test]
fn a_holder_frozen_past_its_ttl_sends_nothing_after_the_next_holder_s_first_message() {
    const N: usize = 2_000;
    let broker = Broker::shared("fencing_amqp");
    let redis = redis();
    drain_bin(); // built before the clock starts
    let ids = rabbit::ids(N);
    let (source, target) = broker.source_and_target("fencing", &ids);

    let started = Instant::now();
    let upstream = Endpoint::parse(&broker.base).expect("the broker's URL").endpoint;
    let upstream: SocketAddr = format!("{}:{}", upstream.host, upstream.port).parse().expect("a literal address");
    let proxies = [Proxy::start(upstream), Proxy::start(upstream)];
    let via = |proxy: &Proxy| {
        broker.url(&target.name).replacen(&upstream.to_string(), &format!("127.0.0.1:{}", proxy.port()), 1)
    };
    let instances = ["fenced-0", "fenced-1"];
    let mut procs: Vec<Running> =
        (0..2).map(|i| start(&redis, &broker.url(&source.name), &via(&proxies[i]), instances[i])).collect();
    let slot = |instance: &Option<String>| instances.iter().position(|i| Some(*i) == instance.as_deref());

    // Mid-drain: a holder, and 100 messages claimed (a key each, beside the lease and its fence).
    wait("a holder mid-drain", || keys(&redis) >= 2 + 100 && slot(&holder(&redis, &source.name).0).is_some());
    let (instance, old) = holder(&redis, &source.name);
    let frozen = slot(&instance).expect("a holder");
    let froze = Instant::now();
    proxies[frozen].hold();
    proxies[frozen].wait_quiet(Duration::from_millis(500));
    procs[frozen].freeze();
    proxies[frozen].release();
    let at_freeze = keys(&redis);
    let in_flight = pending(&redis, &source.name, instances[frozen]);
    assert_eq!(holder(&redis, &source.name), (instance, old), "the frozen process held the lease");
    assert!(!in_flight.is_empty(), "frozen mid-drain: claims taken and not yet settled");

    // The other process takes the lease once it expires, and drains: two batches
    // claimed mean its first batch's messages went out (the next batch is claimed only
    // once one of them was submitted).
    let other = 1 - frozen;
    wait("the other process takes over", || {
        let (now, fence) = holder(&redis, &source.name);
        slot(&now) == Some(other) && fence > old && keys(&redis) >= at_freeze + 64
    });
    let new = holder(&redis, &source.name).1;
    procs[frozen].thaw();
    let pause = froze.elapsed();
    wait("the source drained", || broker.counts(&source.name) == (0, 0));
    let report = ended_early(&mut procs[frozen]);
    for (i, mut p) in procs.into_iter().enumerate() {
        p.terminate();
        let status = p.wait_exit(Duration::from_secs(20));
        assert!(status.is_some_and(|s| s.success()), "{} exited with {status:?}: {}", instances[i], p.log());
    }

    let (arrived, refused) = read_target(&broker, &target.name);
    let fences: BTreeMap<Option<u64>, usize> = arrived.iter().fold(BTreeMap::new(), |mut m, (_, f)| {
        *m.entry(*f).or_insert(0) += 1;
        m
    });
    let first_new = arrived.iter().position(|(_, f)| f.is_some_and(|f| f > old));
    let late: Vec<&Arrived> =
        first_new.map_or(&[][..], |i| &arrived[i..]).iter().filter(|(_, f)| f.is_none_or(|f| f <= old)).collect();
    let mut seen: BTreeMap<&str, u32> = BTreeMap::new();
    for (id, _) in &arrived {
        *seen.entry(id).or_insert(0) += 1;
    }
    let twice: Vec<&str> = seen.iter().filter(|(_, n)| **n > 1).map(|(id, _)| *id).collect();
    eprintln!(
        "{N} messages through 2 processes in {:.1} s; the holder (fence {old}) frozen {:.1} s mid-drain with {} \
         claims pending, the other took the lease with fence {new}; the frozen one's tick after the thaw: {}; \
         arrivals per fence {fences:?}; old fence after the new holder's first message: {}, refused by the \
         consumer's fence check: {}; {} ids twice",
        started.elapsed().as_secs_f64(),
        pause.as_secs_f64(),
        in_flight.len(),
        report.as_ref().map_or_else(|| "no report".to_owned(), ToString::to_string),
        late.len(),
        refused.len(),
        twice.len()
    );

    assert!(fences.contains_key(&Some(old)), "the frozen holder had submitted before it was frozen");
    assert!(first_new.is_some(), "the new holder's messages arrived");
    assert!(late.is_empty(), "sent by the frozen holder after the new holder's first message: {late:?}");
    assert!(refused.is_empty(), "the consumer's fence check refused {refused:?}");
    assert!(!fences.contains_key(&None), "every message carries its tick's fence");
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(id.as_str())).collect();
    assert!(missing.is_empty(), "{} messages lost: {missing:?}", missing.len());
    assert_eq!(seen.len(), N, "only the ids that were sent arrive");
    // The per-message claim promises at least once: a second copy only of a message
    // whose claim the frozen holder held (its submit's outcome lost), which a consumer
    // that deduplicates by message id drops.
    let unexplained: Vec<&&str> = twice.iter().filter(|id| !in_flight.contains(**id)).collect();
    assert!(unexplained.is_empty(), "submitted twice without a claim in flight at the freeze: {unexplained:?}");
    let report = report.expect("the frozen holder's tick ended early");
    assert_eq!((report["fence"].as_u64(), report["lease_lost"].as_bool()), (Some(old), Some(true)), "{report}");
}

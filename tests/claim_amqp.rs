//! drain-core's tick over real parts, in process. The source
//! and target are adapter-servicebus on RabbitMQ's AMQP 1.0, the atomic claim is
//! adapter-redis on a private redis-server. 4 overlapping ticks (single-flight off)
//! and a resident consumer (one batch per tick, as `drain run` builds it) share the one
//! source, like the ticks of one `drain` process, and submit through a target that is
//! slow and fails 10 % of its calls before sending.
//!
//! The source holds 2,000 distinct messages plus copies of every 20th one, re-sent a
//! few dozen places later (a producer that retried): the copies are the duplicates
//! the claim must suppress and count, and they meet their originals' pending claims in
//! other ticks. One AMQP link never hands a message to two ticks at once, so on a
//! healthy run without copies no claim would ever collide or find `done`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapter_redis::{RedisConfig, RedisStore};
use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use async_trait::async_trait;
use drain_core::event::{Event, MessageOutcome};
use drain_core::ports::{ClaimState, Message, SettledThenClaimed, SubmitContext, Submitter};
use drain_core::testkit::{Answer, Call, Forward, Hooks, RecordingObserver, TestRng};
use drain_core::tick::{DrainStats, TickConfig, TickControl, TickPorts, TickReport, run_tick};
use drain_core::{ErrorKind, LeaseToken, PortError, Switch};
use drain_e2e::rabbit::{Broker, block_on};
use drain_e2e::{TokioClock, redis};
use futures::future::join_all;
use test_servers::Reply;

/// Distinct messages.
const N: usize = 2_000;
/// Every this many messages, one is re-sent ...
const RESEND_EVERY: usize = 20;
/// ... this many places after the original.
const RESEND_GAP: usize = 40;
/// Overlapping beat ticks.
const TICKS: usize = 4;
/// Seed of the target's delays and failures.
const SEED: u64 = 0x00C1_A1AA_0004;
/// Bound on the whole drain; then the ticks are told to stop, and get `STOP_BOUND`.
const BOUND: Duration = Duration::from_secs(120);
const STOP_BOUND: Duration = Duration::from_secs(15);

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The real AMQP submitter behind a slow, flaky front: the `attempt`-th submit of an
/// id waits 2..12 ms and fails in 1 of 10 cases, both drawn from (SEED, id, attempt).
/// A failure happens before sending: the broker never sees that submit.
struct Flaky {
    inner: AmqpSubmitter,
    tally: Tally,
}

/// What [`Flaky`] did: submits per id, ids that failed, failed and accepted submits.
#[derive(Default)]
struct Tally {
    attempts: Mutex<HashMap<String, u32>>,
    failed: Mutex<BTreeSet<String>>,
    failures: AtomicU64,
    sent: AtomicU64,
}

#[async_trait]
impl Submitter for Flaky {
    async fn submit(&self, message: &Message, ctx: &SubmitContext<'_>) -> Result<(), PortError> {
        let id = message.message_id.as_ref().map(ToString::to_string).unwrap_or_default();
        let attempt = {
            let mut attempts = self.tally.attempts.lock().expect("attempts");
            let n = attempts.entry(id.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let roll = id.bytes().fold(mix(SEED ^ u64::from(attempt)), |h, b| mix(h ^ u64::from(b)));
        tokio::time::sleep(Duration::from_millis(2 + roll % 10)).await;
        if (roll >> 32).is_multiple_of(10) {
            self.tally.failures.fetch_add(1, Relaxed);
            self.tally.failed.lock().expect("failed").insert(id);
            return Err(PortError::new(ErrorKind::Unavailable, "injected: the target refused before sending"));
        }
        self.inner.submit(message, ctx).await?;
        self.tally.sent.fetch_add(1, Relaxed);
        Ok(())
    }
}

/// Counts the claims found pending under another tick's token, for a
/// [`Forward`] claim store.
#[derive(Default)]
struct CountBusy {
    pending_elsewhere: AtomicU64,
}

impl Hooks for CountBusy {
    fn answered(&self, _: Call<'_>, answer: Answer<'_>) {
        let states = match answer {
            Answer::Claimed(Ok(states)) => states,
            Answer::SettledThenClaimed(SettledThenClaimed { claimed: Ok(states), .. }) => states,
            _ => return,
        };
        let busy = states.iter().filter(|s| matches!(s, ClaimState::PendingElsewhere { .. })).count();
        self.pending_elsewhere.fetch_add(busy as u64, Relaxed);
    }
}

/// Ticks of `cfg` one after another until one receives nothing (or `stop`).
async fn ticks(cfg: &TickConfig, ports: &TickPorts<'_>, seeds: &AtomicU64, stop: &TickControl) -> Vec<TickReport> {
    let mut reports = Vec::new();
    while !stop.is_stopped() {
        let token = LeaseToken::generate("claim-amqp", &mut TestRng::new(seeds.fetch_add(1, Relaxed)));
        let report = run_tick(cfg, ports, &token, stop).await;
        let empty = report.error.is_none() && report.stats.is_some_and(|s| s.received == 0);
        reports.push(report);
        if empty {
            break;
        }
    }
    reports
}

fn sum<'a>(reports: impl IntoIterator<Item = &'a TickReport>) -> DrainStats {
    reports.into_iter().filter_map(|r| r.stats).fold(DrainStats::default(), |a, s| {
        let mut m = DrainStats::default();
        m.received = a.received + s.received;
        m.submitted = a.submitted + s.submitted;
        m.duplicates = a.duplicates + s.duplicates;
        m.abandoned = a.abandoned + s.abandoned;
        m.dead_lettered = a.dead_lettered + s.dead_lettered;
        m.settle_errors = a.settle_errors + s.settle_errors;
        m.claim_settle_errors = a.claim_settle_errors + s.claim_settle_errors;
        m.claim_errors = a.claim_errors + s.claim_errors;
        m.submit_failures = a.submit_failures + s.submit_failures;
        m.claims_expired = a.claims_expired + s.claims_expired;
        m
    })
}

/// Claim keys in Redis holding `done:…` and `pending:…`.
fn claim_values(redis: &test_servers::RedisServer) -> (i64, i64) {
    const SCRIPT: &str = "local d, p = 0, 0 \
        for _, k in ipairs(redis.call('KEYS', ARGV[1])) do \
          local v = redis.call('GET', k) \
          if string.sub(v, 1, 5) == 'done:' then d = d + 1 elseif string.sub(v, 1, 8) == 'pending:' then p = p + 1 end \
        end return {d, p}";
    let reply = redis.command(&["EVAL", SCRIPT, "0", "drain:msg:*"]).expect("EVAL");
    if let Reply::Array(Some(v)) = &reply
        && let [Reply::Int(d), Reply::Int(p)] = v.as_slice()
    {
        return (*d, *p);
    }
    panic!("claim count answered {reply:?}");
}

#[test]
fn overlapping_ticks_and_a_resident_consumer_submit_each_message_exactly_once_over_a_flaky_target() {
    let broker = Broker::shared("claim_amqp");
    let redis = redis();
    let ids: Vec<String> = (0..N).map(|i| format!("c-{i:05}")).collect();
    let mut feed = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        feed.push(id.clone());
        if i >= RESEND_GAP && (i - RESEND_GAP).is_multiple_of(RESEND_EVERY) {
            feed.push(ids[i - RESEND_GAP].clone());
        }
    }
    let copies = (feed.len() - N) as u64;
    let (source_q, target_q) = broker.source_and_target("claim", &feed);

    let endpoint = |q: &str| Endpoint::parse(&broker.url(q)).expect("queue URL").endpoint;
    let (source, target, store) = block_on(async {
        let source = AmqpSource::connect(endpoint(&source_q.name), SourceOptions::default()).await.expect("source");
        let target =
            AmqpSubmitter::connect(endpoint(&target_q.name), SubmitterOptions::default()).await.expect("target");
        let store = RedisStore::connect(RedisConfig::new(redis.url())).await.expect("redis");
        (source, target, store)
    });
    let target = Flaky { inner: target, tally: Tally::default() };
    let store = Arc::new(store);
    let claims = Forward::new(store.clone(), CountBusy::default());
    let (clock, observer) = (TokioClock::new(), RecordingObserver::new());
    let ports = TickPorts::new(&source, &target, &clock, &observer).leases(&*store).claims(&claims);
    let mut beat = TickConfig::new(&source_q.name);
    (beat.singleflight, beat.atomic_claim) = (Switch::Off, Switch::On);
    (beat.batch, beat.concurrency, beat.max_wait) = (16, 4, Duration::from_millis(500));
    // The resident consumer as `beat::resident_loop` builds it.
    let mut resident = beat.clone();
    (resident.singleflight, resident.max_batches) = (Switch::Off, Some(1));

    // Rounds of 4 beat-tick loops and the resident loop at once, until a round in
    // which every tick received nothing.
    let (seeds, stop) = (AtomicU64::new(1), TickControl::default());
    let started = Instant::now();
    let (mut beat_reports, mut resident_reports, mut rounds) = (Vec::new(), Vec::new(), 0);
    block_on(async {
        let work = async {
            loop {
                rounds += 1;
                let beats = join_all((0..TICKS).map(|_| ticks(&beat, &ports, &seeds, &stop)));
                let (b, r) = futures::join!(beats, ticks(&resident, &ports, &seeds, &stop));
                let received = sum(&r).received + b.iter().map(|b| sum(b).received).sum::<u64>();
                beat_reports.extend(b.into_iter().flatten());
                resident_reports.extend(r);
                if received == 0 || stop.is_stopped() {
                    break;
                }
            }
        };
        futures::pin_mut!(work);
        tokio::select! {
            () = &mut work => {}
            () = tokio::time::sleep(BOUND) => {
                stop.stop();
                tokio::time::timeout(STOP_BOUND, work).await.expect("the ticks did not stop");
            }
        }
    });
    let took = started.elapsed();
    let reports: Vec<&TickReport> = beat_reports.iter().chain(&resident_reports).collect();
    let s = sum(reports.iter().copied());
    let outcome =
        |o: MessageOutcome| observer.count(|e| matches!(e, Event::Message { outcome, .. } if *outcome == o)) as u64;
    let busy = outcome(MessageOutcome::ClaimedElsewhere);
    let pending_elsewhere = claims.hooks().pending_elsewhere.load(Relaxed);
    let (failures, sent) = (target.tally.failures.load(Relaxed), target.tally.sent.load(Relaxed));
    let failed_ids = target.tally.failed.lock().expect("failed").len();
    eprintln!(
        "claim_amqp: {} submitted, {failures} failed submits ({failed_ids} ids) retried, {} duplicates of {copies} \
         re-sent copies, {busy} claim-busy abandons ({pending_elsewhere} claims pending in another tick), {} ticks \
         ({} beat, {} resident) in {rounds} rounds, {:.1} s",
        s.submitted,
        s.duplicates,
        reports.len(),
        beat_reports.len(),
        resident_reports.len(),
        took.as_secs_f64()
    );
    let counts = broker.counts(&source_q.name);
    assert!(
        !stop.is_stopped(),
        "not drained within {BOUND:?}: {sent} of {N} submitted, source (ready, unacked) {counts:?}"
    );
    // Nothing is left unsettled: nothing ready and nothing held by the open link.
    assert_eq!(counts, (0, 0), "the source is empty while its link is open");
    block_on(async {
        source.close().await.expect("close source");
        target.inner.close().await.expect("close target");
    });
    assert_eq!(broker.counts(&source_q.name), (0, 0), "nothing came back when the link closed");

    // Every id is in the target exactly once.
    let seen = broker.collect(&target_q.name);
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(missing.is_empty(), "{} messages never reached the target: {missing:?}", missing.len());
    let twice: BTreeMap<&String, &u32> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "submitted more than once: {twice:?}");
    assert_eq!(seen.len(), N, "only the ids that were sent arrive");
    assert_eq!(sent, N as u64, "the broker accepted one submit per id");

    // The reports add up.
    let errors: Vec<&String> = reports.iter().filter_map(|r| r.error.as_ref()).collect();
    assert!(errors.is_empty(), "ticks ended early: {errors:?}");
    let each = "each id submitted once, each re-sent copy completed as a duplicate";
    assert_eq!((s.submitted, s.duplicates), (N as u64, copies), "{each}: {s:?}");
    assert_eq!(s.received, s.submitted + s.duplicates + s.abandoned, "every delivery accounted for: {s:?}");
    assert_eq!((s.dead_lettered, s.settle_errors, s.claim_settle_errors), (0, 0, 0), "{s:?}");

    // Failed submits happened and each was abandoned with its claim released; the ids
    // they failed for are among those found in the target above: retried.
    assert!(failures > 0, "the target failed some submits");
    assert_eq!(outcome(MessageOutcome::SubmitFailed), failures, "each failed submit was seen by the tick");
    assert_eq!(s.abandoned, failures + busy, "abandoned: failed submits and claims busy elsewhere only: {s:?}");
    assert_eq!((outcome(MessageOutcome::ClaimError), outcome(MessageOutcome::Cancelled)), (0, 0));
    assert!(pending_elsewhere > 0, "overlapping ticks met each other's pending claims");

    // Redis holds one `done` claim per id and no pending one.
    assert_eq!(claim_values(&redis), (N as i64, 0), "(done, pending) claims in Redis");
}

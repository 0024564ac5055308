//! Redis commands and round trips per operation, read from the server's
//! `INFO commandstats` and the store's own `StoreOp` events, for the table of
//! `cargo xtask bench` (the tests in `tests/round_trips.rs` assert the same counts).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use adapter_redis::RedisStore;
use bench_support::stats::rounded;
use drain_core::admission::OwnerId;
use drain_core::ports::{ClaimStore, ClaimTtls, LeaseName, LeaseStore, MessageId, OwnerClaims};
use drain_core::testkit::{RecordingObserver, TestRng, half_done};
use drain_core::{Event, LeaseToken};
use test_servers::RedisServer;

/// Commands Redis runs inside our scripts: counted by `INFO commandstats`, but
/// never sent by the client.
const INSIDE_SCRIPTS: &[&str] = &["get", "set", "incr", "pexpiretime", "del", "pttl", "pexpire", "exists"];
/// Repetitions per operation; the figures are per operation.
const REPEAT: u64 = 100;
/// Owners per batched peek and messages per claim batch.
const K: usize = 64;

/// One row: what one operation cost.
pub(crate) struct Row {
    pub(crate) op: String,
    /// Commands the client sent (scripts count once, their inner commands not).
    pub(crate) commands: f64,
    /// Round trips, from the store's `StoreOp` events.
    pub(crate) round_trips: f64,
    /// What the adapter promises, in round trips.
    pub(crate) specified: u64,
}

fn sent(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, keep_reads: bool) -> u64 {
    after
        .iter()
        .filter(|(k, _)| k.as_str() != "info")
        .filter(|(k, _)| keep_reads || !INSIDE_SCRIPTS.contains(&k.as_str()))
        .map(|(k, v)| v - before.get(k).copied().unwrap_or(0))
        .sum()
}

/// Measure every operation `REPEAT` times on `store` against `redis`.
pub(crate) async fn measure(redis: &RedisServer, store: &RedisStore) -> Vec<Row> {
    let observer = Arc::new(RecordingObserver::new());
    let store = store.clone().with_observer(observer.clone());
    let me = LeaseToken::generate("bench", &mut TestRng::new(7));
    let ttl = Duration::from_secs(30);
    let lease = LeaseName::queue("bench-commands-q");
    let owners: Vec<OwnerId> = (0..K).map(|i| OwnerId::from(format!("bench-owner-{i}"))).collect();
    let msgs: Vec<MessageId> = (0..K).map(|i| MessageId::from(format!("m{i}"))).collect();
    let settle = half_done(&msgs);
    let stats = || redis.command_calls().expect("INFO commandstats");

    let mut rows = Vec::new();
    // (name, specified round trips, whether the op is a pipeline of reads whose
    // commands are the client's own, not a script's).
    for (op, specified, reads) in [
        ("acquire", 1, false),
        ("renew", 1, false),
        ("release", 1, false),
        ("peek", 1, true),
        ("peek_owners_64", 1, true),
        ("claim_batch_64", 1, false),
        ("settle_batch_64", 1, false),
        ("settle_then_claim_64_64", 1, false),
    ] {
        observer.clear();
        let before = stats();
        for _ in 0..REPEAT {
            match op {
                "acquire" => drop(store.acquire(&lease, &me, ttl).await.expect("acquire")),
                "renew" => drop(store.renew(&lease, &me, ttl).await.expect("renew")),
                "release" => drop(store.release(&lease, &me).await.expect("release")),
                "peek" => drop(store.peek(&lease).await.expect("peek")),
                "peek_owners_64" => drop(store.peek_owners(&owners).await.expect("peek_owners")),
                "claim_batch_64" => drop(store.claim_batch("q", &msgs, &me, ttl).await.expect("claim_batch")),
                "settle_batch_64" => drop(store.settle_batch("q", &settle, &me, ttl).await.expect("settle_batch")),
                _ => {
                    let got =
                        store.settle_then_claim("q", &settle, &msgs, &me, ClaimTtls { pending: ttl, done: ttl }).await;
                    drop(got.settled.expect("settle_then_claim: settled"));
                    drop(got.claimed.expect("settle_then_claim: claimed"));
                }
            }
        }
        let after = stats();
        let trips = observer.count(|e| matches!(e, Event::StoreOp { .. })) as u64;
        // `release` runs after a successful acquire only once; later releases find
        // nothing to delete, which costs the same one EVALSHA.
        rows.push(Row {
            op: op.to_owned(),
            commands: sent(&before, &after, reads) as f64 / REPEAT as f64,
            round_trips: trips as f64 / REPEAT as f64,
            specified,
        });
    }
    rows
}

/// The rows as a JSON array.
pub(crate) fn json(rows: &[Row]) -> serde_json::Value {
    let row = |r: &Row| {
        serde_json::json!({
            "op": r.op,
            "commands_per_op": rounded(r.commands, 2),
            "round_trips_per_op": rounded(r.round_trips, 2),
            "specified_round_trips": r.specified,
        })
    };
    rows.iter().map(row).collect()
}

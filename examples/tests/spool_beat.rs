//! `spool-beat` and its ports: the spool keeps drain-core's message-source contract;
//! three processes on one spool, the lease and the claims on a private redis-server,
//! deliver every message once although the spool holds each twice, skip ticks while
//! another holds the lease, and stop cleanly on SIGTERM.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drain_core::ports::{MessageId, Submitter};
use drain_core::testkit::{contract, message};
use drain_examples::spool::{SpoolSource, SpoolWriter};
use serde_json::Value;
use support::Program;
use test_servers::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_spool-beat");
const MESSAGES: usize = 150;
/// The messages arrive in this many waves.
const WAVES: usize = 10;

/// A fresh directory of this test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("drain-examples-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Files in `dir` (none when it does not exist).
fn count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, Iterator::count)
}

#[tokio::test]
async fn the_spool_keeps_the_message_source_contract() {
    let dir = TempDir::new("contract");
    let source = SpoolSource::new(&dir.0, Duration::from_secs(30)).expect("spool");
    let feed = SpoolWriter::new(&dir.0).expect("writer");
    let dead = SpoolSource::new(dir.0.join("dead"), Duration::from_secs(30)).expect("dead-letter spool");
    let checked = contract::message_source(&source, &feed, Some(&dead), Duration::from_millis(100))
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    assert!(checked.skipped.is_empty(), "{:?}", checked.skipped);
}

#[tokio::test]
async fn three_beats_deliver_every_message_once_skip_ticks_by_the_lease_and_stop_on_sigterm() {
    let redis = RedisServer::start();
    let dir = TempDir::new("beat");
    let (spool, out) = (dir.0.join("spool"), dir.0.join("out"));
    let producer = SpoolWriter::new(&spool).expect("spool");
    let args = |me: &'static str| [redis.url(), spool.display().to_string(), out.display().to_string(), me.to_owned()];
    let mut all: Vec<Program> =
        ["a", "b", "c"].into_iter().map(|me| Program::start(BIN, &args(me).each_ref().map(String::as_str))).collect();
    // A producer that retried: every message comes twice, the second copy three waves
    // after the first, so that the two copies usually meet different ticks, often of
    // different processes.
    let ctx = drain_core::ports::SubmitContext { queue: "spool", fence: None };
    let per_wave = MESSAGES / WAVES;
    for wave in 0..WAVES + 3 {
        let firsts = (wave < WAVES).then(|| wave * per_wave..(wave + 1) * per_wave);
        let seconds = wave.checked_sub(3).map(|w| w * per_wave..(w + 1) * per_wave);
        for i in firsts.into_iter().chain(seconds).flatten() {
            producer.submit(&message(&format!("order-{i}")), &ctx).await.unwrap_or_else(|e| panic!("{i}: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // Drained once nothing waits and nothing is locked (a message is submitted before
    // it is completed, so the target holds all it will).
    let until = Instant::now() + Duration::from_secs(30);
    while count(&spool.join("ready")) + count(&spool.join("locked")) > 0 {
        let logs: Vec<String> = all.iter().map(Program::output).collect();
        assert!(Instant::now() < until, "the spool was not drained:\n{}", logs.join("\n"));
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in &all {
        p.signal("TERM");
    }
    for p in &mut all {
        let status = p.wait_exit(Duration::from_secs(20)).unwrap_or_else(|| panic!("still running:\n{}", p.output()));
        assert!(status.success(), "{status}\n{}", p.output());
        assert!(p.stderr().iter().any(|l| l.contains("shutdown complete")), "{}", p.output());
    }

    let delivered = SpoolWriter::new(&out).expect("out").ready().expect("read the target");
    let mut times: BTreeMap<MessageId, usize> = BTreeMap::new();
    for m in &delivered {
        *times.entry(m.message_id.clone().expect("an id")).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{} delivered more than once, e.g. {:?}", twice.len(), &twice[..twice.len().min(3)]);
    assert_eq!(times.len(), MESSAGES, "every message delivered");
    for m in &delivered {
        let i: usize = match &m.message_id {
            Some(MessageId::String(id)) => id.trim_start_matches("order-").parse().expect("a number"),
            other => panic!("{other:?}"),
        };
        assert_eq!(*m, message(&format!("order-{i}")), "delivered intact");
    }

    let reports: Vec<Value> =
        all.iter().flat_map(|p| p.stdout()).map(|l| serde_json::from_str(&l).expect("a JSON report")).collect();
    let sum = |field: &str| reports.iter().map(|r| r[field].as_u64().unwrap_or(0)).sum::<u64>();
    assert_eq!(sum("submitted"), MESSAGES as u64, "submitted once each");
    assert_eq!(sum("duplicates"), MESSAGES as u64, "each second copy completed as a duplicate");
    let skipped = reports.iter().filter(|r| r["skipped"] == "locked").count();
    assert!(skipped > 0, "some ticks were skipped by the lease");
    let working = reports.iter().filter(|r| r["received"].as_u64().is_some_and(|n| n > 0)).count();
    assert!(working > 1, "the waves were drained by several ticks, not one: {working}");
    // Every tick that held the lease had a fence of its own, and handed it to the target.
    let fences: Vec<u64> = reports.iter().filter_map(|r| r["fence"].as_u64()).collect();
    assert_eq!(fences.iter().collect::<BTreeSet<_>>().len(), fences.len(), "{fences:?}");
    for file in std::fs::read_dir(out.join("ready")).expect("the target") {
        let text = std::fs::read_to_string(file.expect("a file").path()).expect("a message file");
        let fence: u64 = text.strip_prefix("fence: ").and_then(|t| t.lines().next()?.parse().ok()).expect(&text);
        assert!(fences.contains(&fence), "{fence} is a tick's fence");
    }
}

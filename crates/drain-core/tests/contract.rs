//! The contract suites against drain-core's in-memory ports, and against the
//! deliberately broken stores of `testkit::broken`: the memory store passes every
//! suite, every broken store fails the rule its defect breaks (the real adapters
//! run the same suites against real servers).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use drain_core::PortError;
use drain_core::memory::{ManualClock, MemorySource, MemoryStore, block_on};
use drain_core::ports::{Clock, Delivery, DeliveryHandle, MessageSource};
use drain_core::testkit::broken::{BrokenStore, Defect};
use drain_core::testkit::contract::{self, Checked, ContractEnv, Port, Rule, Violation};

/// Every store suite against `store`, in order, merging what they checked.
async fn store_suites<S>(store: &S, env: &ContractEnv<'_, S>) -> Result<Checked, Violation>
where
    S: drain_core::ports::LeaseStore
        + drain_core::ports::ClaimStore
        + drain_core::ports::OwnerClaims
        + drain_core::ports::ReleaseWake
        + drain_core::ports::FenceMarks
        + drain_core::ports::DrainStamps
        + drain_core::ports::FencedWrites,
{
    let mut all = Checked::default();
    for checked in [
        contract::lease_store(store, env).await?,
        contract::claim_store(store, env).await?,
        contract::owner_claims(store, env).await?,
        contract::release_wake(store, env).await?,
        contract::fence_marks(store, env).await?,
        contract::drain_stamps(store, env).await?,
        contract::fenced_writes(store, env).await?,
    ] {
        all.checked.extend(checked.checked);
        all.skipped.extend(checked.skipped);
    }
    Ok(all)
}

fn store_rules() -> BTreeSet<Rule> {
    Rule::ALL.iter().copied().filter(|r| r.port() != Port::Source).collect()
}

/// Three instances of a store with `defect` (or none), as a fleet's processes would
/// have them: the second's own clock an hour ahead of the store's, the third's an
/// hour behind (a sound store never reads them); virtual time starts a day in.
fn fleet(defect: Option<Defect>) -> (Arc<ManualClock>, [BrokenStore; 3]) {
    let clock = Arc::new(ManualClock::new());
    clock.advance(Duration::from_secs(24 * 3600));
    let store = match defect {
        Some(d) => BrokenStore::new(clock.clone() as Arc<dyn Clock>, d),
        None => BrokenStore::sound(clock.clone() as Arc<dyn Clock>),
    };
    let (ahead, behind) = (store.instance().clock_skew(3_600_000), store.instance().clock_skew(-3_600_000));
    (clock, [store, ahead, behind])
}

#[test]
fn memory_store_passes_every_store_suite_and_checks_every_rule() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    // The memory store serves one process: each of its instances is the one store.
    let all = [&store, &store, &store];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    let checked = block_on(&clock, store_suites(&store, &env)).unwrap_or_else(|v| panic!("{v}"));
    assert!(checked.skipped.is_empty(), "{:?}", checked.skipped);
    let seen: BTreeSet<Rule> = checked.checked.into_iter().collect();
    let missed: Vec<&str> = store_rules().difference(&seen).map(|r| r.id()).collect();
    assert!(missed.is_empty(), "rules no suite checked: {missed:?}");
}

/// Without an outage hook the error rules are skipped, and with one instance the
/// rule that instances agree on expiry: reported, never passed.
#[test]
fn without_an_outage_hook_or_instances_the_rules_they_need_are_skipped_not_passed() {
    let clock = Arc::new(ManualClock::new());
    let store = MemoryStore::new(clock.clone() as Arc<dyn Clock>);
    let env = ContractEnv::new(&*clock);
    let checked = block_on(&clock, store_suites(&store, &env)).unwrap_or_else(|v| panic!("{v}"));
    let skipped: BTreeSet<&str> = checked.skipped.iter().map(|(r, _)| r.id()).collect();
    let want: BTreeSet<&str> = [
        "lease.acquire.error",
        "lease.release.error",
        "lease.renew.error",
        "lease.peek.error",
        "claim.error",
        "claim.settle.error",
        "owners.error",
        "wake.error",
        "fence.error",
        "stamps.error",
        "write.error",
        "store.one_clock",
        "store.never_sent",
    ]
    .into_iter()
    .collect();
    assert_eq!(skipped, want);
    assert!(checked.checked.iter().all(|r| !want.contains(r.id())), "a skipped rule counted as checked");
}

#[test]
fn the_sound_broken_store_passes_every_store_suite() {
    let (clock, [store, b, c]) = fleet(None);
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    let checked = block_on(&clock, store_suites(&store, &env)).unwrap_or_else(|v| panic!("{v}"));
    assert!(checked.skipped.is_empty(), "{:?}", checked.skipped);
}

/// The heart of the suite's own test: each defect is caught, by the rule it breaks.
/// The suites get three instances of the store, as a fleet's processes would be.
#[test]
fn every_broken_store_fails_the_rule_its_defect_breaks() {
    let mut wrong = Vec::new();
    for &defect in Defect::ALL {
        let (clock, [store, b, c]) = fleet(Some(defect));
        let all = [&store, &b, &c];
        let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
        match block_on(&clock, store_suites(&store, &env)) {
            Err(v) if v.rule == defect.rule() => {}
            Err(v) => {
                wrong.push(format!("{defect:?} ({}): wanted `{}`, got {v}", defect.describe(), defect.rule().id()))
            }
            Ok(_) => wrong.push(format!("{defect:?} ({}): every suite passed", defect.describe())),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} broken stores not caught as expected:\n{}",
        wrong.len(),
        Defect::ALL.len(),
        wrong.join("\n")
    );
}

/// A store whose acquires and claims read, then write, but queue on one connection
/// per instance, is caught only when the concurrent callers come through several
/// instances: through one, they never interleave.
#[test]
fn a_one_connection_store_is_caught_only_through_several_instances() {
    for (defect, rule) in [
        (Defect::OneConnectionAcquire, Rule::LeaseAcquireExclusive),
        (Defect::OneConnectionClaim, Rule::ClaimExclusive),
    ] {
        let clock = Arc::new(ManualClock::new());
        let store = BrokenStore::new(clock.clone() as Arc<dyn Clock>, defect);
        let env = ContractEnv::new(&*clock).outage(&store);
        block_on(&clock, store_suites(&store, &env)).unwrap_or_else(|v| panic!("{defect:?}, one instance: {v}"));

        let clock = Arc::new(ManualClock::new());
        let store = BrokenStore::new(clock.clone() as Arc<dyn Clock>, defect);
        let b = store.instance();
        let all = [&store, &b];
        let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
        let v = block_on(&clock, store_suites(&store, &env)).expect_err("two instances");
        assert_eq!(v.rule, rule, "{defect:?}: {v}");
    }
}

/// A store that cuts times to live to whole seconds is caught by the rule of the
/// expiry it gets wrong even when the suite's short time to live is whole seconds
/// (the 2 s a slow store might be given): the suites also take 1.5 s.
#[test]
fn times_to_live_cut_to_whole_seconds_are_caught_whatever_the_short_ttl() {
    for short in [Duration::from_millis(300), Duration::from_secs(2)] {
        let (clock, [store, b, c]) = fleet(Some(Defect::LeaseWholeSeconds));
        let all = [&store, &b, &c];
        let env = ContractEnv::new(&*clock).short_ttl(short).outage(&store).instances(&all);
        let v = block_on(&clock, contract::lease_store(&store, &env)).expect_err("leases");
        assert_eq!(v.rule, Rule::LeaseExpires, "{short:?}: {v}");

        let (clock, [store, b, c]) = fleet(Some(Defect::ClaimWholeSeconds));
        let all = [&store, &b, &c];
        let env = ContractEnv::new(&*clock).short_ttl(short).outage(&store).instances(&all);
        let v = block_on(&clock, contract::claim_store(&store, &env)).expect_err("claims");
        assert_eq!(v.rule, Rule::ClaimPendingExpires, "{short:?}: {v}");
    }
}

/// What each store suite on its own answers for a fresh fleet of stores with
/// `defect`, so that a rule several suites check is seen checked by each.
fn each_suite_alone(defect: Defect) -> Vec<(&'static str, Result<Checked, Violation>)> {
    let mut out = Vec::new();
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("lease", block_on(&clock, contract::lease_store(&store, &env))));
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("claim", block_on(&clock, contract::claim_store(&store, &env))));
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("owners", block_on(&clock, contract::owner_claims(&store, &env))));
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("wake", block_on(&clock, contract::release_wake(&store, &env))));
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("fence", block_on(&clock, contract::fence_marks(&store, &env))));
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("stamps", block_on(&clock, contract::drain_stamps(&store, &env))));
    let (clock, [store, b, c]) = fleet(Some(defect));
    let all = [&store, &b, &c];
    let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
    out.push(("writes", block_on(&clock, contract::fenced_writes(&store, &env))));
    out
}

/// Instances whose clocks disagree must agree on expiry: a store that judges it on
/// each instance's clock fails every suite that races acquires or claims through
/// several instances, each on its own; through one instance nothing shows it.
#[test]
fn expiry_on_each_instance_s_clock_fails_the_suites_that_race_through_instances() {
    for (suite, r) in each_suite_alone(Defect::ExpiryOnCallerClock) {
        match suite {
            "lease" | "claim" | "wake" | "stamps" => {
                assert_eq!(r.expect_err(suite).rule, Rule::StoreOneClock, "{suite}");
            }
            _ => assert!(r.is_ok(), "{suite}: {r:?}"),
        }
    }
    let (clock, [store, _, _]) = fleet(Some(Defect::ExpiryOnCallerClock));
    let env = ContractEnv::new(&*clock).outage(&store);
    let checked = block_on(&clock, store_suites(&store, &env)).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(checked.skipped.iter().filter(|(r, _)| *r == Rule::StoreOneClock).count(), 4, "{:?}", checked.skipped);
}

/// A store without a timeout of its own would hang each suite's error rules; each
/// suite ends the wait at its deadline (virtual time here) and names the rule.
#[test]
fn every_store_suite_bounds_the_calls_it_makes_during_an_outage() {
    for (suite, r) in each_suite_alone(Defect::HangsInOutage) {
        let v = r.expect_err(suite);
        assert_eq!(v.rule, Rule::StoreTimeout, "{suite}: {v}");
        assert!(v.detail.contains("had not returned after 5s"), "{suite}: {v}");
    }
}

/// Virtual time each store suite takes on a fresh fleet with `defect` (or none),
/// summed over the seven, and whether every one failed with `store.timeout`.
fn six_suites_time(defect: Option<Defect>) -> (Duration, bool) {
    let mut total = Duration::ZERO;
    let mut all_timed_out = true;
    for suite in 0..7 {
        let (clock, [store, b, c]) = fleet(defect);
        let all = [&store, &b, &c];
        let env = ContractEnv::new(&*clock).outage(&store).instances(&all);
        let start = clock.now();
        let r = block_on(&clock, async {
            match suite {
                0 => contract::lease_store(&store, &env).await,
                1 => contract::claim_store(&store, &env).await,
                2 => contract::owner_claims(&store, &env).await,
                3 => contract::release_wake(&store, &env).await,
                4 => contract::fence_marks(&store, &env).await,
                5 => contract::drain_stamps(&store, &env).await,
                _ => contract::fenced_writes(&store, &env).await,
            }
        });
        total += clock.now().saturating_since(start);
        all_timed_out &= matches!(r, Err(v) if v.rule == Rule::StoreTimeout);
    }
    (total, all_timed_out)
}

/// A store whose calls never return fails all seven store suites within a minute
/// together, at their default deadline; one that hangs only in an outage spends at
/// most one deadline per suite more than a sound store.
#[test]
fn a_store_whose_calls_never_return_fails_every_store_suite_within_a_minute() {
    let (took, failed) = six_suites_time(Some(Defect::NeverAnswers));
    assert!(failed, "every suite names store.timeout");
    assert!(took < Duration::from_secs(60), "{took:?}");
    let (sound, _) = six_suites_time(None);
    let (hanging, failed) = six_suites_time(Some(Defect::HangsInOutage));
    assert!(failed, "every suite names store.timeout");
    let over = hanging.saturating_sub(sound);
    assert!(over <= Duration::from_secs(7 * 5), "{over:?} beyond a sound store's {sound:?}");
}

/// A timed-out call reported as never sent that ran once the store thawed is caught
/// by the lease suite (an acquire) and the claim suite (a claim), each on its own.
#[test]
fn a_timed_out_call_reported_never_sent_fails_the_lease_and_claim_suites() {
    for (suite, r) in each_suite_alone(Defect::TimeoutReportedUnsent) {
        match suite {
            "lease" | "claim" => assert_eq!(r.expect_err(suite).rule, Rule::StoreNeverSent, "{suite}"),
            _ => assert!(r.is_ok(), "{suite}: {r:?}"),
        }
    }
}

#[test]
fn every_store_rule_has_a_broken_store_that_breaks_it() {
    let broken: BTreeSet<Rule> = Defect::ALL.iter().map(|d| d.rule()).collect();
    let missing: Vec<&str> = store_rules().difference(&broken).map(|r| r.id()).collect();
    assert!(missing.is_empty(), "rules no defect breaks: {missing:?}");
}

#[test]
fn the_issue_s_seven_defects_are_among_them() {
    // A non-atomic acquire, renew and release reviving our own expired lease, a fence
    // that expires with the lease, Busy without a remaining time, a release that
    // ignores the token, a fence that does not move.
    for d in [
        Defect::NonAtomicAcquire,
        Defect::RenewRevivesExpired,
        Defect::ReleaseExpiredReleased,
        Defect::FenceExpiresWithLease,
        Defect::HeldWithoutRemaining,
        Defect::ReleaseIgnoresToken,
        Defect::FenceDoesNotMove,
        Defect::NonAtomicClaim,
    ] {
        assert!(Defect::ALL.contains(&d), "{d:?}");
    }
}

#[test]
fn the_sql_store_issue_s_defects_are_among_them() {
    // A user's own SQL store passed every suite while six of its broken variants did
    // too and one hung the error rules: each is now a broken store, caught by its rule.
    for (d, rule) in [
        (Defect::OneConnectionAcquire, Rule::LeaseAcquireExclusive),
        (Defect::SettleExpiredOwn, Rule::ClaimSettleExpired),
        (Defect::RenewFromOldExpiry, Rule::LeaseRenewFromNow),
        (Defect::OwnersWholeSeconds, Rule::OwnersHeld),
        (Defect::LeaseWholeSeconds, Rule::LeaseExpires),
        (Defect::ClaimWholeSeconds, Rule::ClaimPendingExpires),
        (Defect::ExpiryOnCallerClock, Rule::StoreOneClock),
        (Defect::HangsInOutage, Rule::StoreTimeout),
    ] {
        assert!(Defect::ALL.contains(&d), "{d:?}");
        assert_eq!(d.rule(), rule, "{d:?}");
    }
}

#[test]
fn a_violation_names_its_rule_and_where_it_is_written() {
    let v = Violation { rule: Rule::LeaseAcquireExclusive, detail: "3 of 8 won".into() };
    assert_eq!(v.to_string(), "rule `lease.acquire.exclusive` broken (drain_core::ports::LeaseStore): 3 of 8 won");
}

#[test]
fn memory_source_passes_the_source_contract() {
    let clock = Arc::new(ManualClock::new());
    let source = MemorySource::new(clock.clone() as Arc<dyn Clock>, Duration::from_secs(30));
    // The in-memory source keeps its dead letters in a list rather than a queue.
    let checked = block_on(&clock, contract::message_source(&source, &source, None, Duration::from_millis(200)))
        .unwrap_or_else(|v| panic!("{v}"));
    let seen: BTreeSet<Rule> = checked.checked.into_iter().collect();
    let source_rules = Rule::ALL.iter().copied().filter(|r| r.port() == Port::Source && *r != Rule::SourceDeadLetter);
    let missed: Vec<&str> = source_rules.filter(|r| !seen.contains(r)).map(|r| r.id()).collect();
    assert!(missed.is_empty(), "source rules the suite did not check: {missed:?}");
    assert!(!seen.contains(&Rule::SourceDeadLetter), "no dead-letter queue was given: not checked");
    assert_eq!(checked.skipped.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [Rule::SourceDeadLetter]);
    let dead = source.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0.message_id.as_ref().map(ToString::to_string).as_deref(), Some("c3"));
    assert_eq!(dead[0].1, "ContractTest");
}

#[test]
fn memory_source_redelivers_after_lock_expiry() {
    let clock = Arc::new(ManualClock::new());
    let source = MemorySource::new(clock.clone() as Arc<dyn Clock>, Duration::from_secs(30));
    source.push(drain_core::testkit::message("x"));
    let first = block_on(&clock, source.receive(10, Duration::ZERO)).unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].delivery_count, 0);
    // Within the lock: nothing to receive.
    clock.advance(Duration::from_secs(29));
    assert!(block_on(&clock, source.receive(10, Duration::ZERO)).unwrap().is_empty());
    clock.advance(Duration::from_secs(2));
    let again = block_on(&clock, source.receive(10, Duration::ZERO)).unwrap();
    assert_eq!(again.len(), 1, "redelivered after the lock expired");
    assert_eq!(again[0].delivery_count, 1);
    let late = block_on(&clock, source.complete(first[0].handle));
    assert_eq!(late.unwrap_err().kind, drain_core::ErrorKind::LockLost, "the old lock is gone");
}

/// The memory source, with a release that says it counts nothing but counts a
/// delivery (an abandon), or one the capability claims and the source refuses.
struct CountingRelease {
    inner: MemorySource,
    refuses: bool,
}

#[drain_core::async_trait]
impl MessageSource for CountingRelease {
    fn capabilities(&self) -> drain_core::ports::Capabilities {
        self.inner.capabilities()
    }
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<Delivery>, PortError> {
        self.inner.receive(max, wait).await
    }
    async fn complete(&self, h: DeliveryHandle) -> Result<(), PortError> {
        self.inner.complete(h).await
    }
    async fn abandon(&self, h: DeliveryHandle) -> Result<(), PortError> {
        self.inner.abandon(h).await
    }
    async fn release(&self, h: DeliveryHandle) -> Result<(), PortError> {
        if self.refuses {
            return Err(PortError::new(drain_core::ErrorKind::Unsupported, "no release"));
        }
        self.inner.abandon(h).await
    }
    async fn dead_letter(&self, h: DeliveryHandle, reason: &str, description: &str) -> Result<(), PortError> {
        self.inner.dead_letter(h, reason, description).await
    }
    async fn renew_lock(&self, h: DeliveryHandle) -> Result<Duration, PortError> {
        self.inner.renew_lock(h).await
    }
}

#[test]
fn a_release_that_counts_a_delivery_or_breaks_its_capability_fails_its_rule() {
    for refuses in [false, true] {
        let clock = Arc::new(ManualClock::new());
        let source = CountingRelease {
            inner: MemorySource::new(clock.clone() as Arc<dyn Clock>, Duration::from_secs(30)),
            refuses,
        };
        let r = block_on(&clock, contract::message_source(&source, &source.inner, None, Duration::from_millis(200)));
        let v = r.expect_err("the suite must reject it");
        assert_eq!(v.rule, Rule::SourceReleaseUncounted, "refuses={refuses}: {v}");
    }
}

/// docs/embedding.md's sample test runs every store suite `testkit::contract`
/// exports, so a store written from the guide is held to every port it implements.
#[test]
fn the_embedding_guide_s_sample_test_runs_every_store_suite() {
    let guide = include_str!("../../../docs/embedding.md");
    let sample = guide
        .split("async fn my_store_keeps_the_contract")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/embedding.md has the sample test");
    let exports = include_str!("../src/testkit/contract/mod.rs");
    let suites: Vec<&str> = exports
        .lines()
        .filter_map(|l| l.strip_prefix("pub use ")?.strip_suffix(';')?.rsplit("::").next())
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .filter(|name| *name != "message_source")
        .collect();
    assert_eq!(suites.len(), 7, "{suites:?}");
    let missing: Vec<&&str> =
        suites.iter().filter(|s| !sample.contains(&format!("contract::{s}(store, &env)"))).collect();
    assert!(missing.is_empty(), "docs/embedding.md's sample test does not run {missing:?}");
}

#[test]
fn the_outside_sql_store_s_newer_port_variants_are_among_them() {
    // The variants of an outside team's store for the newer ports that passed every
    // suite: each is now a broken store, caught by the rule it breaks.
    for (d, rule) in [
        (Defect::StampedPeekTwoTrips, Rule::StampsPeekAtomic),
        (Defect::StampOnExpiredOwn, Rule::StampsReleaseNotOwner),
        (Defect::WakeReleaseResetsFence, Rule::WakeReleaseFence),
        (Defect::StampedReleaseResetsFence, Rule::StampsReleaseFence),
        (Defect::MarksLapseWhenQuiet, Rule::FenceKeeps),
        (Defect::WakeBeforeRelease, Rule::WakeReleaseCommitted),
        (Defect::TimeoutReportedUnsent, Rule::StoreNeverSent),
        (Defect::StampedAcquirePeekThenUpsert, Rule::StampsAcquireExclusive),
        (Defect::WokeWithoutNotifying, Rule::WakeReleaseReports),
        (Defect::NeverAnswers, Rule::StoreTimeout),
        (Defect::StampAfterPlainAcquire, Rule::StampsReleaseUnstarted),
        (Defect::StampsLapse, Rule::StampsKeeps),
    ] {
        assert!(Defect::ALL.contains(&d), "{d:?}");
        assert_eq!(d.rule(), rule, "{d:?}");
    }
}

//! `drain doctor`: connectivity, round-trip time, config warnings, and every store
//! right and operation one subcommand needs (`--for run|owners|leases`, the ACLs
//! and grants of docs/operations.md), one line per check; non-zero exit when any
//! check fails. Every probe key it writes on Redis is deleted again, and on
//! PostgreSQL it only reads (`postgres`): a doctor run leaves nothing behind.

use std::process::ExitCode;
use std::time::Duration;

use adapter_redis::{KeySpace, RedisStore, rights};
use clap::{Args, ValueEnum};
use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimStore, LeaseName, LeaseStore, MessageId, OwnerClaims, Release, Renew, SettleAction, Settlement,
};
use drain_core::{ErrorKind, LeaseToken, PortError, Switch};

use crate::commands::owners::keys::OwnerKeys;
use crate::compose;
use crate::config::{Config, Loaded};
use crate::out::outln;

mod postgres;

/// `drain doctor` arguments.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The subcommand to check for: the rights and operations it needs on Redis.
    #[arg(long = "for", value_enum, default_value_t = Mode::Run)]
    pub(crate) mode: Mode,
}

/// What `drain doctor` checks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// `drain run`: the lease and the per-message claim, as the switches enable them.
    Run,
    /// `drain owners`: owner claims, backlogs, peeks, and the release wake-up.
    Owners,
    /// `drain leases`: read only.
    Leases,
}

pub(crate) struct Report {
    failed: usize,
}

impl Report {
    pub(crate) fn ok(&mut self, check: &str, detail: impl std::fmt::Display) {
        outln!("ok    {check:<16} {detail}");
    }

    pub(crate) fn fail(&mut self, check: &str, detail: impl std::fmt::Display) {
        self.failed += 1;
        outln!("FAIL  {check:<16} {detail}");
    }

    pub(crate) fn warn(&mut self, check: &str, detail: impl std::fmt::Display) {
        outln!("warn  {check:<16} {detail}");
    }
}

/// What a failed probe means for the operator.
fn explain(e: &PortError) -> String {
    match e.kind {
        ErrorKind::Permission => format!("the Redis user lacks a right drain needs (see docs/operations.md, ACL): {e}"),
        ErrorKind::Auth => format!("authentication failed (user/password in DRAIN_REDIS_URL): {e}"),
        _ => e.to_string(),
    }
}

/// `drain doctor`.
pub(crate) async fn main(args: &DoctorArgs, loaded: Loaded) -> ExitCode {
    let mut r = Report { failed: 0 };
    let c = &loaded.config;
    if loaded.warnings.is_empty() {
        r.ok("config", "no warnings");
    } else {
        for w in &loaded.warnings {
            r.warn("config", w);
        }
    }

    if c.redis_url.is_none() && c.postgres_url.is_none() {
        r.ok("store", "embedded in-memory store (single process; set DRAIN_STORE_URL for a fleet)");
    } else if args.mode == Mode::Run && !uses_store(c) {
        r.ok("store", "drain run sends the store nothing: single-flight and the per-message claim are off");
    } else if let Some(url) = &c.postgres_url {
        postgres::checks(&mut r, args.mode, c, url).await;
    } else {
        redis_checks(&mut r, args.mode, &loaded).await;
    }

    if args.mode == Mode::Run {
        for (name, var, url) in
            [("source", "DRAIN_SOURCE_URL", &c.source_url), ("target", "DRAIN_TARGET_URL", &c.target_url)]
        {
            match url {
                None => r.ok(name, "embedded demo queue"),
                Some(u) => amqp_check(&mut r, name, var, u, name == "source").await,
            }
        }
    }

    if r.failed == 0 {
        outln!("all checks passed");
        ExitCode::SUCCESS
    } else {
        outln!("{} check(s) failed", r.failed);
        ExitCode::FAILURE
    }
}

/// Whether `drain run` talks to the store with these switches.
pub(crate) fn uses_store(c: &Config) -> bool {
    c.singleflight.computes() || c.atomic_claim.computes()
}

/// The release wake-up is active for `drain owners`.
fn wakes(c: &Config) -> bool {
    c.claim_aware == Switch::On && c.release_wake != Switch::Off
}

/// The rights `mode` needs (docs/operations.md, one ACL per subcommand).
fn rights_for(mode: Mode) -> Vec<&'static str> {
    let mut rights: Vec<&'static str> = match mode {
        Mode::Run => rights::LEASES_AND_CLAIMS.to_vec(),
        Mode::Owners => [rights::LEASES_AND_CLAIMS, rights::OWNER_BACKLOGS].concat(),
        Mode::Leases => rights::SCAN.to_vec(),
    };
    let mut seen = std::collections::HashSet::new();
    rights.retain(|r| seen.insert(*r));
    rights
}

/// Connect (which attaches a link to the queue and, for a target, checks that the
/// queue exists), then close.
async fn amqp_check(r: &mut Report, name: &str, var: &str, url: &crate::config::Secret, source: bool) {
    let endpoint = match compose::parse_endpoint(var, url) {
        Ok(e) => e,
        Err(e) => {
            r.fail(name, e);
            return;
        }
    };
    let profile = endpoint.profile.as_str();
    let queue = endpoint.entity.clone().unwrap_or_default();
    let started = std::time::Instant::now();
    let result = if source {
        match adapter_servicebus::AmqpSource::connect(endpoint, adapter_servicebus::SourceOptions::default()).await {
            Ok(s) => s.close().await,
            Err(e) => Err(e),
        }
    } else {
        match adapter_servicebus::AmqpSubmitter::connect(endpoint, adapter_servicebus::SubmitterOptions::default())
            .await
        {
            Ok(t) => t.close().await,
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(()) => r.ok(
            name,
            format!(
                "{url} ({profile}, queue `{queue}`, attached in {:.0} ms)",
                started.elapsed().as_secs_f64() * 1000.0
            ),
        ),
        Err(e) => r.fail(name, format!("{var}: {e}")),
    }
}

async fn redis_checks(r: &mut Report, mode: Mode, loaded: &Loaded) {
    let c = &loaded.config;
    let store = match compose::connect_redis(c).await {
        Ok(s) => {
            r.ok("redis connect", s.endpoint());
            s
        }
        Err(e) => {
            r.fail("redis connect", e);
            return;
        }
    };
    let mut rtts = Vec::new();
    for _ in 0..5 {
        match store.ping().await {
            Ok(d) => rtts.push(d),
            Err(e) => {
                r.fail("redis ping", explain(&e));
                return;
            }
        }
    }
    rtts.sort();
    r.ok("redis rtt", format!("median {:.2} ms over 5 PINGs", rtts[2].as_secs_f64() * 1000.0));

    let keys = store.keys().clone();
    let probe = format!("drain-doctor.{}", c.instance_id);
    let needed = rights_for(mode);
    match store.missing_rights(&keys.lease(&LeaseName::queue(format!("{probe}.rights"))).fence, &needed).await {
        Ok(missing) if missing.is_empty() => {
            r.ok("acl rights", format!("every command `drain {}` sends is allowed", mode_name(mode)));
        }
        // Without SCRIPT LOAD the first call of each script after a connect falls back to EVAL.
        Ok(missing) if missing == ["+script|load"] => {
            r.warn("acl rights", "the Redis user may not run +script|load: scripts are cached by EVAL instead");
        }
        Ok(missing) => r.fail(
            "acl rights",
            format!(
                "the Redis user may not run {}, which `drain {}` sends: grant them (docs/operations.md, ACL)",
                missing.join(" "),
                mode_name(mode)
            ),
        ),
        Err(e) => r.fail("acl rights", explain(&e)),
    }
    let token = LeaseToken::generate(&c.instance_id, &mut rand::rng());
    match mode {
        Mode::Run => {
            if c.singleflight.computes() {
                let lease = LeaseName::queue(probe.as_str());
                let stored = keys.lease(&lease);
                let result = lease_cycle(&store, &lease, &token).await;
                forget(r, &store, &[&stored.fence]).await;
                match result {
                    Ok(fence) => {
                        r.ok("lease ops", format!("acquire (fence {fence}), renew, release on {}", stored.lease));
                        // A fresh lease's fence is the server's clock at its acquire.
                        server_clock(r, "redis", fence);
                    }
                    Err((op, e)) => r.fail("lease ops", format!("{op}: {}", explain(&e))),
                }
            }
            if c.atomic_claim.computes() {
                message_claims(r, &store, &probe, &token).await;
            }
        }
        Mode::Owners => owner_checks(r, &store, &keys, &probe, &token, c).await,
        Mode::Leases => match store.scan().await {
            Ok(found) => r.ok("scan", format!("{} key(s) under `{}:`", found.len(), c.key_prefix)),
            Err(e) => r.fail("scan", format!("`drain leases` needs SCAN: {}", explain(&e))),
        },
    }
}

pub(crate) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Run => "run",
        Mode::Owners => "owners",
        Mode::Leases => "leases",
    }
}

async fn message_claims(r: &mut Report, store: &RedisStore, probe: &str, token: &LeaseToken) {
    let ttl = Duration::from_secs(10);
    let msg = [MessageId::from("probe")];
    match store.claim_batch(probe, &msg, token, ttl).await {
        Ok(_) => {
            let settle = [Settlement { id: msg[0].clone(), action: SettleAction::Release }];
            match store.settle_batch(probe, &settle, token, ttl).await {
                Ok(_) => r.ok("message claims", "claim + settle scripts"),
                Err(e) => r.fail("message claims", format!("settle: {}", explain(&e))),
            }
        }
        Err(e) => r.fail("message claims", format!("claim: {}", explain(&e))),
    }
}

/// `drain owners`' operations on probe keys: the owner claim, the batched peek, a
/// backlog batch taken and recorded, and the release wake-up's rights.
async fn owner_checks(
    r: &mut Report,
    store: &RedisStore,
    keys: &KeySpace,
    probe: &str,
    token: &LeaseToken,
    c: &Config,
) {
    let claim = LeaseName::owner(probe);
    let stored = keys.lease(&claim);
    let result = lease_cycle(store, &claim, token).await;
    forget(r, store, &[&stored.fence]).await;
    match result {
        Ok(_) => r.ok("owner claims", format!("take, renew, release on {}", stored.lease)),
        Err((op, e)) => r.fail("owner claims", format!("{op}: {}", explain(&e))),
    }
    match store.peek_owners(&[OwnerId::from(probe)]).await {
        Ok(_) => r.ok("peeks", "GET + PTTL pipeline"),
        Err(e) => r.fail("peeks", explain(&e)),
    }
    let owner_keys = OwnerKeys::new(keys.clone());
    let (backlog, in_flight, processed) =
        (owner_keys.backlog(probe), owner_keys.in_flight(probe), owner_keys.processed(probe));
    let cycle = async {
        store.push_items(&[(backlog.clone(), vec!["probe".to_owned()])]).await.map_err(|e| ("seed", e))?;
        let batch = store.take_batch(&backlog, &in_flight, 1).await.map_err(|e| ("take", e))?;
        store.record_batch(&in_flight, &processed, &batch.items).await.map_err(|e| ("record", e))
    };
    let result = cycle.await;
    forget(r, store, &[&backlog, &in_flight, &processed]).await;
    match result {
        Ok(1) => r.ok("owner backlogs", "a batch taken into flight and recorded"),
        Ok(n) => r.fail("owner backlogs", format!("recorded {n} probe items instead of 1")),
        Err((op, e)) => r.fail("owner backlogs", format!("{op}: {}", explain(&e))),
    }
    if wakes(c) {
        // `drain owners` registers waiters and publishes releases (PROJECTION_DRAIN_RELEASE_WAKE).
        let list = keys.owner_waiters(&format!("{probe}.rights"));
        match store.missing_wake_rights(&list, &keys.wake_channel(&format!("{probe}.probe"))).await {
            Ok(missing) if missing.is_empty() => r.ok("wake rights", "waiter lists, PUBLISH and SUBSCRIBE allowed"),
            Ok(missing) => r.fail(
                "wake rights",
                format!(
                    "the Redis user may not run {} (release wake-up; `drain owners` runs without it): grant them (docs/operations.md, ACL) or set PROJECTION_DRAIN_RELEASE_WAKE=off",
                    missing.join(" ")
                ),
            ),
            Err(e) => r.fail("wake rights", explain(&e)),
        }
    }
}

/// Delete the probe's own keys; a failure is a FAIL line (it needs `+del`).
async fn forget(r: &mut Report, store: &RedisStore, keys: &[&str]) {
    if let Err(e) = store.delete_keys(keys).await {
        r.fail("cleanup", format!("could not delete the probe keys {}: {}", keys.join(" "), explain(&e)));
    }
}

/// How far the store server's clock (microseconds since the Unix epoch) is from
/// this host's: fences across a failover assume the servers' clocks agree, so a
/// server more than a second off is worth a warning (docs/reliability.md, "Fences
/// across a failover").
pub(crate) fn server_clock(r: &mut Report, store: &str, server_micros: u64) {
    let here = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let here = u64::try_from(here.as_micros()).unwrap_or(u64::MAX);
    let (off, way) =
        if server_micros >= here { (server_micros - here, "ahead of") } else { (here - server_micros, "behind") };
    let off_ms = off as f64 / 1000.0;
    let check = format!("{store} clock");
    if off > 1_000_000 {
        r.warn(
            &check,
            format!(
                "the server's clock is {off_ms:.0} ms {way} this host's: fences stay unique across a failover only while \
                 the servers' clocks agree (docs/reliability.md, Fences across a failover)"
            ),
        );
    } else {
        r.ok(&check, format!("within {off_ms:.1} ms of this host's (round trip included)"));
    }
}

async fn lease_cycle(
    store: &RedisStore,
    key: &LeaseName,
    token: &LeaseToken,
) -> Result<u64, (&'static str, PortError)> {
    let ttl = Duration::from_secs(10);
    let fence = match store.acquire(key, token, ttl).await.map_err(|e| ("acquire", e))? {
        Acquire::Acquired { fence } => fence,
        Acquire::Busy { holder, .. } => {
            return Err((
                "acquire",
                PortError::new(ErrorKind::Other, format!("the probe lease is held by {holder}; another doctor runs?")),
            ));
        }
    };
    if store.renew(key, token, ttl).await.map_err(|e| ("renew", e))? != Renew::Renewed {
        return Err(("renew", PortError::new(ErrorKind::Other, "renew of our own fresh lease reported Lost")));
    }
    if store.release(key, token).await.map_err(|e| ("release", e))? != Release::Released {
        return Err(("release", PortError::new(ErrorKind::Other, "release of our own lease reported NotOwner")));
    }
    Ok(fence)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each subcommand's rights are exactly its ACL in docs/operations.md.
    #[test]
    fn the_rights_checked_are_the_documented_acls() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
        let doc = std::fs::read_to_string(path).expect("docs/operations.md");
        for mode in [Mode::Run, Mode::Owners, Mode::Leases] {
            let user = format!("ACL SETUSER drain-{} on", mode_name(mode));
            let start = doc.find(&user).unwrap_or_else(|| panic!("{user} in docs/operations.md"));
            let block = &doc[start..];
            let block = &block[..block.find("\n\n").unwrap_or(block.len())];
            let mut documented: Vec<&str> = block.split_whitespace().filter(|w| w.starts_with('+')).collect();
            // The release wake-up's rights are checked with the wake (`missing_wake_rights`).
            documented.retain(|r| !["+lrem", "+lpop", "+publish", "+subscribe"].contains(r));
            let mut checked = rights_for(mode);
            documented.sort_unstable();
            checked.sort_unstable();
            assert_eq!(checked, documented, "{user}");
        }
    }
}

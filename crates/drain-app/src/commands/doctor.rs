//! `drain doctor`: connectivity, script load, ACL rights, round-trip time and config
//! warnings, one line per check; non-zero exit when any check fails.

use std::process::ExitCode;
use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::ports::{
    Acquire, ClaimStore, LeaseName, LeaseStore, MessageId, OwnerClaims, Release, Renew, SettleAction, Settlement,
};
use drain_core::{ErrorKind, LeaseToken, PortError};

use crate::compose;
use crate::config::Loaded;

struct Report {
    failed: usize,
}

impl Report {
    fn ok(&mut self, check: &str, detail: impl std::fmt::Display) {
        println!("ok    {check:<16} {detail}");
    }

    fn fail(&mut self, check: &str, detail: impl std::fmt::Display) {
        self.failed += 1;
        println!("FAIL  {check:<16} {detail}");
    }

    fn warn(&mut self, check: &str, detail: impl std::fmt::Display) {
        println!("warn  {check:<16} {detail}");
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
pub(crate) async fn main(loaded: Loaded) -> ExitCode {
    let mut r = Report { failed: 0 };
    let c = &loaded.config;
    if loaded.warnings.is_empty() {
        r.ok("config", "no warnings");
    } else {
        for w in &loaded.warnings {
            r.warn("config", w);
        }
    }

    if c.redis_url.is_none() {
        r.ok("store", "embedded in-memory store (single process; set DRAIN_REDIS_URL for a fleet)");
    } else {
        redis_checks(&mut r, &loaded).await;
    }

    for (name, var, url) in
        [("source", "DRAIN_SOURCE_URL", &c.source_url), ("target", "DRAIN_TARGET_URL", &c.target_url)]
    {
        match url {
            None => r.ok(name, "embedded demo queue"),
            Some(u) => amqp_check(&mut r, name, var, u, name == "source").await,
        }
    }

    if r.failed == 0 {
        println!("all checks passed");
        ExitCode::SUCCESS
    } else {
        println!("{} check(s) failed", r.failed);
        ExitCode::FAILURE
    }
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

async fn redis_checks(r: &mut Report, loaded: &Loaded) {
    let c = &loaded.config;
    let store = match compose::connect_redis(c).await {
        Ok(s) => {
            r.ok("redis connect", format!("{} (scripts loaded)", s.endpoint()));
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
    match store.missing_rights(&keys.lease(&LeaseName::queue(format!("{probe}.rights"))).fence).await {
        Ok(missing) if missing.is_empty() => r.ok("acl rights", "every command drain sends is allowed"),
        // Without SCRIPT LOAD the first call of each script after a connect falls back to EVAL.
        Ok(missing) if missing == ["+script|load"] => {
            r.warn("acl rights", "the Redis user may not run +script|load: scripts are cached by EVAL instead");
        }
        Ok(missing) => r.fail(
            "acl rights",
            format!("the Redis user may not run {}: grant them (docs/operations.md, minimal ACL)", missing.join(" ")),
        ),
        Err(e) => r.fail("acl rights", explain(&e)),
    }
    if c.claim_aware == drain_core::Switch::On && c.release_wake != drain_core::Switch::Off {
        // `drain owners` registers waiters and publishes releases (PROJECTION_DRAIN_RELEASE_WAKE).
        let list = keys.owner_waiters(&format!("{probe}.rights"));
        match store.missing_wake_rights(&list, &keys.wake_channel(&format!("{probe}.probe"))).await {
            Ok(missing) if missing.is_empty() => r.ok("wake rights", "waiter lists, PUBLISH and SUBSCRIBE allowed"),
            Ok(missing) => r.fail(
                "wake rights",
                format!(
                    "the Redis user may not run {} (release wake-up; `drain owners` runs without it): grant them (docs/operations.md, minimal ACL) or set PROJECTION_DRAIN_RELEASE_WAKE=off",
                    missing.join(" ")
                ),
            ),
            Err(e) => r.fail("wake rights", explain(&e)),
        }
    }
    let lease = LeaseName::queue(probe.as_str());
    let token = LeaseToken::generate(&c.instance_id, &mut rand::rng());
    let ttl = Duration::from_secs(10);
    match lease_cycle(&store, &lease, &token, ttl).await {
        Ok(fence) => {
            r.ok("lease ops", format!("acquire (fence {fence}), renew, release on {}", keys.lease(&lease).lease))
        }
        Err((op, e)) => r.fail("lease ops", format!("{op}: {}", explain(&e))),
    }
    match (store.peek(&lease).await, store.peek_owners(&[OwnerId::from(probe.as_str())]).await) {
        (Ok(_), Ok(_)) => r.ok("peeks", "GET + PTTL pipeline"),
        (Err(e), _) | (_, Err(e)) => r.fail("peeks", explain(&e)),
    }
    let msg = [MessageId::from("probe")];
    match store.claim_batch(&probe, &msg, &token, ttl).await {
        Ok(_) => {
            let settle = [Settlement { id: msg[0].clone(), action: SettleAction::Release }];
            match store.settle_batch(&probe, &settle, &token, ttl).await {
                Ok(_) => r.ok("message claims", "claim + settle scripts"),
                Err(e) => r.fail("message claims", format!("settle: {}", explain(&e))),
            }
        }
        Err(e) => r.fail("message claims", format!("claim: {}", explain(&e))),
    }
    match store.scan().await {
        Ok(found) => r.ok("scan", format!("{} key(s) under `{}:`", found.len(), c.key_prefix)),
        Err(e) => r.fail("scan", format!("`drain leases` needs SCAN: {}", explain(&e))),
    }
}

async fn lease_cycle(
    store: &adapter_redis::RedisStore,
    key: &LeaseName,
    token: &LeaseToken,
    ttl: Duration,
) -> Result<u64, (&'static str, PortError)> {
    let fence = match store.acquire(key, token, ttl).await.map_err(|e| ("acquire", e))? {
        Acquire::Acquired { fence } => fence,
        Acquire::Held { holder, .. } => {
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

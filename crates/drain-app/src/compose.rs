//! The composition root: which adapter serves each port, from the configuration.
//!
//! drain-core's ports, filled with adapters; drain-runtime's `Ticks`, `ClaimGate`,
//! `LazyStore` and `retrying` around them (everything with logic is library code).

use std::sync::Arc;
use std::time::Duration;

use adapter_postgres::{PostgresConfig, PostgresStore};
use adapter_redis::{KeySpace, RedisConfig, RedisStore};
use adapter_servicebus::{
    AmqpSource, AmqpSubmitter, Endpoint, SessionOptions, SessionSource, SourceOptions, SubmitterOptions,
};
use drain_core::layer::Forward;
use drain_core::memory::{MemorySource, MemoryStore};
use drain_core::ports::{ClaimStore, Clock, LeaseStore, MessageSource, Observer, OwnerClaims, StoreOffers, Submitter};
use drain_core::{Backoff, Switch};
use drain_runtime::{BeatConfig, ClaimGate, Connect, LazyStore, Ticks, retrying};

use crate::config::{Config, Secret};
use crate::demo::{self, DemoTarget};

/// Composition failed: the configuration names something that cannot be reached or built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ComposeError {
    #[error("{0}")]
    Unavailable(String),
    /// The store could not be used: `temporary` when retrying may help (it is down,
    /// not answering), not when a setting or a right is wrong.
    #[error("{message}")]
    Store { message: String, temporary: bool },
}

impl ComposeError {
    /// Whether retrying may help.
    pub(crate) fn is_temporary(&self) -> bool {
        matches!(self, ComposeError::Store { temporary: true, .. })
    }
}

/// Where leases and claims live.
pub(crate) enum Backend {
    /// In this process only (no `DRAIN_STORE_URL` or `DRAIN_REDIS_URL`).
    Embedded(Arc<MemoryStore>),
    /// Redis, standalone or Cluster, connected on first use.
    Redis(Arc<Forward<LazyStore<RedisStore>, ()>>),
    /// PostgreSQL, connected on first use.
    Postgres(Arc<Forward<LazyStore<PostgresStore>, ()>>),
    /// A store URL is set, but no enabled feature needs a store: it is never contacted.
    Unused,
}

/// Everything a tick needs, owned. A store port is `None` when nothing the
/// configuration enables uses it.
pub(crate) struct Runtime {
    pub(crate) config: Config,
    /// The Redis key layout under `DRAIN_KEY_PREFIX` (owner backlogs, probes).
    pub(crate) keys: KeySpace,
    /// The queue's ticks: their settings, the store ports they use, the source, the
    /// target, the clock and the observer.
    pub(crate) ticks: Arc<Ticks>,
    /// Admission's peeks at owner claims.
    pub(crate) owner_claims: Option<Arc<dyn OwnerClaims>>,
    pub(crate) backend: Backend,
    /// The embedded demo queue, when no source URL is set (the producer feeds it).
    pub(crate) demo_queue: Option<Arc<MemorySource>>,
    /// AMQP links to close at shutdown (returns unsettled deliveries to the queue).
    pub(crate) amqp: AmqpLinks,
    /// The claim-store outage state every tick of this process consults.
    pub(crate) gate: Arc<ClaimGate>,
}

/// The AMQP source and target, when configured, for a clean close.
#[derive(Default)]
pub(crate) struct AmqpLinks {
    source: Option<Arc<AmqpSource>>,
    sessions: Option<Arc<SessionSource>>,
    target: Option<Arc<AmqpSubmitter>>,
}

impl AmqpLinks {
    /// Detach and close; errors are logged (the broker ends the session anyway).
    pub(crate) async fn close(&self) {
        if let Some(s) = &self.source
            && let Err(e) = s.close().await
        {
            tracing::warn!("closing the source link: {e}");
        }
        if let Some(s) = &self.sessions
            && let Err(e) = s.close().await
        {
            tracing::warn!("closing the session receivers: {e}");
        }
        if let Some(t) = &self.target
            && let Err(e) = t.close().await
        {
            tracing::warn!("closing the target link: {e}");
        }
    }
}

impl Runtime {
    /// The beat's settings from `DRAIN_BEAT_INTERVAL_SECONDS`,
    /// `DRAIN_WORKER_CONCURRENCY` and `DRAIN_SHUTDOWN_GRACE_SECONDS`.
    pub(crate) fn beat_config(&self, resident: bool) -> BeatConfig {
        let c = &self.config;
        {
            let mut m = BeatConfig::default();
            m.interval = c.beat_interval;
            // Overlapping ticks would split a session's messages between them.
            m.workers = if c.source_sessions.is_some() { 1 } else { c.worker_concurrency };
            m.grace = c.shutdown_grace;
            m.resident = resident;
            m
        }
    }

    /// A human name for the store in logs.
    pub(crate) fn store_name(&self) -> String {
        match &self.backend {
            Backend::Embedded(_) => "embedded in-memory store (single process)".to_owned(),
            Backend::Redis(r) => format!("redis at {}", r.inner().shown()),
            Backend::Postgres(p) => format!("postgres at {}", p.inner().shown()),
            Backend::Unused => {
                "none (single-flight and the atomic claim are off; the store is not contacted)".to_owned()
            }
        }
    }
}

/// Connect to `DRAIN_REDIS_URL` (cluster when `DRAIN_REDIS_CLUSTER=on`).
pub(crate) async fn connect_redis(config: &Config) -> Result<RedisStore, ComposeError> {
    let Some(url) = &config.redis_url else {
        return Err(ComposeError::Unavailable("DRAIN_REDIS_URL is not set".to_owned()));
    };
    RedisStore::connect(redis_config(config, url)).await.map_err(|e| ComposeError::Store {
        message: format!("cannot use Redis at {url}: {e} (check DRAIN_REDIS_URL and that Redis runs)"),
        temporary: e.is_temporary(),
    })
}

/// The adapter's configuration from `DRAIN_REDIS_URL`, `DRAIN_REDIS_CLUSTER`,
/// `DRAIN_KEY_PREFIX` and `DRAIN_REDIS_CA_FILE`.
fn redis_config(config: &Config, url: &Secret) -> RedisConfig {
    let redis = RedisConfig::new(url.expose()).cluster(config.redis_cluster).key_prefix(config.key_prefix.clone());
    match &config.redis_ca_file {
        Some(ca) => redis.tls_ca_file(ca),
        None => redis,
    }
}

/// The adapter's configuration from the PostgreSQL `DRAIN_STORE_URL` and
/// `DRAIN_KEY_PREFIX` (schema `drain`, created on first use when the role may).
pub(crate) fn postgres_config(config: &Config, url: &Secret) -> PostgresConfig {
    PostgresConfig::new(url.expose()).key_prefix(config.key_prefix.clone())
}

/// Parse an AMQP URL or Service Bus connection string, logging its warnings.
pub(crate) fn parse_endpoint(name: &str, url: &Secret) -> Result<Endpoint, ComposeError> {
    let parsed = Endpoint::parse(url.expose()).map_err(|e| ComposeError::Unavailable(format!("{name}={url}: {e}")))?;
    for w in &parsed.warnings {
        tracing::warn!("{name}: {w}");
    }
    Ok(parsed.endpoint)
}

/// Credit kept open on the receiver: the in-flight window's maximum (a batch with a
/// fixed window), so the next batch is on its way while one is submitted, as a
/// shovel's prefetch keeps it; it never strands more than that between ticks (and
/// with the single-flight lease on, none at all: the beat parks the source, see
/// drain-runtime's `Beat`).
fn prefetch(config: &Config) -> u32 {
    u32::try_from(config.drain_batch.max(config.drain_max_in_flight)).unwrap_or(u32::MAX).max(1)
}

/// The waits between two connection attempts at start: 1 s doubling to 30 s (a
/// broker that is down when `drain` starts is retried; see `drain_runtime::retrying`).
const RETRY: Backoff = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(30) };

/// [`compose`], given up when SIGINT or SIGTERM arrives first (a broker that is
/// down at start is retried until then): `Ok(None)`.
pub(crate) async fn compose_until_signal(
    config: Config,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn Observer>,
    owner_drains: bool,
) -> Result<Option<Runtime>, ComposeError> {
    let mut signals = crate::commands::run::Signals::new();
    tokio::select! {
        rt = compose(config, clock, observer, owner_drains) => rt.map(Some),
        () = signals.next() => {
            tracing::info!("signal received while starting: exiting");
            Ok(None)
        }
    }
}

/// Whether the switches let the release wake-up act: claim-aware On and release
/// wake not Off.
pub(crate) fn switches_allow_wake(config: &Config) -> bool {
    config.claim_aware == Switch::On && config.release_wake != Switch::Off
}

/// What a connected-on-first-use store offers owner drains: the drain stamps unless
/// the skip-served switch is Off (then the turns and peeks are those before the
/// stamps), the release wake-up where the switches allow it and the store's user
/// surely has its rights (`wake_rights`: PostgreSQL's `grant_sql` grants them with the
/// rest; on Redis only `drain owners` probes them, on its connected store).
fn offers(config: &Config, wake_rights: bool) -> StoreOffers {
    StoreOffers {
        release_wake: wake_rights && switches_allow_wake(config),
        drain_stamps: config.skip_served != Switch::Off,
    }
}

/// Build the runtime from the configuration. `owner_drains` says whether owner
/// drains will run (they peek and take claims in the store).
pub(crate) async fn compose(
    config: Config,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn Observer>,
    owner_drains: bool,
) -> Result<Runtime, ComposeError> {
    let keys = KeySpace::new(config.key_prefix.clone());
    let uses_leases = config.singleflight.computes() || owner_drains;
    let uses_claims = config.atomic_claim.computes();
    let uses_peeks = owner_drains && config.claim_aware.computes();

    // Each port the configuration uses, from one store; none that it does not use.
    let stores = |leases: Arc<dyn LeaseStore>, claims: Arc<dyn ClaimStore>, peeks: Arc<dyn OwnerClaims>| {
        (uses_leases.then_some(leases), uses_claims.then_some(claims), uses_peeks.then_some(peeks))
    };
    let used = uses_leases || uses_claims || uses_peeks;
    let ((leases, claims, owner_claims), backend) = match (&config.redis_url, &config.postgres_url) {
        (None, None) => {
            let store = Arc::new(MemoryStore::new(clock.clone()));
            (stores(store.clone(), store.clone(), store.clone()), Backend::Embedded(store))
        }
        // Nothing enabled uses a store: Off never touches it, and no port is filled.
        _ if !used => ((None, None, None), Backend::Unused),
        (Some(url), _) => {
            let (redis, seen) = (redis_config(&config, url), observer.clone());
            let connect: Connect<RedisStore> = Arc::new(move || {
                let (redis, seen) = (redis.clone(), seen.clone());
                Box::pin(async move { Ok(RedisStore::connect(redis).await?.with_observer(seen)) })
            });
            let offers = offers(&config, false);
            let store = Arc::new(LazyStore::new("Redis", url.to_string(), connect).offering(offers).layer());
            // Connect now so the first tick does not pay for it; a failure is not fatal.
            let _ = store.inner().store().await;
            (stores(store.clone(), store.clone(), store.clone()), Backend::Redis(store))
        }
        (None, Some(url)) => {
            let (pg, seen) = (postgres_config(&config, url), observer.clone());
            let connect: Connect<PostgresStore> = Arc::new(move || {
                let (pg, seen) = (pg.clone(), seen.clone());
                Box::pin(async move { Ok(PostgresStore::connect(pg).await?.with_observer(seen)) })
            });
            let offers = offers(&config, true);
            let store = Arc::new(LazyStore::new("PostgreSQL", url.to_string(), connect).offering(offers).layer());
            let _ = store.inner().store().await;
            (stores(store.clone(), store.clone(), store.clone()), Backend::Postgres(store))
        }
    };

    let mut amqp = AmqpLinks::default();
    let (queue, source, demo_queue): (String, Arc<dyn MessageSource>, Option<Arc<MemorySource>>) =
        match &config.source_url {
            None => {
                let q = Arc::new(MemorySource::new(clock.clone(), Duration::from_secs(60)));
                (demo::DEMO_QUEUE.to_owned(), q.clone(), Some(q))
            }
            Some(url) => {
                let endpoint = parse_endpoint("DRAIN_SOURCE_URL", url)?;
                let queue = endpoint.entity.clone().ok_or_else(|| {
                    ComposeError::Unavailable(format!("DRAIN_SOURCE_URL={url} names no queue (path or EntityPath)"))
                })?;
                let options = SourceOptions {
                    prefetch: prefetch(&config),
                    max_lock_renewal: config.max_lock_renewal,
                    drop_dead_letter_properties: config.drop_dead_letter_properties,
                    ..SourceOptions::default()
                };
                let what = format!("receive from DRAIN_SOURCE_URL={url}");
                let source: Arc<dyn MessageSource> = match &config.source_sessions {
                    None => {
                        let source = Arc::new(
                            retrying(&what, RETRY, || AmqpSource::connect(endpoint.clone(), options.clone()))
                                .await
                                .map_err(|e| ComposeError::Unavailable(format!("cannot {what}: {e}")))?,
                        );
                        amqp.source = Some(source.clone());
                        source
                    }
                    Some(sessions) => {
                        let options = SessionOptions {
                            sessions: sessions.clone(),
                            max_sessions: config.max_sessions,
                            idle_timeout: config.session_idle,
                            source: options,
                        };
                        let source = Arc::new(
                            retrying(&what, RETRY, || SessionSource::connect(endpoint.clone(), options.clone()))
                                .await
                                .map_err(|e| ComposeError::Unavailable(format!("cannot {what}: {e}")))?,
                        );
                        amqp.sessions = Some(source.clone());
                        source
                    }
                };
                (queue, source, None)
            }
        };
    let target: Arc<dyn Submitter> = match &config.target_url {
        None => Arc::new(DemoTarget::new(clock.clone(), Duration::from_millis(100))),
        Some(url) => {
            let endpoint = parse_endpoint("DRAIN_TARGET_URL", url)?;
            let options = SubmitterOptions {
                fence_property: config.target_fence_property.clone(),
                ..SubmitterOptions::default()
            };
            let what = format!("send to DRAIN_TARGET_URL={url}");
            let submitter = Arc::new(
                retrying(&what, RETRY, || AmqpSubmitter::connect(endpoint.clone(), options.clone()))
                    .await
                    .map_err(|e| ComposeError::Unavailable(format!("cannot {what}: {e}")))?,
            );
            amqp.target = Some(submitter.clone());
            submitter
        }
    };

    let tick = config.tick_config(&queue);
    let instance = config.instance_id.clone();
    let ticks = Arc::new(Ticks { tick, instance, leases, claims, source, target, clock, observer });
    let gate = Arc::new(ClaimGate::new(ticks.clone()));
    let rt = Runtime { config, keys, ticks, owner_claims, backend, demo_queue, amqp, gate };
    let missing = rt.ticks.ports().missing(&rt.ticks.tick);
    if !missing.is_empty() {
        return Err(ComposeError::Unavailable(format!("no {} for the configured switches", missing.join(" and no "))));
    }
    Ok(rt)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drain_core::memory::ManualClock;
    use drain_core::ports::NoopObserver;

    use super::*;

    /// Which store ports a configuration is composed with: (leases, claims, owner peeks).
    async fn ports_of(pairs: &[(&str, &str)], owner_drains: bool) -> (bool, bool, bool, &'static str) {
        let env: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let config = crate::config::resolve(&env, None, "host-1").expect("valid config").config;
        let rt = compose(config, Arc::new(ManualClock::new()), Arc::new(NoopObserver), owner_drains)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let backend = match rt.backend {
            Backend::Embedded(_) => "embedded",
            Backend::Redis(_) => "redis",
            Backend::Postgres(_) => "postgres",
            Backend::Unused => "unused",
        };
        (rt.ticks.leases.is_some(), rt.ticks.claims.is_some(), rt.owner_claims.is_some(), backend)
    }

    #[tokio::test]
    async fn only_the_ports_the_switches_use_are_composed() {
        // 127.0.0.1:1 refuses at once: a store that is composed connects lazily and
        // fails open or closed; one that is not composed is never asked.
        let redis = ("DRAIN_REDIS_URL", "redis://127.0.0.1:1");
        let off = [("SERVICEBUS_DRAIN_SINGLEFLIGHT", "off"), ("SERVICEBUS_ATOMIC_CLAIM", "off")];
        assert_eq!(ports_of(&[redis, off[0], off[1]], false).await, (false, false, false, "unused"));
        assert_eq!(ports_of(&[redis, off[0]], false).await, (false, true, false, "redis"), "the claim alone");
        let on = ("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on");
        assert_eq!(ports_of(&[redis, on, off[1]], false).await, (true, false, false, "redis"), "the lease alone");
        assert_eq!(ports_of(&[redis, off[0], off[1]], true).await, (true, false, true, "redis"), "owner drains");
        let blind = ("PROJECTION_DRAIN_CLAIM_AWARE", "off");
        assert_eq!(ports_of(&[redis, off[0], off[1], blind], true).await, (true, false, false, "redis"), "no peeks");
        assert_eq!(ports_of(&[off[0]], false).await, (false, true, false, "embedded"), "in memory: the same rule");
    }
}

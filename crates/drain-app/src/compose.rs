//! The composition root: which adapter serves each port, from the configuration.
//!
//! This is the file an embedder copies: drain-core's ports, filled with adapters.

use std::sync::Arc;
use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use drain_core::KeySpace;
use drain_core::ports::{ClaimStore, Clock, LeaseStore, MessageSource, Observer, Submitter};
use drain_core::testkit::{MemorySource, MemoryStore};
use drain_core::tick::{TickConfig, TickPorts};

use crate::config::{Config, Secret};
use crate::demo::{self, DemoTarget};
use crate::gate::ClaimGate;
use crate::lazy_redis::LazyRedis;

/// Composition failed: the configuration names something that cannot be reached or built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ComposeError {
    #[error("{0}")]
    Unavailable(String),
}

/// Where leases and claims live.
pub(crate) enum Backend {
    /// In this process only (no `DRAIN_REDIS_URL`).
    Embedded,
    /// Redis, standalone or Cluster, connected on first use.
    Redis(Arc<LazyRedis>),
    /// `DRAIN_REDIS_URL` is set, but no enabled feature needs Redis: it is never contacted.
    Unused,
}

/// Everything a tick needs, owned.
pub(crate) struct Runtime {
    pub(crate) config: Config,
    pub(crate) keys: KeySpace,
    pub(crate) tick: TickConfig,
    pub(crate) leases: Arc<dyn LeaseStore>,
    pub(crate) claims: Arc<dyn ClaimStore>,
    pub(crate) backend: Backend,
    pub(crate) source: Arc<dyn MessageSource>,
    pub(crate) target: Arc<dyn Submitter>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) observer: Arc<dyn Observer>,
    /// The embedded demo queue, when no source URL is set (the producer feeds it).
    pub(crate) demo_queue: Option<Arc<MemorySource>>,
    /// AMQP links to close at shutdown (returns unsettled deliveries to the queue).
    pub(crate) amqp: AmqpLinks,
    /// The claim-store outage state every tick of this process consults.
    pub(crate) claim_gate: ClaimGate,
}

/// The AMQP source and target, when configured, for a clean close.
#[derive(Default)]
pub(crate) struct AmqpLinks {
    source: Option<Arc<AmqpSource>>,
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
        if let Some(t) = &self.target
            && let Err(e) = t.close().await
        {
            tracing::warn!("closing the target link: {e}");
        }
    }
}

impl Runtime {
    /// Borrow the ports for one tick.
    pub(crate) fn ports(&self) -> TickPorts<'_> {
        TickPorts {
            leases: &*self.leases,
            claims: &*self.claims,
            source: &*self.source,
            target: &*self.target,
            clock: &*self.clock,
            observer: &*self.observer,
        }
    }

    /// A human name for the store in logs.
    pub(crate) fn store_name(&self) -> String {
        match &self.backend {
            Backend::Embedded => "embedded in-memory store (single process)".to_owned(),
            Backend::Redis(r) => format!("redis at {}", r.shown()),
            Backend::Unused => "none (single-flight and the atomic claim are off; Redis is not contacted)".to_owned(),
        }
    }
}

/// Connect to `DRAIN_REDIS_URL` (cluster when `DRAIN_REDIS_CLUSTER=on`).
pub(crate) async fn connect_redis(config: &Config) -> Result<RedisStore, ComposeError> {
    let Some(url) = &config.redis_url else {
        return Err(ComposeError::Unavailable("DRAIN_REDIS_URL is not set".to_owned()));
    };
    RedisStore::connect(redis_config(config, url)).await.map_err(|e| {
        ComposeError::Unavailable(format!("cannot use Redis at {url}: {e} (check DRAIN_REDIS_URL and that Redis runs)"))
    })
}

/// The adapter's configuration from `DRAIN_REDIS_URL`, `DRAIN_REDIS_CLUSTER` and
/// `DRAIN_REDIS_CA_FILE`.
fn redis_config(config: &Config, url: &Secret) -> RedisConfig {
    let redis = RedisConfig::new(url.expose()).cluster(config.redis_cluster);
    match &config.redis_ca_file {
        Some(ca) => redis.tls_ca_file(ca),
        None => redis,
    }
}

/// Parse an AMQP URL or Service Bus connection string, logging its warnings.
pub(crate) fn parse_endpoint(name: &str, url: &Secret) -> Result<Endpoint, ComposeError> {
    let parsed = Endpoint::parse(url.expose()).map_err(|e| ComposeError::Unavailable(format!("{name}={url}: {e}")))?;
    for w in &parsed.warnings {
        tracing::warn!("{name}: {w}");
    }
    Ok(parsed.endpoint)
}

/// Credit kept open on the receiver: one batch, so a tick's receive never waits on
/// credit and never strands more than a batch.
fn prefetch(config: &Config) -> u32 {
    u32::try_from(config.drain_batch).unwrap_or(u32::MAX).max(1)
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
    let needs_redis = config.singleflight.computes() || config.atomic_claim.computes() || owner_drains;

    let (leases, claims, backend): (Arc<dyn LeaseStore>, Arc<dyn ClaimStore>, Backend) = match &config.redis_url {
        None => {
            let store = Arc::new(MemoryStore::new(clock.clone()));
            (store.clone(), store, Backend::Embedded)
        }
        Some(url) if needs_redis => {
            let store = Arc::new(LazyRedis::new(redis_config(&config, url), url.to_string(), observer.clone()));
            // Connect now so the first tick does not pay for it; a failure is not fatal.
            let _ = store.store().await;
            (store.clone(), store.clone(), Backend::Redis(store))
        }
        Some(_) => {
            // Nothing enabled uses the store (SPEC: Off never touches Redis). An in-memory
            // store stands in so the ports are filled; it is never asked anything.
            let store = Arc::new(MemoryStore::new(clock.clone()));
            (store.clone(), store, Backend::Unused)
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
                    ..SourceOptions::default()
                };
                let source = Arc::new(AmqpSource::connect(endpoint, options).await.map_err(|e| {
                    ComposeError::Unavailable(format!("cannot receive from DRAIN_SOURCE_URL={url}: {e}"))
                })?);
                amqp.source = Some(source.clone());
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
            let submitter = Arc::new(
                AmqpSubmitter::connect(endpoint, options)
                    .await
                    .map_err(|e| ComposeError::Unavailable(format!("cannot send to DRAIN_TARGET_URL={url}: {e}")))?,
            );
            amqp.target = Some(submitter.clone());
            submitter
        }
    };

    let tick = config.tick_config(&queue);
    Ok(Runtime {
        config,
        keys,
        tick,
        leases,
        claims,
        backend,
        source,
        target,
        clock,
        observer,
        demo_queue,
        amqp,
        claim_gate: ClaimGate::new(),
    })
}

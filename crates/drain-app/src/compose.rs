//! The composition root: which adapter serves each port, from the configuration.
//!
//! This is the file an embedder copies: drain-core's ports, filled with adapters.

use std::sync::Arc;
use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use adapter_servicebus::{AmqpSource, AmqpSubmitter, Endpoint, SourceOptions, SubmitterOptions};
use drain_core::ports::{ClaimStore, Clock, LeaseStore, MessageSource, Observer, Submitter};
use drain_core::testkit::{MemorySource, MemoryStore};
use drain_core::tick::{TickConfig, TickPorts};
use drain_core::{KeySpace, PortError};

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

/// The first wait between two connection attempts at start, and the longest.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_CAP: Duration = Duration::from_secs(30);

/// Connect with `connect` until it succeeds or fails permanently. A broker that is
/// down (refused, timed out, not serving yet) when `drain` starts is temporary:
/// each failed attempt is logged and retried after a jittered back-off (1 s doubling
/// to 30 s). A permanent error (authentication, a missing queue, a port that does
/// not speak AMQP, a TLS mismatch) is returned at once: it needs someone to act.
async fn retrying<T, F, Fut>(what: &str, mut connect: F) -> Result<T, PortError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, PortError>>,
{
    let mut step = RETRY_FIRST;
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        match connect().await {
            Ok(v) => {
                if attempt > 1 {
                    tracing::info!("connected to {what} after {attempt} attempts");
                }
                return Ok(v);
            }
            Err(e) if e.is_temporary() => {
                use rand::RngExt;
                let wait = step.mul_f64(rand::rng().random_range(0.5..=1.0));
                tracing::warn!(
                    attempt,
                    retry_in_s = wait.as_secs_f64(),
                    "cannot {what} yet ({e}); attempt {attempt} failed, retrying in {:.1} s",
                    wait.as_secs_f64()
                );
                tokio::time::sleep(wait).await;
                step = (step * 2).min(RETRY_CAP);
            }
            Err(e) => return Err(e),
        }
    }
}

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
                let what = format!("receive from DRAIN_SOURCE_URL={url}");
                let source = Arc::new(
                    retrying(&what, || AmqpSource::connect(endpoint.clone(), options.clone()))
                        .await
                        .map_err(|e| ComposeError::Unavailable(format!("cannot {what}: {e}")))?,
                );
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
            let what = format!("send to DRAIN_TARGET_URL={url}");
            let submitter = Arc::new(
                retrying(&what, || AmqpSubmitter::connect(endpoint.clone(), options.clone()))
                    .await
                    .map_err(|e| ComposeError::Unavailable(format!("cannot {what}: {e}")))?,
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

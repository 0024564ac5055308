//! The composition root: which adapter serves each port, from the configuration.
//!
//! This is the file an embedder copies: drain-core's ports, filled with adapters.

use std::sync::Arc;
use std::time::Duration;

use adapter_redis::{RedisConfig, RedisStore};
use drain_core::KeySpace;
use drain_core::ports::{ClaimStore, Clock, LeaseStore, MessageSource, Observer, Submitter};
use drain_core::testkit::{MemorySource, MemoryStore};
use drain_core::tick::{TickConfig, TickPorts};

use crate::config::Config;
use crate::demo::{self, DemoTarget};
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
    let redis = RedisConfig::new(url.expose()).cluster(config.redis_cluster);
    RedisStore::connect(redis).await.map_err(|e| {
        ComposeError::Unavailable(format!("cannot use Redis at {url}: {e} (check DRAIN_REDIS_URL and that Redis runs)"))
    })
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
            let redis = RedisConfig::new(url.expose()).cluster(config.redis_cluster);
            let store = Arc::new(LazyRedis::new(redis, url.to_string(), observer.clone()));
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

    let (queue, source, demo_queue): (String, Arc<dyn MessageSource>, Option<Arc<MemorySource>>) = match &config
        .source_url
    {
        None => {
            let q = Arc::new(MemorySource::new(clock.clone(), Duration::from_secs(60)));
            (demo::DEMO_QUEUE.to_owned(), q.clone(), Some(q))
        }
        Some(url) => {
            return Err(ComposeError::Unavailable(format!(
                "DRAIN_SOURCE_URL={url} is set, but the AMQP 1.0 adapter is not built yet; unset it to drain the embedded demo queue"
            )));
        }
    };
    let target: Arc<dyn Submitter> = match &config.target_url {
        None => Arc::new(DemoTarget::new(clock.clone(), Duration::from_millis(100))),
        Some(url) => {
            return Err(ComposeError::Unavailable(format!(
                "DRAIN_TARGET_URL={url} is set, but the AMQP 1.0 adapter is not built yet; unset it to use the embedded target"
            )));
        }
    };

    let tick = config.tick_config(&queue);
    Ok(Runtime { config, keys, tick, leases, claims, backend, source, target, clock, observer, demo_queue })
}

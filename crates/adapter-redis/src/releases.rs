//! The release subscriber: a dedicated pub/sub connection on this instance's wake
//! channel, yielding the owners whose release woke this instance as a [`Stream`].
//!
//! It fails open: a lost connection is reconnected in the background (jittered
//! back-off from 100 ms to 5 s) and counted, a half-open one is found by a `PING` every 15 s, and
//! nothing is ever yielded as an error. A wake-up lost meanwhile costs the waiter its
//! claim retry window (the 5–15 s backstop), never an item.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::{Backoff, PortError};
use futures::{Stream, StreamExt};
use redis::aio::PubSub;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::store::{Failure, RedisStore, read_ca};

/// The waits between reconnection attempts.
const PAUSES: Backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(5) };
const PING_EVERY: Duration = Duration::from_secs(15);

/// What the subscriber saw; shared with every [`Releases::counters`] handle.
#[derive(Debug, Default)]
struct Counts {
    received: AtomicU64,
    reconnects: AtomicU64,
    failed_attempts: AtomicU64,
}

/// A handle on the store's subscriber counters (every subscription of one store and
/// its clones counts into the same ones), readable after a stream was moved away.
#[derive(Debug, Clone, Default)]
pub struct ReleaseCounters(Arc<Counts>);

impl ReleaseCounters {
    /// Release notifications received.
    #[must_use]
    pub fn received(&self) -> u64 {
        self.0.received.load(Ordering::Relaxed)
    }

    /// Times the subscription was lost (connection closed, or a `PING` unanswered).
    #[must_use]
    pub fn reconnects(&self) -> u64 {
        self.0.reconnects.load(Ordering::Relaxed)
    }

    /// Connection attempts that failed while reconnecting.
    #[must_use]
    pub fn failed_attempts(&self) -> u64 {
        self.0.failed_attempts.load(Ordering::Relaxed)
    }
}

/// The owners whose claim release woke this instance, in arrival order. Never ends
/// while it lives; dropping it stops the subscriber.
#[derive(Debug)]
pub struct Releases {
    rx: mpsc::UnboundedReceiver<OwnerId>,
    counters: ReleaseCounters,
    task: JoinHandle<()>,
}

impl Releases {
    /// The subscriber's counters.
    #[must_use]
    pub fn counters(&self) -> ReleaseCounters {
        self.counters.clone()
    }
}

impl Stream for Releases {
    type Item = OwnerId;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<OwnerId>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RedisStore {
    /// Subscribe to `channel` (this instance's
    /// [`KeySpace::wake_channel`](crate::KeySpace::wake_channel)) on a dedicated
    /// connection to the first URL (any node of a Cluster: `PUBLISH` reaches all), and
    /// yield the owner named by each message. Returns once subscribed, so a waiter
    /// registered afterwards is heard; reconnects by itself afterwards.
    ///
    /// # Errors
    /// The mapped error of the first connection or `SUBSCRIBE` (e.g. `NOPERM`: the
    /// ACL lacks `&<prefix>:wake:*`).
    pub async fn subscribe_releases(&self, channel: &str) -> Result<Releases, PortError> {
        let ca = read_ca(self.config())?;
        // A standalone primary (behind sentinels too: the one they named last) is
        // where the hot path goes; a Cluster's subscriber stays on its first seed.
        let seed = match self.standalone_client() {
            Some(_) => None,
            None => Some(
                crate::conn::seed_client(self.config(), ca.as_deref())
                    .map_err(|e| self.error("subscribe", e.into()))?,
            ),
        };
        let store = self.clone();
        let current = move || match &seed {
            Some(seed) => seed.clone(),
            None => store.standalone_client().unwrap_or_else(|| unreachable!("a standalone store stays one")),
        };
        let deadline = self.config().operation_deadline();
        let first = subscribe(&current(), channel, deadline).await.map_err(|f| self.error("subscribe", f))?;
        let counters = self.release_counters();
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(listen(current, channel.to_owned(), deadline, first, tx, counters.clone()));
        Ok(Releases { rx, counters, task })
    }
}

async fn subscribe(client: &redis::Client, channel: &str, deadline: Duration) -> Result<PubSub, Failure> {
    let attempt = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    match tokio::time::timeout(deadline, attempt).await {
        Ok(r) => r.map_err(Failure::Redis),
        Err(_) => Err(Failure::Deadline),
    }
}

/// Forward messages until the receiver is dropped, resubscribing whenever the
/// connection is lost.
async fn listen(
    current: impl Fn() -> redis::Client,
    channel: String,
    deadline: Duration,
    first: PubSub,
    tx: mpsc::UnboundedSender<OwnerId>,
    counters: ReleaseCounters,
) {
    let counts = &counters.0;
    let mut pending = Some(first);
    let mut failures = 0u32;
    loop {
        let pubsub = match pending.take() {
            Some(p) => p,
            None => match subscribe(&current(), &channel, deadline).await {
                Ok(p) => {
                    failures = 0;
                    p
                }
                Err(_) => {
                    counts.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    let pause = PAUSES.delay(failures, &mut drain_core::rand::rng());
                    tokio::time::sleep(pause).await;
                    failures = failures.saturating_add(1);
                    continue;
                }
            },
        };
        let (mut sink, mut messages) = pubsub.split();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = messages.next() => match msg {
                    Some(msg) => {
                        let Ok(owner) = msg.get_payload::<String>() else { continue };
                        counts.received.fetch_add(1, Ordering::Relaxed);
                        if tx.send(OwnerId::from(owner)).is_err() {
                            return;
                        }
                    }
                    None => break,
                },
                _ = ping.tick() => {
                    if !matches!(tokio::time::timeout(deadline, sink.ping::<redis::Value>()).await, Ok(Ok(_))) {
                        break;
                    }
                }
                () = tx.closed() => return,
            }
        }
        counts.reconnects.fetch_add(1, Ordering::Relaxed);
        let pause = PAUSES.delay(failures, &mut drain_core::rand::rng());
        tokio::time::sleep(pause).await;
    }
}

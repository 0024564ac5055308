//! The release wake-up's subscriptions: LISTEN on a dedicated connection per
//! subscription, listening again after the connection broke.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use drain_core::admission::OwnerId;
use drain_core::ports::Releases;
use drain_core::{Backoff, PortError};
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::AsyncMessage;

use crate::config::PostgresConfig;
use crate::error::{map_error, timeout};

/// What the subscriptions of one store heard.
#[derive(Debug, Default)]
pub struct ReleaseCounters {
    received: AtomicU64,
    reconnects: AtomicU64,
}

impl ReleaseCounters {
    /// Wake-ups received by every subscription of this store.
    #[must_use]
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Times a subscription's connection broke and was listened on again.
    #[must_use]
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
}

/// The pauses before listening again: 50 ms after a connection that listened,
/// doubling to 2 s while attempts fail, jittered so subscribers do not return in step.
const PAUSES: Backoff = Backoff { initial: Duration::from_millis(50), max: Duration::from_secs(2) };

/// Start listening on `channel`; resolves once the first `LISTEN` is in place.
pub(crate) async fn subscribe(
    config: PostgresConfig,
    channel: String,
    counters: Arc<ReleaseCounters>,
) -> Result<Releases, PortError> {
    let (tx, mut rx) = mpsc::unbounded_channel::<OwnerId>();
    let (ready_tx, ready_rx) = oneshot::channel();
    tokio::spawn(listen(config.clone(), channel, tx, Some(ready_tx), counters));
    let endpoint = config.endpoint();
    match tokio::time::timeout(config.operation_deadline(), ready_rx).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(e),
        Ok(Err(_)) => return Err(PortError::new(drain_core::ErrorKind::Closed, "subscribe: the listener ended")),
        Err(_) => return Err(timeout("subscribe", &endpoint, config.operation_deadline())),
    }
    Ok(Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx))))
}

/// Listen until the subscriber drops its stream; after the first success, a
/// broken connection is listened on again (wake-ups meanwhile are lost: the retry
/// window covers them).
async fn listen(
    config: PostgresConfig,
    channel: String,
    tx: mpsc::UnboundedSender<OwnerId>,
    mut ready: Option<oneshot::Sender<Result<(), PortError>>>,
    counters: Arc<ReleaseCounters>,
) {
    let endpoint = config.endpoint();
    let mut failures = 0u32;
    loop {
        let outcome = listen_once(&config, &endpoint, &channel, &tx, &mut ready, &counters, &mut failures).await;
        if tx.is_closed() {
            return;
        }
        if let Err(e) = outcome
            && let Some(first) = ready.take()
        {
            let _ = first.send(Err(e));
            return;
        }
        counters.reconnects.fetch_add(1, Ordering::Relaxed);
        let pause = PAUSES.delay(failures, &mut drain_core::rand::rng());
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = tx.closed() => return,
        }
        failures = failures.saturating_add(1);
    }
}

async fn listen_once(
    config: &PostgresConfig,
    endpoint: &str,
    channel: &str,
    tx: &mpsc::UnboundedSender<OwnerId>,
    ready: &mut Option<oneshot::Sender<Result<(), PortError>>>,
    counters: &ReleaseCounters,
    failures: &mut u32,
) -> Result<(), PortError> {
    let mut pg: tokio_postgres::Config = config.url.parse().map_err(|e| map_error(&e, "subscribe", endpoint))?;
    pg.connect_timeout(config.connect_timeout);
    // The channel names the connection: a release wakes only a waiter whose wake
    // connection is alive (release_and_wake in src/schema_v5.sql).
    pg.application_name(channel);
    let (client, mut connection) = tokio::time::timeout(config.connect_timeout, pg.connect(tokio_postgres::NoTls))
        .await
        .map_err(|_| timeout("subscribe", endpoint, config.connect_timeout))?
        .map_err(|e| map_error(&e, "subscribe", endpoint))?;
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    let sql = format!("LISTEN \"{}\"", channel.replace('"', "\"\""));
    let listening = client.batch_execute(&sql);
    tokio::pin!(listening);
    let mut listened = false;
    loop {
        tokio::select! {
            r = &mut listening, if !listened => {
                r.map_err(|e| map_error(&e, "subscribe", endpoint))?;
                listened = true;
                *failures = 0;
                if let Some(first) = ready.take() {
                    let _ = first.send(Ok(()));
                }
            }
            m = messages.next() => match m {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    counters.received.fetch_add(1, Ordering::Relaxed);
                    if tx.send(OwnerId::from(n.payload())).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(map_error(&e, "subscribe", endpoint)),
                None => return Err(PortError::new(drain_core::ErrorKind::Connection, format!("subscribe: the connection to {endpoint} ended"))),
            },
            () = tx.closed() => return Ok(()),
        }
    }
}

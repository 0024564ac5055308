//! The source mode both AMQP benches measure (this crate's `servicebus.rs` and
//! `tests/benches/amqp.rs`, which includes this file): [`AmqpSource`] as shipped,
//! receiving batches and completing each delivery.

use std::time::{Duration, Instant};

use adapter_servicebus::{AmqpSource, Endpoint, SourceOptions};
use drain_core::ports::MessageSource;
use futures::stream::{self, StreamExt};

/// Drain `n` messages from `from`: `receive(batch)` with `prefetch: batch`, then
/// complete each delivery with `concurrency` in flight; the time it took.
pub(crate) async fn drain(from: Endpoint, n: usize, batch: usize, concurrency: usize) -> Duration {
    let options = SourceOptions { prefetch: u32::try_from(batch).unwrap_or(u32::MAX), ..SourceOptions::default() };
    let source = AmqpSource::connect(from, options).await.expect("source");
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        // Ask for no more than the round still needs, as the bare loop stops at `n`:
        // asking for 64 when 32 are left would time the linger wait for messages
        // that do not exist (20 ms, a sixth of a round), not the adapter's overhead.
        let deliveries = source.receive(batch.min(n - done), Duration::from_secs(5)).await.expect("receive");
        assert!(!deliveries.is_empty(), "the queue ran dry early");
        done += deliveries.len();
        let source = &source;
        stream::iter(deliveries)
            .map(|d| async move { source.complete(d.handle).await.expect("complete") })
            .buffer_unordered(concurrency)
            .collect::<Vec<()>>()
            .await;
    }
    let took = start.elapsed();
    source.close().await.expect("close");
    took
}

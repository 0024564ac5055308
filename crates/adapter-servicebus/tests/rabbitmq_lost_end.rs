//! A broker that never answers our session `end` (RabbitMQ 3.10's AMQP 1.0 plugin
//! sometimes loses that frame: its session process stops before its writer flushes
//! it) must not hold `close` for the whole operation timeout: fe2o3 waits for the
//! answer in a busy loop, so the adapter bounds that step by `SESSION_END_LIMIT`
//! (1 s) and closes the connection. A proxy in front of the real broker drops every
//! `end` the broker sends.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use adapter_servicebus::{AmqpSource, AmqpSubmitter, SourceOptions, SubmitterOptions};
use drain_core::ports::MessageSource;
use support::{TestQueue, rabbit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The close of a source or submitter whose `end` is never answered MUST return
/// well before the 10 s operation timeout; 1 s for the session plus the
/// connection's close, with room for a loaded machine.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_does_not_wait_out_the_timeout_when_the_broker_never_answers_end() {
    let r = rabbit("lost-end");
    let q = TestQueue::declare(&r, None, false).await;
    let upstream = {
        let e = r.endpoint(&q.name, None);
        format!("{}:{}", e.host, e.port).parse::<SocketAddr>().expect("broker address")
    };
    let dropped = Arc::new(AtomicUsize::new(0));
    let proxy = drop_ends(upstream, dropped.clone()).await;
    let mut endpoint = r.endpoint(&q.name, None);
    (endpoint.host, endpoint.port) = (proxy.ip().to_string(), proxy.port());

    let source = AmqpSource::connect(endpoint.clone(), SourceOptions::default()).await.expect("source via proxy");
    assert!(source.receive(1, Duration::from_millis(200)).await.expect("receive").is_empty());
    let started = Instant::now();
    source.close().await.expect("close");
    let took = started.elapsed();
    assert!(took < CLOSE_BOUND, "the source's close took {took:?} with its end unanswered");
    assert!(dropped_past(&dropped, 0).await, "the broker answered the source's end and the proxy dropped it");

    let target = AmqpSubmitter::connect(endpoint, SubmitterOptions::default()).await.expect("submitter via proxy");
    let before = dropped.load(Ordering::SeqCst);
    let started = Instant::now();
    target.close().await.expect("close");
    let took = started.elapsed();
    assert!(took < CLOSE_BOUND, "the submitter's close took {took:?} with its end unanswered");
    assert!(dropped_past(&dropped, before).await, "the submitter's end was answered and dropped");
}

/// Whether the proxy dropped more than `before` ends within `CLOSE_BOUND`: a loaded
/// broker may answer an `end` after the close that stopped waiting for it returned.
async fn dropped_past(dropped: &AtomicUsize, before: usize) -> bool {
    let until = Instant::now() + CLOSE_BOUND;
    while dropped.load(Ordering::SeqCst) <= before && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dropped.load(Ordering::SeqCst) > before
}

/// A TCP proxy to `upstream` that forwards everything except the AMQP `end`
/// performatives the broker sends (counted in `dropped`). Returns its address.
async fn drop_ends(upstream: SocketAddr, dropped: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(broker) = TcpStream::connect(upstream).await else { return };
            let (mut client_rx, client_tx) = client.into_split();
            let (broker_rx, mut broker_tx) = broker.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut client_rx, &mut broker_tx).await });
            tokio::spawn(filter_frames(broker_rx, client_tx, dropped.clone()));
        }
    });
    addr
}

/// Copy protocol headers (`AMQP` + 4 bytes) and frames (4-byte size first) from
/// `rx` to `tx`, leaving out AMQP frames whose performative is `end` (descriptor
/// 0x17).
async fn filter_frames(
    mut rx: tokio::net::tcp::OwnedReadHalf,
    mut tx: tokio::net::tcp::OwnedWriteHalf,
    dropped: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    loop {
        let mut head = [0u8; 8];
        rx.read_exact(&mut head).await?;
        if &head[..4] == b"AMQP" {
            tx.write_all(&head).await?;
            continue;
        }
        let size = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let mut rest = vec![0u8; size.saturating_sub(8)];
        rx.read_exact(&mut rest).await?;
        let body = rest.get((usize::from(head[4]) * 4).saturating_sub(8)..).unwrap_or(&[]);
        let is_end = head[5] == 0
            && (body.starts_with(&[0x00, 0x53, 0x17]) || body.starts_with(&[0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x17]));
        if is_end {
            dropped.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        tx.write_all(&head).await?;
        tx.write_all(&rest).await?;
    }
}

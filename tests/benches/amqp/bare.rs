//! The bench's bare fe2o3-amqp loops: what the broker allows through this client
//! with none of drain's machinery (no actor task, no claims, no port boundary).

use std::time::{Duration, Instant};

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Body, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use futures::stream::{FuturesUnordered, StreamExt};

/// A connection and a session to `base`, TCP_NODELAY as the adapter sets it.
async fn open(base: &str, name: &str) -> (ConnectionHandle<()>, SessionHandle<()>) {
    // `amqp://user:password@host:port`, as the test support spells it.
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    let (user_info, host_port) = rest.rsplit_once('@').unwrap_or(("guest:guest", rest));
    let (username, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "5672"));
    let host = host.to_owned();
    let port: u16 = port.parse().expect("port");
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await.expect("tcp");
    tcp.set_nodelay(true).expect("nodelay");
    let profile =
        fe2o3_amqp::sasl_profile::SaslProfile::Plain { username: username.to_owned(), password: password.to_owned() };
    let mut conn = Connection::builder()
        .container_id(format!("{name}-{}", std::process::id()))
        .hostname(host.as_str())
        .sasl_profile(profile)
        .open_with_stream(tcp)
        .await
        .expect("connect");
    let session = Session::begin(&mut conn).await.expect("session");
    (conn, session)
}

async fn receiver(session: &mut SessionHandle<()>, queue: &str) -> Receiver {
    Receiver::builder()
        .name(format!("{queue}-bare-receiver"))
        .source(format!("/amq/queue/{queue}"))
        .credit_mode(CreditMode::Manual)
        .attach(session)
        .await
        .expect("attach the receiver")
}

/// The consume loop: one receiver, credit in windows of `batch` granted when the last
/// is used up, `recv` + `accept` each message.
pub(crate) async fn consume(base: &str, queue: &str, n: usize, batch: usize) -> Duration {
    let (conn, mut session) = open(base, "bare-consume").await;
    let mut receiver = receiver(&mut session, queue).await;
    let start = Instant::now();
    for _ in 0..n {
        if receiver.credit() == 0 {
            receiver.set_credit(batch as u32).await.expect("credit");
        }
        let d = receiver.recv::<Body<Value>>().await.expect("recv");
        receiver.accept(&d).await.expect("accept");
    }
    let took = start.elapsed();
    teardown(receiver.detach(), session, conn).await;
    took
}

/// The forward loop: receive a batch of up to `batch` (credit windows as above), send
/// each message as received to `target` and await the broker's outcome, then accept
/// it at the source; up to `in_flight` sends outstanding within a batch. Source and
/// target each on their own connection, as the adapters have.
pub(crate) async fn forward(
    base: &str,
    (source, target): (&str, &str),
    n: usize,
    batch: usize,
    in_flight: usize,
) -> Duration {
    let (sconn, mut ssession) = open(base, "bare-forward-source").await;
    let (tconn, mut tsession) = open(base, "bare-forward-target").await;
    let mut receiver = receiver(&mut ssession, source).await;
    let mut sender = Sender::builder()
        .name(format!("{target}-bare-sender"))
        .target(format!("/amq/queue/{target}"))
        .sender_settle_mode(SenderSettleMode::Unsettled)
        .attach(&mut tsession)
        .await
        .expect("attach the sender");
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        let want = batch.min(n - done);
        let mut got = Vec::with_capacity(want);
        while got.len() < want {
            if receiver.credit() == 0 {
                receiver.set_credit(batch as u32).await.expect("credit");
            }
            got.push(receiver.recv::<Body<Value>>().await.expect("recv"));
        }
        done += got.len();
        let mut outstanding = FuturesUnordered::new();
        for d in got {
            if outstanding.len() == in_flight.max(1) {
                let (d, outcome) = outstanding.next().await.expect("a send in flight");
                settle(&receiver, &d, outcome).await;
            }
            let message = d.message().clone();
            let sent = sender.send_batchable(message).await.expect("send");
            outstanding.push(async move { (d, sent.await) });
        }
        while let Some((d, outcome)) = outstanding.next().await {
            settle(&receiver, &d, outcome).await;
        }
    }
    let took = start.elapsed();
    teardown(receiver.detach(), ssession, sconn).await;
    teardown(sender.detach(), tsession, tconn).await;
    took
}

async fn settle(
    receiver: &Receiver,
    d: &fe2o3_amqp::link::delivery::Delivery<Body<Value>>,
    outcome: Result<Outcome, fe2o3_amqp::link::SendError>,
) {
    assert!(matches!(outcome, Ok(Outcome::Accepted(_))), "the target refused a message: {outcome:?}");
    receiver.accept(d).await.expect("accept");
}

/// Declare a queue by attaching once to `/queue/<q>` (non-durable, as before).
pub(crate) async fn declare(base: &str, queue: &str) {
    let mut conn = Connection::builder().container_id(format!("{queue}-declare")).open(base).await.expect("connect");
    let mut session = Session::begin(&mut conn).await.expect("session");
    let sender =
        Sender::attach(&mut session, format!("{queue}-declare"), format!("/queue/{queue}")).await.expect("declare");
    teardown(sender.detach(), session, conn).await;
}

/// Detach, end the session and close the connection, each bounded: RabbitMQ 3.10
/// sometimes never answers a session `end`, and fe2o3 then waits for it forever in
/// a busy loop (the adapter bounds the same steps).
async fn teardown<F: Future>(detach: F, mut session: SessionHandle<()>, mut conn: ConnectionHandle<()>) {
    const STEP: Duration = Duration::from_secs(2);
    let _ = tokio::time::timeout(STEP, detach).await;
    let _ = tokio::time::timeout(STEP, session.end()).await;
    let _ = tokio::time::timeout(STEP, conn.close()).await;
}

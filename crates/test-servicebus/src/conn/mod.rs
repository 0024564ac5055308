//! One client connection: protocol headers, SASL, `open`, then frames until `close`
//! or the socket ends. One task per connection reads frames (cancel-safely) and
//! handles them; a second one writes what the first produced, so a client that is
//! slow to read never blocks us from reading what it sends.
//!
//! The engine is ours, not fe2o3-amqp's acceptor, because Service Bus clients need
//! what that acceptor cannot give: 16-byte delivery tags that are the lock token,
//! a settled disposition answering every unsettled one (also for a single delivery),
//! and the echoed outcome of our choosing (`rejected` echoed without its error).

mod attach;
mod deliver;
mod link;
mod management;
mod requests;
mod sasl;
#[cfg(test)]
mod tests;
mod transfer;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fe2o3_amqp_types::definitions::{AmqpError, ConnectionError, Error, ErrorCondition};
use fe2o3_amqp_types::performatives::{Begin, Close, End, Flow, Open, Performative};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use self::link::{INCOMING_WINDOW, Session};
use crate::sas::Granted;
use crate::state::{Shared, bump};
use crate::wire::frame::{
    AMQP_FRAME, AMQP_HEADER, FrameError, FrameReader, MIN_MAX_FRAME_SIZE, RawFrame, decode_performative, encode_empty,
    encode_frame,
};

/// The largest frame we accept.
const MAX_FRAME_SIZE: u32 = 256 * 1024;
/// The largest message (or batch) we assemble.
pub(crate) const MAX_MESSAGE_SIZE: u64 = 4 * 1024 * 1024;
/// The highest channel a client may use.
const CHANNEL_MAX: u16 = 255;
/// How long a client may take for its headers and `open`.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(30);

/// How the connection is authorized.
#[derive(Debug, Default)]
pub(super) struct Auth {
    /// SASL PLAIN with the policy name and key: every entity, no token needed.
    pub(super) plain: bool,
    /// Tokens put on `$cbs`.
    pub(super) tokens: Vec<Granted>,
}

impl Auth {
    /// Until when the connection may use `path` (broker ms); `None` when it may not.
    pub(super) fn until(&self, path: &str, now: i64) -> Option<i64> {
        if self.plain {
            return Some(i64::MAX);
        }
        self.tokens
            .iter()
            .filter(|t| t.expires_ms > now && crate::sas::covers(&t.path, path))
            .map(|t| t.expires_ms)
            .max()
    }
}

/// A connection after `open`.
pub(super) struct Conn {
    shared: Arc<Shared>,
    peer: SocketAddr,
    /// `host:port` the client connected to, for error texts.
    namespace: String,
    out: Vec<u8>,
    remote_max_frame: u32,
    /// Half the client's idle timeout: send something at least this often.
    heartbeat: Option<Duration>,
    last_sent: Instant,
    /// Sessions by the client's channel.
    sessions: BTreeMap<u16, Session>,
    auth: Auth,
    /// Woken when a queue this connection waits for gets a message.
    notify: Arc<Notify>,
    closed: bool,
}

/// Serve one client until it leaves, breaks the protocol, or `stop` fires.
pub(crate) async fn serve(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    bump(&shared.counters.connections);
    let _ = stream.set_nodelay(true);
    let namespace = stream.local_addr().map_or_else(|_| "localhost".to_owned(), |a| a.to_string());
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(bytes) = rx.recv().await {
            if write.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = write.shutdown().await;
    });
    let mut reader = FrameReader::new(read, MAX_FRAME_SIZE);
    let opened = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_LIMIT, handshake(&mut reader, &tx, &shared)) => r.unwrap_or(Err("the client took too long to open the connection".to_owned())),
        _ = stop.changed() => Err("the broker is stopping".to_owned()),
    };
    match opened {
        Ok((auth, open)) => {
            let mut conn = Conn::new(shared, peer, namespace, auth, &open);
            tracing::debug!(%peer, container = %open.container_id, "connection open");
            conn.run(&mut reader, &tx, &mut stop).await;
        }
        Err(why) => tracing::debug!(%peer, "connection refused: {why}"),
    }
    drop(tx);
    let _ = writer.await;
    tracing::debug!(%peer, "connection closed");
}

/// Headers, SASL, headers again, `open` in both directions.
async fn handshake(
    reader: &mut FrameReader<OwnedReadHalf>,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
    shared: &Shared,
) -> Result<(Auth, Open), String> {
    let auth = sasl::negotiate(reader, tx, shared).await?;
    let header = reader.header().await.map_err(|e| e.to_string())?;
    if header != AMQP_HEADER {
        let _ = tx.send(AMQP_HEADER.to_vec());
        return Err(format!("expected the AMQP 1.0 header after SASL, got {header:02x?}"));
    }
    let _ = tx.send(AMQP_HEADER.to_vec());
    loop {
        let frame = reader.frame().await.map_err(|e| e.to_string())?;
        if frame.body.is_empty() {
            continue;
        }
        match decode_performative(&frame.body).map_err(|e| e.to_string())?.0 {
            Performative::Open(open) => return Ok((auth, open)),
            other => return Err(format!("expected open, got {other:?}")),
        }
    }
}

impl Conn {
    fn new(shared: Arc<Shared>, peer: SocketAddr, namespace: String, auth: Auth, open: &Open) -> Conn {
        let mut conn = Conn {
            shared,
            peer,
            namespace,
            out: Vec::new(),
            remote_max_frame: open.max_frame_size.0.clamp(MIN_MAX_FRAME_SIZE, u32::MAX),
            heartbeat: open.idle_time_out.filter(|ms| *ms > 0).map(|ms| Duration::from_millis(u64::from(ms) / 2)),
            last_sent: Instant::now(),
            sessions: BTreeMap::new(),
            auth,
            notify: Arc::new(Notify::new()),
            closed: false,
        };
        let reply = Open {
            container_id: "test-servicebus".to_owned(),
            hostname: None,
            max_frame_size: MAX_FRAME_SIZE.into(),
            channel_max: CHANNEL_MAX.into(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        conn.send(0, Performative::Open(reply));
        conn
    }

    async fn run(
        &mut self,
        reader: &mut FrameReader<OwnedReadHalf>,
        tx: &mpsc::UnboundedSender<Vec<u8>>,
        stop: &mut watch::Receiver<bool>,
    ) {
        let mut clock = self.shared.clock_moved.subscribe();
        self.flush(tx);
        while !self.closed {
            let due = self.next_timer();
            tokio::select! {
                biased;
                _ = stop.changed() => {
                    self.close(Some(error(ErrorCondition::ConnectionError(ConnectionError::ConnectionForced), "the broker is stopping")));
                }
                frame = reader.frame() => match frame {
                    Ok(frame) => self.on_frame(frame),
                    Err(FrameError::Eof) => return,
                    Err(e) => {
                        tracing::warn!(peer = %self.peer, error = %e, "framing error; closing the connection");
                        self.close(Some(error(ErrorCondition::ConnectionError(ConnectionError::FramingError), &e.to_string())));
                    }
                },
                () = self.notify.notified() => {}
                _ = clock.changed() => self.check_tokens(),
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => self.on_timer(),
            }
            if !self.closed {
                self.check_sessions();
                self.pump();
            }
            self.flush(tx);
        }
    }

    /// Append a frame on our `channel`.
    pub(super) fn send(&mut self, channel: u16, performative: Performative) {
        encode_frame(&mut self.out, AMQP_FRAME, channel, &performative, &[]);
    }

    fn flush(&mut self, tx: &mpsc::UnboundedSender<Vec<u8>>) {
        if self.out.is_empty() {
            return;
        }
        if tx.send(std::mem::take(&mut self.out)).is_err() {
            self.closed = true;
        }
        self.last_sent = Instant::now();
    }

    /// Close the connection (with an error when it is our doing).
    pub(super) fn close(&mut self, err: Option<Error>) {
        if !self.closed {
            self.send(0, Performative::Close(Close { error: err }));
            self.closed = true;
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        let heartbeat = self.heartbeat.map(|h| self.last_sent + h);
        let now = self.shared.clock.now_ms();
        let token = self
            .sessions
            .values()
            .flat_map(|s| s.links.values())
            .filter_map(|l| l.auth_until)
            .filter(|u| *u < i64::MAX)
            .min()
            .map(|until| Instant::now() + Duration::from_millis(u64::try_from(until.saturating_sub(now)).unwrap_or(0)));
        [heartbeat, token].into_iter().flatten().min()
    }

    fn on_timer(&mut self) {
        if let Some(h) = self.heartbeat
            && self.last_sent.elapsed() >= h
            && self.out.is_empty()
        {
            encode_empty(&mut self.out);
        }
        self.check_tokens();
    }

    fn on_frame(&mut self, frame: RawFrame) {
        if frame.kind != AMQP_FRAME {
            self.close(Some(error(
                ErrorCondition::ConnectionError(ConnectionError::FramingError),
                "unexpected frame type",
            )));
            return;
        }
        if frame.body.is_empty() {
            return; // a heartbeat
        }
        let (performative, payload) = match decode_performative(&frame.body) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(peer = %self.peer, error = %e, "undecodable frame; closing the connection");
                self.close(Some(error(ErrorCondition::AmqpError(AmqpError::DecodeError), &e.0)));
                return;
            }
        };
        let channel = frame.channel;
        match performative {
            Performative::Open(_) => {
                self.close(Some(error(ErrorCondition::AmqpError(AmqpError::IllegalState), "open received twice")));
            }
            Performative::Close(_) => {
                self.send(0, Performative::Close(Close { error: None }));
                self.closed = true;
            }
            Performative::Begin(begin) => self.on_begin(channel, &begin),
            Performative::End(_) => self.on_end(channel),
            other => {
                if !self.sessions.contains_key(&channel) {
                    self.close(Some(error(
                        ErrorCondition::ConnectionError(ConnectionError::FramingError),
                        &format!("frame on channel {channel}, which has no session"),
                    )));
                    return;
                }
                match other {
                    Performative::Attach(a) => self.on_attach(channel, a),
                    Performative::Detach(d) => self.on_detach(channel, &d),
                    Performative::Flow(f) => self.on_flow(channel, &f),
                    Performative::Transfer(t) => self.on_transfer(channel, t, payload),
                    Performative::Disposition(d) => self.on_disposition(channel, &d),
                    _ => {}
                }
            }
        }
    }

    fn on_begin(&mut self, channel: u16, begin: &Begin) {
        if self.sessions.contains_key(&channel) || begin.remote_channel.is_some() {
            self.close(Some(error(ErrorCondition::AmqpError(AmqpError::IllegalState), "begin on a channel in use")));
            return;
        }
        let used: Vec<u16> = self.sessions.values().map(|s| s.local).collect();
        let Some(local) = (0..=CHANNEL_MAX).find(|c| !used.contains(c)) else {
            self.close(Some(error(ErrorCondition::ConnectionError(ConnectionError::FramingError), "no channel left")));
            return;
        };
        let session = Session::new(local, begin.next_outgoing_id, begin.incoming_window);
        let reply = Begin {
            remote_channel: Some(channel),
            next_outgoing_id: 0,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: u32::MAX,
            handle_max: u32::MAX.into(),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.sessions.insert(channel, session);
        self.send(local, Performative::Begin(reply));
    }

    fn on_end(&mut self, channel: u16) {
        if let Some(session) = self.sessions.remove(&channel) {
            // Its links are gone; their locks stay until they expire, as on Service Bus.
            self.send(session.local, Performative::End(End { error: None }));
        }
    }

    /// End a session with an error (the client broke its rules).
    pub(super) fn end_session(&mut self, channel: u16, err: Error) {
        if let Some(session) = self.sessions.remove(&channel) {
            tracing::warn!(peer = %self.peer, error = ?err, "ending a session");
            self.send(session.local, Performative::End(End { error: Some(err) }));
        }
    }

    fn on_flow(&mut self, channel: u16, flow: &Flow) {
        let Some(session) = self.sessions.get_mut(&channel) else { return };
        session.on_flow(flow.next_incoming_id, flow.incoming_window, flow.next_outgoing_id);
        let Some(handle) = flow.handle.clone() else {
            if flow.echo {
                self.send_flow(channel, None);
            }
            return;
        };
        let Some(link) = session.links.get_mut(&handle.0) else { return };
        if link.kind.broker_sends() {
            // Credit counts from the delivery-count the client last saw; what we sent
            // since then has used some of it up (part 2.6.7).
            let their_count = flow.delivery_count.unwrap_or(0);
            let used = link::serial_diff(link.delivery_count, their_count);
            link.credit = u32::try_from(i64::from(flow.link_credit.unwrap_or(0)) - used).unwrap_or(0);
            link.drain = flow.drain;
        }
        if flow.echo {
            self.send_flow(channel, Some(handle.0));
        }
    }

    /// Send our session state, and the link's when `handle` (the client's) is given.
    pub(super) fn send_flow(&mut self, channel: u16, handle: Option<u32>) {
        let Some(session) = self.sessions.get(&channel) else { return };
        let mut flow = Flow {
            next_incoming_id: Some(session.next_incoming_id),
            incoming_window: session.incoming_window,
            next_outgoing_id: session.next_outgoing_id,
            outgoing_window: u32::MAX,
            handle: None,
            delivery_count: None,
            link_credit: None,
            available: None,
            drain: false,
            echo: false,
            properties: None,
        };
        let local = session.local;
        if let Some(link) = handle.and_then(|h| session.links.get(&h)) {
            flow.handle = Some(link.local.into());
            if link.kind.broker_sends() {
                flow.delivery_count = Some(link.delivery_count);
                flow.link_credit = Some(link.credit);
                flow.drain = link.drain;
            } else {
                flow.delivery_count = Some(link.rx_count);
                flow.link_credit = Some(link.granted);
            }
        }
        self.send(local, Performative::Flow(flow));
    }

    /// Detach every link whose token expired and that no newer token covers.
    fn check_tokens(&mut self) {
        let now = self.shared.clock.now_ms();
        let mut expired = Vec::new();
        for (channel, session) in &mut self.sessions {
            for (handle, link) in &mut session.links {
                let Some(until) = link.auth_until else { continue };
                if until > now {
                    continue;
                }
                let path = link.kind.entity().map(|(q, _)| q.to_owned()).unwrap_or_default();
                match self.auth.until(&path, now) {
                    Some(later) => link.auth_until = Some(later),
                    None => expired.push((*channel, *handle)),
                }
            }
        }
        for (channel, handle) in expired {
            bump(&self.shared.counters.links_expired);
            let err = error(
                ErrorCondition::AmqpError(AmqpError::UnauthorizedAccess),
                "ExpiredToken: the token of this link expired and no new one was put on $cbs",
            );
            self.detach_with(channel, handle, err);
        }
    }
}

impl Conn {
    /// Detach every session receiver whose session lock ran out.
    fn check_sessions(&mut self) {
        let now = self.shared.clock.now_ms();
        let mut lost = Vec::new();
        {
            let state = self.shared.state();
            for (channel, session) in &self.sessions {
                for (handle, link) in &session.links {
                    if let (Some(s), link::Kind::Consumer(entity)) = (&link.session, &link.kind)
                        && !state.queue(&entity.queue).is_some_and(|q| q.holds_session(s, link.id, now))
                    {
                        lost.push((*channel, *handle));
                    }
                }
            }
        }
        for (channel, handle) in lost {
            let err = error(
                ErrorCondition::Custom(fe2o3_amqp_types::primitives::Symbol::from(SESSION_LOCK_LOST)),
                "The session lock has expired on the MessageSession. Accept a new MessageSession.",
            );
            self.detach_with(channel, handle, err);
        }
    }
}

/// Error condition of a session whose lock ran out.
pub(crate) const SESSION_LOCK_LOST: &str = "com.microsoft:session-lock-lost";

/// An AMQP error.
pub(super) fn error(condition: ErrorCondition, description: &str) -> Error {
    Error { condition, description: Some(description.to_owned()), info: None }
}

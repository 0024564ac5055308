//! AMQP 1.0 framing (part 2, "Transport"): the 8-byte protocol headers, frames
//! (`size`, `doff`, `type`, `channel`, then the body), performatives encoded with
//! serde_amqp, and transfers cut into frames no larger than the peer allows.
//!
//! [`FrameReader`] is cancel-safe: bytes are buffered before anything is parsed, so
//! a `select!` that drops a pending read loses nothing.

use fe2o3_amqp_types::performatives::{Performative, Transfer};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::value::encoded_len;

/// The protocol header of plain AMQP 1.0.
pub(crate) const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// The protocol header of the SASL layer.
pub(crate) const SASL_HEADER: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// Frame type of AMQP frames.
pub(crate) const AMQP_FRAME: u8 = 0;
/// Frame type of SASL frames.
pub(crate) const SASL_FRAME: u8 = 1;
/// Every peer must accept frames this large (`MIN-MAX-FRAME-SIZE`).
pub(crate) const MIN_MAX_FRAME_SIZE: u32 = 512;
/// Frame header length with `doff = 2`.
const HEADER_LEN: usize = 8;

/// A frame as read, its body after the (skipped) extended header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawFrame {
    pub(crate) kind: u8,
    pub(crate) channel: u16,
    pub(crate) body: Vec<u8>,
}

/// What is wrong with the bytes a peer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// A frame larger than we announced, or smaller than its header.
    BadSize(u32),
    /// `doff` below 2 or beyond the frame.
    BadOffset(u8),
    /// The connection ended inside a frame or header.
    Eof,
    /// A socket error.
    Io(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadSize(n) => write!(f, "frame size {n} is outside what this connection allows"),
            FrameError::BadOffset(d) => write!(f, "frame data offset {d} is invalid"),
            FrameError::Eof => f.write_str("the connection ended in the middle of a frame"),
            FrameError::Io(e) => write!(f, "socket error: {e}"),
        }
    }
}

/// One frame from the front of `buf`, and how many bytes it took; `None` until the
/// whole frame is there.
pub(crate) fn parse_frame(buf: &[u8], max_frame_size: u32) -> Result<Option<(RawFrame, usize)>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let size = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    if size < HEADER_LEN as u32 || size > max_frame_size {
        return Err(FrameError::BadSize(size));
    }
    let doff = header[4];
    let body_start = usize::from(doff) * 4;
    let size = size as usize;
    if doff < 2 || body_start > size {
        return Err(FrameError::BadOffset(doff));
    }
    if buf.len() < size {
        return Ok(None);
    }
    let frame = RawFrame {
        kind: header[5],
        channel: u16::from_be_bytes([header[6], header[7]]),
        body: buf[body_start..size].to_vec(),
    };
    Ok(Some((frame, size)))
}

/// Why an AMQP frame body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The performative of a non-empty AMQP frame body, and the payload after it (a
/// transfer's message bytes; empty for every other performative).
pub(crate) fn decode_performative(body: &[u8]) -> Result<(Performative, &[u8]), DecodeError> {
    let len = encoded_len(body).map_err(|e| DecodeError(format!("malformed performative: {e}")))?;
    let performative: Performative =
        serde_amqp::from_slice(&body[..len]).map_err(|e| DecodeError(format!("malformed performative: {e}")))?;
    Ok((performative, &body[len..]))
}

/// Append one frame: header, `body` encoded, then `payload` as it is.
pub(crate) fn encode_frame<T: Serialize>(out: &mut Vec<u8>, kind: u8, channel: u16, body: &T, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, 2, kind]);
    out.extend_from_slice(&channel.to_be_bytes());
    // Our own performatives always encode; a failure would be a bug in the types.
    if let Err(e) = body.serialize(&mut serde_amqp::ser::Serializer::new(&mut *out)) {
        tracing::error!(error = %e, "could not encode a frame");
        out.truncate(start);
        return;
    }
    out.extend_from_slice(payload);
    let size = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// Append an empty AMQP frame (a heartbeat).
pub(crate) fn encode_empty(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0, 0, 8, 2, AMQP_FRAME, 0, 0]);
}

/// Append `transfer` with `payload`, cut into as many frames as `max_frame_size`
/// needs (every frame but the last with `more = true`). Returns how many frames.
pub(crate) fn encode_transfer(
    out: &mut Vec<u8>,
    channel: u16,
    mut transfer: Transfer,
    payload: &[u8],
    max_frame_size: u32,
) -> u32 {
    let last_more = transfer.more;
    transfer.more = true;
    let overhead = HEADER_LEN + serde_amqp::to_vec(&Performative::Transfer(transfer.clone())).map_or(256, |v| v.len());
    let room = (max_frame_size as usize).saturating_sub(overhead).max(1);
    let mut chunks = payload.chunks(room).peekable();
    if chunks.peek().is_none() {
        transfer.more = last_more;
        encode_frame(out, AMQP_FRAME, channel, &Performative::Transfer(transfer), &[]);
        return 1;
    }
    let mut frames = 0;
    while let Some(chunk) = chunks.next() {
        transfer.more = chunks.peek().is_some() || last_more;
        encode_frame(out, AMQP_FRAME, channel, &Performative::Transfer(transfer.clone()), chunk);
        frames += 1;
    }
    frames
}

/// Reads protocol headers and frames from a byte stream, cancel-safely.
pub(crate) struct FrameReader<R> {
    io: R,
    buf: Vec<u8>,
    /// The largest frame we accept (what we announced in `open`).
    pub(crate) max_frame_size: u32,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub(crate) fn new(io: R, max_frame_size: u32) -> Self {
        FrameReader { io, buf: Vec::with_capacity(64 * 1024), max_frame_size }
    }

    async fn fill(&mut self) -> Result<(), FrameError> {
        match self.io.read_buf(&mut self.buf).await {
            Ok(0) => Err(FrameError::Eof),
            Ok(_) => Ok(()),
            Err(e) => Err(FrameError::Io(e.to_string())),
        }
    }

    /// The next 8-byte protocol header.
    pub(crate) async fn header(&mut self) -> Result<[u8; 8], FrameError> {
        while self.buf.len() < 8 {
            self.fill().await?;
        }
        let mut header = [0u8; 8];
        header.copy_from_slice(&self.buf[..8]);
        self.buf.drain(..8);
        Ok(header)
    }

    /// The next frame; `Err(Eof)` when the peer closed the socket.
    pub(crate) async fn frame(&mut self) -> Result<RawFrame, FrameError> {
        loop {
            if let Some((frame, used)) = parse_frame(&self.buf, self.max_frame_size)? {
                self.buf.drain(..used);
                return Ok(frame);
            }
            self.fill().await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::performatives::{Close, Open};

    use super::*;

    fn transfer(more: bool) -> Transfer {
        Transfer {
            handle: 1.into(),
            delivery_id: Some(7),
            delivery_tag: Some(vec![9u8; 16].into()),
            message_format: Some(0),
            settled: Some(false),
            more,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        }
    }

    #[test]
    fn a_frame_round_trips_and_waits_for_its_last_byte() {
        let mut out = Vec::new();
        encode_frame(&mut out, AMQP_FRAME, 3, &Performative::Close(Close { error: None }), b"");
        for cut in 0..out.len() {
            assert_eq!(parse_frame(&out[..cut], 1024), Ok(None), "cut at {cut}");
        }
        let (frame, used) = parse_frame(&out, 1024).unwrap().unwrap();
        assert_eq!(used, out.len());
        assert_eq!((frame.kind, frame.channel), (AMQP_FRAME, 3));
        let (p, payload) = decode_performative(&frame.body).unwrap();
        assert_eq!(p, Performative::Close(Close { error: None }));
        assert!(payload.is_empty());
    }

    #[test]
    fn bad_frames_are_refused() {
        let check = |bytes: &[u8], want: FrameError| assert_eq!(parse_frame(bytes, 1024), Err(want));
        check(&[0, 0, 0, 4, 2, 0, 0, 0], FrameError::BadSize(4));
        check(&[0, 0, 8, 0, 2, 0, 0, 0], FrameError::BadSize(2048));
        check(&[0, 0, 0, 8, 1, 0, 0, 0], FrameError::BadOffset(1));
        check(&[0, 0, 0, 8, 3, 0, 0, 0], FrameError::BadOffset(3));
        // An extended header (doff 3) is skipped.
        let (f, _) = parse_frame(&[0, 0, 0, 13, 3, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd, 0x40], 1024).unwrap().unwrap();
        assert_eq!(f.body, vec![0x40]);
        assert!(decode_performative(&[0x40]).is_err(), "null is no performative");
        assert!(decode_performative(&[0x00, 0x53]).is_err(), "truncated");
    }

    #[test]
    fn a_transfer_larger_than_a_frame_is_cut_and_reassembles() {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        for max in [512u32, 1000, 4096, 65_536] {
            let mut out = Vec::new();
            let frames = encode_transfer(&mut out, 2, transfer(false), &payload, max);
            let mut at = 0;
            let mut got = Vec::new();
            let mut mores = Vec::new();
            while at < out.len() {
                let (frame, used) = parse_frame(&out[at..], max).unwrap().expect("whole frames");
                assert!(used as u32 <= max, "frame of {used} bytes over {max}");
                let (p, chunk) = decode_performative(&frame.body).unwrap();
                let Performative::Transfer(t) = p else { panic!("a transfer") };
                assert_eq!(t.delivery_id, Some(7));
                mores.push(t.more);
                got.extend_from_slice(chunk);
                at += used;
            }
            assert_eq!(got, payload, "max {max}");
            assert_eq!(mores.len() as u32, frames);
            assert_eq!(mores.last(), Some(&false));
            assert!(mores[..mores.len() - 1].iter().all(|m| *m));
        }
        let mut out = Vec::new();
        assert_eq!(encode_transfer(&mut out, 0, transfer(false), &[], 512), 1);
    }

    #[tokio::test]
    async fn the_reader_reads_headers_and_frames_across_partial_writes() {
        let mut bytes = SASL_HEADER.to_vec();
        let open = Open {
            container_id: "c".into(),
            hostname: None,
            max_frame_size: 1024.into(),
            channel_max: 1.into(),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        encode_frame(&mut bytes, AMQP_FRAME, 0, &Performative::Open(open), b"");
        encode_empty(&mut bytes);
        let (client, server) = tokio::io::duplex(3);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut client = client;
            for b in bytes {
                client.write_all(&[b]).await.unwrap();
            }
        });
        let mut reader = FrameReader::new(server, 1024);
        assert_eq!(reader.header().await.unwrap(), SASL_HEADER);
        let open = reader.frame().await.unwrap();
        assert!(matches!(decode_performative(&open.body).unwrap().0, Performative::Open(_)));
        assert!(reader.frame().await.unwrap().body.is_empty(), "heartbeat");
        writer.await.unwrap();
        assert_eq!(reader.frame().await, Err(FrameError::Eof));
    }
}

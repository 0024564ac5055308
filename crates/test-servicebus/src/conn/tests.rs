//! The connection engine frame by frame: a scripted client (our own frame code)
//! against a real [`Broker`] on loopback, for what no SDK lets a test see: the
//! exact dispositions echoed, refusals, token expiry, drain.

use std::time::Duration;

use fe2o3_amqp_types::definitions::{
    Error as AmqpErr, ErrorCondition, Fields, ReceiverSettleMode, Role, SenderSettleMode,
};
use fe2o3_amqp_types::messaging::{
    Accepted, AmqpValue, ApplicationProperties, Data, DeliveryState, MessageId, Modified, Properties, Rejected, Source,
    Target,
};
use fe2o3_amqp_types::performatives::{Attach, Begin, Detach, Disposition, Flow, Open, Performative, Transfer};
use fe2o3_amqp_types::primitives::{Array, Binary, OrderedMap, SimpleValue, Symbol, Uuid, Value};
use fe2o3_amqp_types::sasl::{SaslInit, SaslOutcome};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::config::BrokerConfig;
use crate::message::{BATCH_FORMAT, StoredMessage};
use crate::queue::{QueueConfig, SubQueue};
use crate::server::Broker;
use crate::wire::frame::{
    AMQP_FRAME, AMQP_HEADER, FrameReader, SASL_FRAME, SASL_HEADER, decode_performative, encode_frame,
};

const WAIT: Duration = Duration::from_secs(5);

fn broker(queues: &[(&str, QueueConfig)]) -> Broker {
    let mut config = BrokerConfig::default();
    for (name, q) in queues {
        config = config.queue(*name, q.clone());
    }
    Broker::start(config).expect("broker starts")
}

fn lock(ms: u64) -> QueueConfig {
    QueueConfig { lock_duration: Duration::from_millis(ms), ..QueueConfig::default() }
}

enum Sasl {
    Anonymous,
    Plain(&'static str, &'static str),
}

/// A client that speaks frames, one session on channel 0.
struct Raw {
    reader: FrameReader<OwnedReadHalf>,
    write: OwnedWriteHalf,
    next_delivery_id: u32,
}

impl Raw {
    async fn connect(broker: &Broker, sasl: Sasl) -> Result<Raw, String> {
        let stream = TcpStream::connect(broker.addr()).await.map_err(|e| e.to_string())?;
        let (read, write) = stream.into_split();
        let mut raw = Raw { reader: FrameReader::new(read, 1 << 20), write, next_delivery_id: 0 };
        raw.bytes(&SASL_HEADER).await;
        assert_eq!(raw.reader.header().await.unwrap(), SASL_HEADER);
        let _mechanisms = raw.reader.frame().await.unwrap();
        let (mechanism, response) = match sasl {
            Sasl::Anonymous => ("ANONYMOUS", Vec::new()),
            Sasl::Plain(user, password) => ("PLAIN", format!("\0{user}\0{password}").into_bytes()),
        };
        let init = SaslInit {
            mechanism: Symbol::from(mechanism),
            initial_response: Some(Binary::from(response)),
            hostname: None,
        };
        let mut out = Vec::new();
        encode_frame(&mut out, SASL_FRAME, 0, &init, &[]);
        raw.bytes(&out).await;
        let outcome: SaslOutcome = serde_amqp::from_slice(&raw.reader.frame().await.unwrap().body).unwrap();
        if outcome.code != fe2o3_amqp_types::sasl::SaslCode::Ok {
            return Err(format!("sasl {:?}", outcome.code));
        }
        raw.bytes(&AMQP_HEADER).await;
        assert_eq!(raw.reader.header().await.unwrap(), AMQP_HEADER);
        let open = Open {
            container_id: "raw".into(),
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
        raw.send(Performative::Open(open), &[]).await;
        assert!(matches!(raw.next().await.0, Performative::Open(_)));
        let begin = Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 10_000,
            outgoing_window: 10_000,
            handle_max: 64.into(),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        raw.send(Performative::Begin(begin), &[]).await;
        assert!(matches!(raw.next().await.0, Performative::Begin(_)));
        Ok(raw)
    }

    async fn bytes(&mut self, b: &[u8]) {
        self.write.write_all(b).await.unwrap();
    }

    async fn send(&mut self, p: Performative, payload: &[u8]) {
        let mut out = Vec::new();
        encode_frame(&mut out, AMQP_FRAME, 0, &p, payload);
        self.bytes(&out).await;
    }

    /// The next non-empty frame's performative and payload.
    async fn next(&mut self) -> (Performative, Vec<u8>) {
        loop {
            let frame =
                tokio::time::timeout(WAIT, self.reader.frame()).await.expect("a frame in time").expect("a frame");
            if !frame.body.is_empty() {
                let (p, payload) = decode_performative(&frame.body).unwrap();
                return (p, payload.to_vec());
            }
        }
    }

    /// Skip flows; the next other frame.
    async fn next_not_flow(&mut self) -> (Performative, Vec<u8>) {
        loop {
            let f = self.next().await;
            if !matches!(f.0, Performative::Flow(_)) {
                return f;
            }
        }
    }

    async fn attach(&mut self, handle: u32, client_receives: bool, address: &str, rcv: ReceiverSettleMode) -> Attach {
        let attach = Attach {
            name: format!("link-{handle}"),
            handle: handle.into(),
            role: if client_receives { Role::Receiver } else { Role::Sender },
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: rcv,
            source: Some(Box::new(Source::builder().address(if client_receives { address } else { "client" }).build())),
            target: Some(Box::new(
                Target::builder().address(if client_receives { "client" } else { address }).build().into(),
            )),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: (!client_receives).then_some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.send(Performative::Attach(attach), &[]).await;
        match self.next_not_flow().await.0 {
            Performative::Attach(a) => a,
            other => panic!("expected attach, got {other:?}"),
        }
    }

    async fn credit(&mut self, handle: u32, credit: u32, drain: bool) {
        let flow = Flow {
            next_incoming_id: Some(0),
            incoming_window: 10_000,
            next_outgoing_id: self.next_delivery_id,
            outgoing_window: 10_000,
            handle: Some(handle.into()),
            delivery_count: Some(0),
            link_credit: Some(credit),
            available: None,
            drain,
            echo: false,
            properties: None,
        };
        self.send(Performative::Flow(flow), &[]).await;
    }

    /// Send a transfer on `handle`; its delivery id.
    async fn transfer(&mut self, handle: u32, format: u32, settled: bool, payload: &[u8]) -> u32 {
        let id = self.next_delivery_id;
        self.next_delivery_id += 1;
        let t = Transfer {
            handle: handle.into(),
            delivery_id: Some(id),
            delivery_tag: Some(Binary::from(id.to_be_bytes().to_vec())),
            message_format: Some(format),
            settled: Some(settled),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        self.send(Performative::Transfer(t), payload).await;
        id
    }

    async fn disposition(&mut self, first: u32, last: Option<u32>, settled: bool, state: DeliveryState) {
        let d = Disposition { role: Role::Receiver, first, last, settled, state: Some(state), batchable: false };
        self.send(Performative::Disposition(d), &[]).await;
    }

    /// Put a token on `$cbs` (links 100 and 101); the status code.
    async fn put_token(&mut self, token: &str, audience: &str) -> i32 {
        self.attach(100, false, "$cbs", ReceiverSettleMode::First).await;
        self.attach(101, true, "$cbs", ReceiverSettleMode::First).await;
        self.credit(101, 10, false).await;
        let mut ap = ApplicationProperties::default();
        ap.0.insert("operation".into(), SimpleValue::String("put-token".into()));
        ap.0.insert("name".into(), SimpleValue::String(audience.into()));
        ap.0.insert("type".into(), SimpleValue::String("jwt".into()));
        let props = Properties { message_id: Some(MessageId::Ulong(7)), ..Properties::default() };
        let mut payload = serde_amqp::to_vec(&props).unwrap();
        payload.extend(serde_amqp::to_vec(&ap).unwrap());
        payload.extend(serde_amqp::to_vec(&AmqpValue(token.to_owned())).unwrap());
        self.transfer(100, 0, false, &payload).await;
        loop {
            if let (Performative::Transfer(_), body) = self.next_not_flow().await {
                let response = StoredMessage::parse(&body).unwrap();
                assert_eq!(
                    response.properties.as_ref().and_then(|p| p.correlation_id.clone()),
                    Some(MessageId::Ulong(7))
                );
                let Some(SimpleValue::Int(code)) =
                    response.application_properties.as_ref().and_then(|a| a.0.get("status-code")).cloned()
                else {
                    panic!("no status-code")
                };
                return code;
            }
        }
    }
}

fn message(id: &str) -> Vec<u8> {
    let props = Properties { message_id: Some(MessageId::String(id.into())), ..Properties::default() };
    let mut payload = serde_amqp::to_vec(&props).unwrap();
    payload.extend(serde_amqp::to_vec(&Data(Binary::from(id.as_bytes().to_vec()))).unwrap());
    payload
}

fn dead_letter(reason: &str) -> DeliveryState {
    let mut info = Fields::new();
    info.insert(Symbol::from("DeadLetterReason"), Value::String(reason.into()));
    DeliveryState::Rejected(Rejected {
        error: Some(AmqpErr {
            condition: ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
            description: Some("why".into()),
            info: Some(Box::new(info)),
        }),
    })
}

/// Receive `n` deliveries (multi-frame ones reassembled): (delivery id, tag, payload).
async fn deliveries(raw: &mut Raw, n: usize) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut partial: Option<(u32, Vec<u8>, Vec<u8>)> = None;
    while out.len() < n {
        if let (Performative::Transfer(t), payload) = raw.next_not_flow().await {
            let entry = partial.get_or_insert_with(|| {
                (t.delivery_id.unwrap(), t.delivery_tag.clone().unwrap().into_vec(), Vec::new())
            });
            entry.2.extend_from_slice(&payload);
            if !t.more {
                out.extend(partial.take());
            }
        }
    }
    out
}

/// Wait (bounded) until `cond` holds.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn every_unsettled_disposition_is_answered_with_its_outcome() {
    let b = broker(&[("q", lock(60_000))]);
    for id in ["a", "b", "c", "d"] {
        b.send("q", id.as_bytes(), Some(id));
    }
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    let reply = raw.attach(0, true, "q", ReceiverSettleMode::Second).await;
    assert_eq!(reply.rcv_settle_mode, ReceiverSettleMode::Second, "the mode asked for");
    assert_eq!(reply.initial_delivery_count, Some(0));
    assert!(reply.source.is_some() && reply.target.is_some(), "both termini, or Microsoft's SDKs drop the link");
    raw.credit(0, 4, false).await;
    let got = deliveries(&mut raw, 4).await;
    for (_, tag, payload) in &got {
        assert_eq!(tag.len(), 16, "the tag is the lock token");
        let m = StoredMessage::parse(payload).unwrap();
        let Some(Value::Uuid(token)) =
            m.annotations.iter().find(|(k, _)| format!("{k:?}").contains("x-opt-lock-token")).map(|(_, v)| v.clone())
        else {
            panic!("a lock token annotation")
        };
        assert_eq!(&super::deliver::delivery_tag(token.as_inner()), tag, "the tag is the token in .NET byte order");
    }
    // One delivery at a time: each is answered (the engine of fe2o3 0.18 never
    // answered a single one).
    raw.disposition(got[0].0, None, false, DeliveryState::Accepted(Accepted {})).await;
    let abandon = Modified { delivery_failed: Some(true), undeliverable_here: Some(false), message_annotations: None };
    raw.disposition(got[1].0, None, false, DeliveryState::Modified(abandon.clone())).await;
    raw.disposition(got[2].0, None, false, dead_letter("Poison")).await;
    let want = [
        DeliveryState::Accepted(Accepted {}),
        DeliveryState::Modified(abandon),
        DeliveryState::Rejected(Rejected { error: None }),
    ];
    for (i, want) in want.into_iter().enumerate() {
        match raw.next_not_flow().await.0 {
            Performative::Disposition(d) => {
                assert_eq!((d.role, d.first, d.last, d.settled), (Role::Sender, got[i].0, None, true));
                assert_eq!(d.state, Some(want), "echo {i}: rejected without its error");
            }
            other => panic!("expected a disposition, got {other:?}"),
        }
    }
    // A settled disposition (settle mode first, as drain sends) is applied, not answered.
    raw.disposition(got[3].0, None, true, DeliveryState::Accepted(Accepted {})).await;
    eventually("the settled disposition is applied", || b.stats("q").unwrap().locked == 0).await;
    let stats = b.stats("q").unwrap();
    assert_eq!((stats.active, stats.locked, stats.dead_lettered), (1, 0, 1), "{stats:?}");
    let dead = b.messages("q", SubQueue::DeadLetter);
    assert_eq!(dead[0].dead_letter_reason.as_deref(), Some("Poison"));
    assert_eq!(b.messages("q", SubQueue::Main)[0].delivery_count, 1);
}

#[tokio::test]
async fn a_range_is_answered_per_outcome_and_a_lost_lock_is_rejected() {
    let b = broker(&[("q", lock(300))]);
    for id in ["a", "b", "c"] {
        b.send("q", id.as_bytes(), Some(id));
    }
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    raw.attach(0, true, "q", ReceiverSettleMode::Second).await;
    raw.credit(0, 3, false).await;
    let got = deliveries(&mut raw, 3).await;
    raw.disposition(got[0].0, Some(got[1].0), false, DeliveryState::Accepted(Accepted {})).await;
    match raw.next_not_flow().await.0 {
        Performative::Disposition(d) => assert_eq!((d.first, d.last, d.settled), (got[0].0, Some(got[1].0), true)),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    raw.disposition(got[2].0, None, false, DeliveryState::Accepted(Accepted {})).await;
    match raw.next_not_flow().await.0 {
        Performative::Disposition(d) => {
            let Some(DeliveryState::Rejected(Rejected { error: Some(e) })) = d.state else { panic!("rejected: {d:?}") };
            assert_eq!(e.condition, ErrorCondition::Custom(Symbol::from("com.microsoft:message-lock-lost")));
        }
        other => panic!("{other:?}"),
    }
    // The message is back (the lock expired), counted, and comes again on the link.
    raw.credit(0, 4, false).await;
    let again = deliveries(&mut raw, 1).await;
    assert_eq!(StoredMessage::parse(&again[0].2).unwrap().header.delivery_count, 1);
}

#[tokio::test]
async fn links_need_a_valid_token_and_lose_it_when_it_expires() {
    let b = broker(&[("q", QueueConfig::default())]);
    let mut raw = Raw::connect(&b, Sasl::Anonymous).await.unwrap();
    // No token: refused, with no terminus, then a closing detach.
    let reply = raw.attach(0, true, "q", ReceiverSettleMode::First).await;
    assert!(reply.source.is_none(), "a refused receiver gets no source");
    match raw.next_not_flow().await.0 {
        Performative::Detach(Detach { closed: true, error: Some(e), .. }) => {
            assert_eq!(
                e.condition,
                ErrorCondition::AmqpError(fe2o3_amqp_types::definitions::AmqpError::UnauthorizedAccess)
            );
        }
        other => panic!("{other:?}"),
    }
    let now = || {
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()).unwrap()
    };
    let audience = format!("sb://{}/q", b.addr());
    let wrong = crate::sas::sign(&audience, "RootManageSharedAccessKey", "wrong", now() + 60);
    assert_eq!(raw.put_token(&wrong, &audience).await, 401);
    let expired = b.sas_token("q", now() - 1);
    raw.send(Performative::Detach(Detach { handle: 100.into(), closed: true, error: None }), &[]).await;
    raw.send(Performative::Detach(Detach { handle: 101.into(), closed: true, error: None }), &[]).await;
    let _ = raw.next_not_flow().await;
    let _ = raw.next_not_flow().await;
    assert_eq!(raw.put_token(&expired, &audience).await, 401);
    assert_eq!(b.counters().tokens_refused, 2);

    // A token valid for 2 s: the link attaches, and is detached when it expires.
    let mut ok = Raw::connect(&b, Sasl::Anonymous).await.unwrap();
    assert_eq!(ok.put_token(&b.sas_token("q", now() + 2), &audience).await, 202);
    let reply = ok.attach(0, true, "q", ReceiverSettleMode::First).await;
    assert!(reply.source.is_some(), "attached with a token");
    let started = std::time::Instant::now();
    loop {
        match ok.next().await.0 {
            Performative::Detach(Detach { closed: true, error: Some(e), .. }) => {
                assert!(e.description.unwrap_or_default().contains("ExpiredToken"));
                break;
            }
            _ => assert!(started.elapsed() < Duration::from_secs(5), "detached within the token's life"),
        }
    }
    assert_eq!(b.counters().links_expired, 1);
    // A token put again before the old one expires keeps the link.
    let mut renewed = Raw::connect(&b, Sasl::Anonymous).await.unwrap();
    assert_eq!(renewed.put_token(&b.sas_token("q", now() + 2), &audience).await, 202);
    renewed.attach(0, true, "q", ReceiverSettleMode::First).await;
    let token = b.sas_token("q", now() + 60);
    renewed.send(Performative::Detach(Detach { handle: 100.into(), closed: true, error: None }), &[]).await;
    renewed.send(Performative::Detach(Detach { handle: 101.into(), closed: true, error: None }), &[]).await;
    let _ = renewed.next_not_flow().await;
    let _ = renewed.next_not_flow().await;
    assert_eq!(renewed.put_token(&token, &audience).await, 202);
    b.advance(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.counters().links_expired, 1, "the new token covers the link");
    b.advance(Duration::from_secs(120));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.counters().links_expired, 2, "until it expires too (the clock moved)");
}

#[tokio::test]
async fn unknown_entities_dead_letter_senders_and_bad_sasl_are_refused() {
    let b = broker(&[("q", QueueConfig::default())]);
    assert!(Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "nope")).await.is_err());
    assert!(Raw::connect(&b, Sasl::Plain("someone", "SAS_KEY_VALUE")).await.is_err());
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    let check = async |raw: &mut Raw, handle: u32, receives: bool, address: &str, condition: &str| {
        raw.attach(handle, receives, address, ReceiverSettleMode::First).await;
        match raw.next_not_flow().await.0 {
            Performative::Detach(Detach { closed: true, error: Some(e), .. }) => {
                assert!(format!("{:?}", e.condition).to_lowercase().contains(condition), "{address}: {e:?}");
            }
            other => panic!("{address}: {other:?}"),
        }
    };
    check(&mut raw, 0, true, "nope", "notfound").await;
    check(&mut raw, 1, false, "q/$DeadLetterQueue", "notallowed").await;
    check(&mut raw, 2, true, "topic/Subscriptions/s", "notfound").await;
    // A client that skips SASL gets the SASL header back and is hung up on.
    let mut plain = TcpStream::connect(b.addr()).await.unwrap();
    plain.write_all(&AMQP_HEADER).await.unwrap();
    let (read, _w) = plain.into_split();
    let mut reader = FrameReader::new(read, 1024);
    assert_eq!(reader.header().await.unwrap(), SASL_HEADER);
}

#[tokio::test]
async fn batches_large_messages_drain_and_renew_lock() {
    let b = broker(&[("q", lock(60_000))]);
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    raw.attach(0, false, "amqps://whatever:5671/Q", ReceiverSettleMode::Second).await;
    let _credit = raw.next().await;
    // A batch of two messages in one transfer, then one large message.
    let mut batch = Vec::new();
    for id in ["b1", "b2"] {
        batch.extend(serde_amqp::to_vec(&Data(Binary::from(message(id)))).unwrap());
    }
    let id = raw.transfer(0, BATCH_FORMAT, false, &batch).await;
    match raw.next_not_flow().await.0 {
        Performative::Disposition(d) => {
            assert_eq!(
                (d.role, d.first, d.settled, d.state),
                (Role::Receiver, id, true, Some(DeliveryState::Accepted(Accepted {})))
            )
        }
        other => panic!("{other:?}"),
    }
    let big = {
        let mut p = serde_amqp::to_vec(&Properties {
            message_id: Some(MessageId::String("big".into())),
            ..Properties::default()
        })
        .unwrap();
        p.extend(serde_amqp::to_vec(&Data(Binary::from(vec![7u8; 5000]))).unwrap());
        p
    };
    raw.transfer(0, 0, true, &big).await;
    eventually("both transfers are enqueued", || b.stats("q").unwrap().active == 3).await;
    let ids: Vec<_> = b.messages("q", SubQueue::Main).into_iter().filter_map(|m| m.message_id).collect();
    assert_eq!(ids, ["b1", "b2", "big"]);

    // Out to a client whose frames are 1024 bytes: the big one in several frames.
    raw.attach(1, true, "q", ReceiverSettleMode::First).await;
    raw.credit(1, 10, true).await;
    let got = deliveries(&mut raw, 3).await;
    assert_eq!(StoredMessage::parse(&got[2].2).unwrap().body().len(), 5000);
    // Drain: the rest of the credit is used up and the broker says so.
    loop {
        if let Performative::Flow(f) = raw.next().await.0
            && f.handle.is_some()
        {
            assert_eq!((f.link_credit, f.drain, f.delivery_count), (Some(0), true, Some(10)));
            break;
        }
    }
    // Renew the lock of the first through $management.
    raw.attach(2, false, "q/$management", ReceiverSettleMode::First).await;
    raw.attach(3, true, "q/$management", ReceiverSettleMode::First).await;
    raw.credit(3, 5, false).await;
    let token = {
        let m = StoredMessage::parse(&got[0].2).unwrap();
        let tag = &got[0].1;
        let mut rfc = tag.clone();
        rfc[0..4].reverse();
        rfc[4..6].reverse();
        rfc[6..8].reverse();
        assert!(
            m.annotations
                .iter()
                .any(|(_, v)| *v == Value::Uuid(Uuid::from(<[u8; 16]>::try_from(rfc.as_slice()).unwrap())))
        );
        rfc
    };
    let mut body = OrderedMap::new();
    body.insert(
        Value::String("lock-tokens".into()),
        Value::Array(Array(vec![Value::Uuid(Uuid::from(<[u8; 16]>::try_from(token.as_slice()).unwrap()))])),
    );
    let mut ap = ApplicationProperties::default();
    ap.0.insert("operation".into(), SimpleValue::String("com.microsoft:renew-lock".into()));
    let props = Properties {
        message_id: Some(MessageId::String("r1".into())),
        reply_to: Some("client".into()),
        ..Properties::default()
    };
    let mut payload = serde_amqp::to_vec(&props).unwrap();
    payload.extend(serde_amqp::to_vec(&ap).unwrap());
    payload.extend(serde_amqp::to_vec(&AmqpValue(Value::Map(body))).unwrap());
    raw.transfer(2, 0, true, &payload).await;
    let response = loop {
        if let (Performative::Transfer(_), body) = raw.next_not_flow().await {
            break StoredMessage::parse(&body).unwrap();
        }
    };
    let ap = response.application_properties.clone().unwrap();
    assert_eq!(ap.0.get("statusCode"), Some(&SimpleValue::Int(200)));
    let Some(Value::Map(map)) = response.amqp_value() else { panic!("a map") };
    let (_, Value::Array(exp)) = map.into_iter().next().unwrap() else { panic!("expirations") };
    assert_eq!(exp.0.len(), 1);
    assert_eq!(b.counters().renew_lock_requests, 1);
}

#[tokio::test]
async fn an_outage_keeps_the_queues_and_ends_every_connection() {
    let b = broker(&[("q", lock(60_000))]);
    b.send("q", b"kept", Some("kept"));
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    raw.attach(0, true, "q", ReceiverSettleMode::First).await;
    b.go_down();
    // A close frame, or the socket just ends.
    if let Ok(f) = tokio::time::timeout(WAIT, raw.reader.frame()).await.expect("in time") {
        assert!(matches!(decode_performative(&f.body).unwrap().0, Performative::Close(_)));
    }
    assert!(Raw::connect(&b, Sasl::Anonymous).await.is_err(), "nobody listens while down");
    b.come_up().unwrap();
    let mut again = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    again.attach(0, true, "q", ReceiverSettleMode::First).await;
    again.credit(0, 1, false).await;
    let got = deliveries(&mut again, 1).await;
    assert_eq!(StoredMessage::parse(&got[0].2).unwrap().body(), b"kept");
}

mod sessions;

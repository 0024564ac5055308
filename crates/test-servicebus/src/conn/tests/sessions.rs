//! Sessions and topics frame by frame: the attach answer a session receiver gets, the
//! refusals, a lapsed session lock, and a topic's copies.

use super::*;
use crate::rules::{Rule, SubscriptionConfig, TopicConfig};

const FILTER: &str = "com.microsoft:session-filter";

fn sessions_broker(lock_ms: u64) -> Broker {
    let q =
        QueueConfig { lock_duration: Duration::from_millis(lock_ms), requires_session: true, ..QueueConfig::default() };
    let sub =
        |name: &str, rules: Vec<Rule>| SubscriptionConfig { name: name.into(), queue: QueueConfig::default(), rules };
    let topic = TopicConfig {
        name: "t".into(),
        duplicate_detection: None,
        subscriptions: vec![
            sub("all", vec![]),
            sub("none", vec![Rule { name: "off".into(), filter: crate::rules::Filter::False }]),
        ],
    };
    Broker::start(BrokerConfig::default().queue("s", q).queue("plain", QueueConfig::default()).topic(topic))
        .expect("broker starts")
}

fn in_session(id: &str, session: &str) -> Vec<u8> {
    let props = Properties {
        message_id: Some(MessageId::String(id.into())),
        group_id: Some(session.into()),
        ..Properties::default()
    };
    let mut payload = serde_amqp::to_vec(&props).unwrap();
    payload.extend(serde_amqp::to_vec(&Data(Binary::from(id.as_bytes().to_vec()))).unwrap());
    payload
}

/// Attach a receiver on `address` with the session filter `filter` (none: no filter).
async fn attach_receiver(raw: &mut Raw, handle: u32, address: &str, filter: Option<Value>) -> Attach {
    let mut source = Source::builder().address(address).build();
    if let Some(f) = filter {
        let mut set = OrderedMap::new();
        set.insert(Symbol::from(FILTER), f);
        source.filter = Some(set);
    }
    let attach = Attach {
        name: format!("receiver-{handle}"),
        handle: handle.into(),
        role: Role::Receiver,
        snd_settle_mode: SenderSettleMode::Unsettled,
        rcv_settle_mode: ReceiverSettleMode::Second,
        source: Some(Box::new(source)),
        target: Some(Box::new(Target::builder().address("client").build().into())),
        unsettled: None,
        incomplete_unsettled: false,
        initial_delivery_count: None,
        max_message_size: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    raw.send(Performative::Attach(attach), &[]).await;
    match raw.next_not_flow().await.0 {
        Performative::Attach(a) => a,
        other => panic!("expected attach, got {other:?}"),
    }
}

/// The session id an attach answer carries in its source filter.
fn session_of(reply: &Attach) -> Option<Value> {
    reply.source.as_ref()?.filter.as_ref()?.iter().find(|(k, _)| k.as_str() == FILTER).map(|(_, v)| v.clone())
}

/// The next detach's error condition.
async fn detached(raw: &mut Raw) -> ErrorCondition {
    loop {
        if let (Performative::Detach(d), _) = raw.next_not_flow().await {
            return d.error.expect("a detach with an error").condition;
        }
    }
}

async fn send_all(raw: &mut Raw, handle: u32, address: &str, messages: &[Vec<u8>]) -> Vec<DeliveryState> {
    raw.attach(handle, false, address, ReceiverSettleMode::First).await;
    let mut outcomes = Vec::new();
    for m in messages {
        let id = raw.transfer(handle, 0, false, m).await;
        loop {
            if let (Performative::Disposition(d), _) = raw.next_not_flow().await {
                assert_eq!(d.first, id);
                outcomes.push(d.state.expect("an outcome"));
                break;
            }
        }
    }
    outcomes
}

#[tokio::test]
async fn a_session_receiver_gets_its_session_named_and_only_its_messages() {
    let b = sessions_broker(60_000);
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    let sent = send_all(
        &mut raw,
        0,
        "s",
        &[in_session("b-1", "b"), in_session("a-1", "a"), in_session("b-2", "b"), message("none")],
    )
    .await;
    assert!(sent[..3].iter().all(|s| matches!(s, DeliveryState::Accepted(_))), "{sent:?}");
    let DeliveryState::Rejected(Rejected { error: Some(e) }) = &sent[3] else {
        panic!("no session id: refused, {sent:?}")
    };
    assert!(e.description.as_deref().is_some_and(|d| d.contains("SessionId was not set")), "{e:?}");
    assert!(e.info.is_some(), "an info map, which Microsoft's Python SDK reads");

    let reply = attach_receiver(&mut raw, 1, "s", Some(Value::Null)).await;
    assert_eq!(session_of(&reply), Some(Value::String("b".into())), "next available: the oldest message's session");
    let until = reply.properties.as_ref().and_then(|p| p.get(&Symbol::from("com.microsoft:locked-until-utc"))).cloned();
    assert!(matches!(until, Some(Value::Long(ticks)) if ticks > 621_355_968_000_000_000), "{until:?}");
    raw.credit(1, 10, false).await;
    let got: Vec<Vec<u8>> =
        deliveries(&mut raw, 2).await.into_iter().map(|(_, _, p)| StoredMessage::parse(&p).unwrap().body()).collect();
    assert_eq!(got, [b"b-1".to_vec(), b"b-2".to_vec()]);

    let second = attach_receiver(&mut raw, 2, "s", Some(Value::String("b".into()))).await;
    assert!(second.source.is_none(), "refused");
    assert_eq!(
        detached(&mut raw).await,
        ErrorCondition::Custom(Symbol::from("com.microsoft:session-cannot-be-locked"))
    );
    let named = attach_receiver(&mut raw, 3, "s", Some(Value::String("a".into()))).await;
    assert_eq!(session_of(&named), Some(Value::String("a".into())));
    let none_left = attach_receiver(&mut raw, 4, "s", Some(Value::Null)).await;
    assert!(none_left.source.is_none());
    assert_eq!(detached(&mut raw).await, ErrorCondition::Custom(Symbol::from("com.microsoft:timeout")));
}

#[tokio::test]
async fn receivers_and_entities_that_disagree_on_sessions_are_refused_and_odd_filters_too() {
    let b = sessions_broker(60_000);
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    let cases: [(&str, Option<Value>, ErrorCondition); 4] = [
        ("s", None, ErrorCondition::AmqpError(fe2o3_amqp_types::definitions::AmqpError::NotAllowed)),
        ("plain", Some(Value::Null), ErrorCondition::AmqpError(fe2o3_amqp_types::definitions::AmqpError::NotAllowed)),
        ("s", Some(Value::Int(5)), ErrorCondition::Custom(Symbol::from("com.microsoft:argument-error"))),
        ("t", None, ErrorCondition::AmqpError(fe2o3_amqp_types::definitions::AmqpError::NotAllowed)),
    ];
    for (handle, (address, filter, want)) in (10u32..).zip(cases) {
        let reply = attach_receiver(&mut raw, handle, address, filter.clone()).await;
        assert!(reply.source.is_none(), "{address} {filter:?} refused");
        assert_eq!(detached(&mut raw).await, want, "{address} {filter:?}");
    }
    // The connection is still good.
    let reply = attach_receiver(&mut raw, 20, "plain", None).await;
    assert!(reply.source.is_some());
}

#[tokio::test]
async fn a_lapsed_session_lock_detaches_its_receiver_and_frees_the_session() {
    let b = sessions_broker(60_000);
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    send_all(&mut raw, 0, "s", &[in_session("a-1", "a")]).await;
    let reply = attach_receiver(&mut raw, 1, "s", Some(Value::String("a".into()))).await;
    assert!(reply.source.is_some());
    raw.credit(1, 10, false).await;
    deliveries(&mut raw, 1).await;
    b.advance(Duration::from_secs(61));
    assert_eq!(detached(&mut raw).await, ErrorCondition::Custom(Symbol::from("com.microsoft:session-lock-lost")));
    eventually("the message is back, counted", || {
        b.messages("s", SubQueue::Main).first().is_some_and(|m| m.lock.is_none() && m.delivery_count == 1)
    })
    .await;
    let again = attach_receiver(&mut raw, 2, "s", Some(Value::String("a".into()))).await;
    assert!(again.source.is_some(), "the session is free again");
}

#[tokio::test]
async fn a_topic_copies_to_matching_subscriptions_and_refuses_what_is_not_a_send_to_it() {
    let b = sessions_broker(60_000);
    let mut raw = Raw::connect(&b, Sasl::Plain("RootManageSharedAccessKey", "SAS_KEY_VALUE")).await.unwrap();
    let sent = send_all(&mut raw, 0, "t", &[message("m-1"), message("m-2")]).await;
    assert!(sent.iter().all(|s| matches!(s, DeliveryState::Accepted(_))));
    let count = |sub: &str| b.stats(&format!("t/Subscriptions/{sub}")).map(|s| s.active);
    assert_eq!((count("all"), count("none")), (Some(2), Some(0)));
    let to_sub = raw.attach(1, false, "t/Subscriptions/all", ReceiverSettleMode::First).await;
    assert!(to_sub.target.is_none(), "no sends to a subscription");
    detached(&mut raw).await;
    let dlq = attach_receiver(&mut raw, 2, "t/Subscriptions/all/$DeadLetterQueue", None).await;
    assert!(dlq.source.is_some(), "a subscription's dead-letter queue");
    assert_eq!(b.topics(), ["t"]);
}

//! Filters, one case a line; a topic's routing.

use fe2o3_amqp_types::messaging::{ApplicationProperties, Data, MessageId, Properties};
use fe2o3_amqp_types::primitives::{Binary, SimpleValue, Symbol};

use super::*;

fn message(subject: Option<&str>, correlation: Option<MessageId>, props: &[(&str, SimpleValue)]) -> StoredMessage {
    let mut payload = Vec::new();
    let p = Properties {
        subject: subject.map(str::to_owned),
        correlation_id: correlation,
        message_id: Some(MessageId::String("m-1".into())),
        content_type: Some(Symbol::from("application/json")),
        group_id: Some("s1".into()),
        ..Properties::default()
    };
    payload.extend(serde_amqp::to_vec(&p).unwrap());
    let mut ap = ApplicationProperties::default();
    for (k, v) in props {
        ap.0.insert((*k).to_owned(), v.clone());
    }
    payload.extend(serde_amqp::to_vec(&ap).unwrap());
    payload.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).unwrap());
    StoredMessage::parse(&payload).unwrap()
}

#[test]
fn filters_match_as_service_bus_compares() {
    let m = message(
        Some("order"),
        Some(MessageId::Ulong(42)),
        &[("region", SimpleValue::String("eu".into())), ("n", SimpleValue::Int(3)), ("ok", SimpleValue::Bool(true))],
    );
    let check = |filter: Filter, want: bool| assert_eq!(filter.matches(&m), want, "{filter:?}");
    let c = |f: CorrelationFilter| Filter::Correlation(Box::new(f));
    let prop =
        |name: &str, v: PropertyValue| CorrelationFilter { properties: vec![(name.into(), v)], ..Default::default() };
    check(Filter::True, true);
    check(Filter::False, false);
    check(c(CorrelationFilter::default()), true);
    check(c(CorrelationFilter { subject: Some("order".into()), ..Default::default() }), true);
    check(c(CorrelationFilter { subject: Some("Order".into()), ..Default::default() }), false);
    check(c(CorrelationFilter { correlation_id: Some("42".into()), ..Default::default() }), true);
    check(c(CorrelationFilter { message_id: Some("m-1".into()), ..Default::default() }), true);
    check(c(CorrelationFilter { session_id: Some("s1".into()), ..Default::default() }), true);
    check(c(CorrelationFilter { content_type: Some("application/json".into()), ..Default::default() }), true);
    check(c(CorrelationFilter { to: Some("x".into()), ..Default::default() }), false);
    check(c(CorrelationFilter { reply_to_session_id: Some("x".into()), ..Default::default() }), false);
    check(c(prop("region", PropertyValue::String("eu".into()))), true);
    check(c(prop("region", PropertyValue::String("us".into()))), false);
    check(c(prop("n", PropertyValue::Int(3))), true);
    check(c(prop("n", PropertyValue::Float(3.0))), true);
    check(c(prop("n", PropertyValue::String("3".into()))), false);
    check(c(prop("ok", PropertyValue::Bool(true))), true);
    check(c(prop("missing", PropertyValue::Bool(true))), false);
    check(
        c(CorrelationFilter {
            subject: Some("order".into()),
            properties: vec![("region".into(), PropertyValue::String("us".into()))],
            ..Default::default()
        }),
        false,
    );
}

#[test]
fn only_trivial_sql_is_evaluated() {
    assert_eq!(sql_filter("1=1"), Ok(Filter::True));
    assert_eq!(sql_filter(" 1 = 1 "), Ok(Filter::True));
    assert_eq!(sql_filter("1=0"), Ok(Filter::False));
    for sql in ["region = 'eu'", "1=1 AND region='eu'", "", "TRUE"] {
        let err = sql_filter(sql).unwrap_err();
        assert!(err.contains("does not evaluate the SQL filter"), "{sql}: {err}");
    }
}

#[test]
fn a_topic_routes_to_each_subscription_with_a_matching_rule() {
    let eu = Rule {
        name: "eu".into(),
        filter: Filter::Correlation(Box::new(CorrelationFilter {
            properties: vec![("region".into(), PropertyValue::String("eu".into()))],
            ..Default::default()
        })),
    };
    let topic = Topic {
        name: "t".into(),
        dedup: None,
        subscriptions: vec![
            ("t/subscriptions/all".into(), vec![Rule::default_rule()]),
            ("t/subscriptions/eu".into(), vec![eu.clone()]),
            ("t/subscriptions/twice".into(), vec![eu, Rule::default_rule()]),
            ("t/subscriptions/none".into(), vec![Rule { name: "off".into(), filter: Filter::False }]),
        ],
        scheduled: Default::default(),
        next_sequence: 1,
    };
    let routes = |region: &str| topic.routes(&message(None, None, &[("region", SimpleValue::String(region.into()))]));
    assert_eq!(routes("eu"), ["t/subscriptions/all", "t/subscriptions/eu", "t/subscriptions/twice"]);
    assert_eq!(routes("us"), ["t/subscriptions/all", "t/subscriptions/twice"], "one copy however many rules match");
    assert_eq!(subscription_key("Orders", "EU"), "orders/subscriptions/eu");
}

//! Microsoft's emulator configuration: what is mapped, what is refused (one case a
//! line), and the durations it writes.

use super::*;

fn read(json: &str) -> Result<BrokerConfig, String> {
    read_emulator_config(json, BrokerConfig::default())
}

fn namespace(inner: &str) -> String {
    format!(
        r#"{{"UserConfig": {{"Namespaces": [{{"Name": "sbemulatorns", {inner}}}], "Logging": {{"Type": "File"}}}}}}"#
    )
}

fn queue_with(props: &str) -> String {
    namespace(&format!(r#""Queues": [{{"Name": "q", "Properties": {{{props}}}}}]"#))
}

fn subscription_with(sub: &str) -> String {
    namespace(&format!(r#""Topics": [{{"Name": "t", "Subscriptions": [{{"Name": "s", {sub}}}]}}]"#))
}

#[test]
fn microsofts_sample_configuration_is_read() {
    let json = namespace(
        r#""Queues": [{"Name": "queue.1", "Properties": {
            "DeadLetteringOnMessageExpiration": false, "DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT20S", "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "",
            "LockDuration": "PT1M", "MaxDeliveryCount": 3, "RequiresDuplicateDetection": false, "RequiresSession": false}}],
        "Topics": [{"Name": "topic.1", "Properties": {"DefaultMessageTimeToLive": "PT1H",
            "DuplicateDetectionHistoryTimeWindow": "PT20S", "RequiresDuplicateDetection": true},
          "Subscriptions": [{"Name": "subscription.1", "Properties": {"DeadLetteringOnMessageExpiration": true,
              "DefaultMessageTimeToLive": "PT2H", "LockDuration": "PT1M", "MaxDeliveryCount": 3,
              "ForwardDeadLetteredMessagesTo": "", "ForwardTo": "", "RequiresSession": true},
            "Rules": [{"Name": "app-prop-filter-1", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {
              "ContentType": "application/text", "CorrelationId": "id1", "Label": "subject1", "MessageId": "msgid1",
              "ReplyTo": "someQueue", "ReplyToSessionId": "sessionId", "SessionId": "session1", "To": "xyz",
              "Properties": {"prop3": "value3", "n": 2, "f": 1.5, "b": true}}}}]},
            {"Name": "subscription.2", "Rules": [{"Name": "$Default", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}]}]}]"#,
    );
    let config = read(&json).unwrap();
    let (name, q) = &config.queues[0];
    assert_eq!(name, "queue.1");
    assert_eq!(
        (q.lock_duration, q.max_delivery_count, q.duplicate_detection, q.default_ttl),
        (Duration::from_secs(60), 3, None, Some(Duration::from_secs(3600)))
    );
    let t = &config.topics[0];
    assert_eq!((t.name.as_str(), t.duplicate_detection), ("topic.1", Some(Duration::from_secs(20))));
    let s = &t.subscriptions[0];
    assert!(s.queue.requires_session && s.queue.dead_letter_on_expiry);
    assert_eq!(s.queue.default_ttl, Some(Duration::from_secs(3600)), "the topic's shorter time to live wins");
    let Filter::Correlation(c) = &s.rules[0].filter else { panic!("a correlation filter") };
    assert_eq!((c.subject.as_deref(), c.reply_to_session_id.as_deref()), (Some("subject1"), Some("sessionId")));
    assert_eq!(
        c.properties,
        [
            ("b".to_owned(), PropertyValue::Bool(true)),
            ("f".to_owned(), PropertyValue::Float(1.5)),
            ("n".to_owned(), PropertyValue::Int(2)),
            ("prop3".to_owned(), PropertyValue::String("value3".into())),
        ]
    );
    assert_eq!(t.subscriptions[1].rules[0].filter, Filter::True);
}

#[test]
fn queue_properties_map_or_are_refused_by_name() {
    let ok = |props: &str| read(&queue_with(props)).map(|c| c.queues[0].1.clone());
    let q = ok(r#""RequiresDuplicateDetection": true"#).unwrap();
    assert_eq!(q.duplicate_detection, Some(Duration::from_secs(600)), "Service Bus's default window");
    let q = ok(r#""RequiresDuplicateDetection": true, "DuplicateDetectionHistoryTimeWindow": "PT1M""#).unwrap();
    assert_eq!(q.duplicate_detection, Some(Duration::from_secs(60)));
    let q = ok(r#""DuplicateDetectionHistoryTimeWindow": "PT1M""#).unwrap();
    assert_eq!(q.duplicate_detection, None, "a window without RequiresDuplicateDetection is off");
    let q = ok(r#""DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S""#).unwrap();
    assert_eq!(q.default_ttl, None, "TimeSpan.MaxValue is forever");
    let refused = |props: &str, needle: &str| {
        let err = ok(props).unwrap_err();
        assert!(err.contains("queue q") && err.contains(needle), "{props}: {err}");
    };
    refused(r#""ForwardTo": "other""#, "ForwardTo is not modelled");
    refused(r#""ForwardDeadLetteredMessagesTo": "other""#, "ForwardDeadLetteredMessagesTo is not modelled");
    refused(r#""EnablePartitioning": true"#, "EnablePartitioning is not supported");
    refused(r#""MaxDeliveryCount": 0"#, "MaxDeliveryCount must be");
    refused(r#""LockDuration": "PT0S""#, "LockDuration must be a positive");
    refused(r#""LockDuration": "1 minute""#, "LockDuration must be an ISO 8601");
    refused(r#""RequiresSession": "yes""#, "RequiresSession must be true or false");
}

#[test]
fn rules_it_cannot_evaluate_are_refused_by_name() {
    let refused = |sub: &str, needle: &str| {
        let err = read(&subscription_with(sub)).unwrap_err();
        assert!(err.contains(needle), "{sub}: {err}");
    };
    let rule = |props: &str| format!(r#""Rules": [{{"Name": "r", "Properties": {{{props}}}}}]"#);
    refused(
        &rule(r#""FilterType": "Sql", "SqlFilter": {"SqlExpression": "region = 'eu'"}"#),
        "rule r: test-servicebus does not evaluate",
    );
    refused(
        &rule(
            r#""FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"SqlExpression": "SET sys.To = 'x'"}"#,
        ),
        "rule actions are not modelled",
    );
    refused(&rule(r#""FilterType": "Boolean""#), "FilterType must be");
    refused(&rule(r#""FilterType": "Correlation""#), "needs CorrelationFilter");
    refused(
        &rule(r#""FilterType": "Correlation", "CorrelationFilter": {"Colour": "red"}"#),
        "unknown CorrelationFilter field",
    );
    refused(
        r#""Properties": {"RequiresDuplicateDetection": true}"#,
        "subscription t/s: property RequiresDuplicateDetection",
    );
    let ok =
        read(&subscription_with(&rule(r#""FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {}"#)));
    assert!(ok.is_ok(), "an empty action is no action: {ok:?}");
    let none = read(&subscription_with(r#""Properties": {}"#)).unwrap();
    assert!(none.topics[0].subscriptions[0].rules.is_empty(), "no rules: the broker adds $Default");
}

#[test]
fn the_file_shape_is_checked() {
    let refused = |json: &str, needle: &str| {
        let err = read(json).unwrap_err();
        assert!(err.contains(needle), "{json}: {err}");
    };
    refused("{", "not valid JSON");
    refused("{}", "no UserConfig");
    refused(r#"{"UserConfig": {"Namespaces": []}}"#, "exactly one");
    refused(r#"{"UserConfig": {"Namespaces": [{"Name": "a"}, {"Name": "b"}]}}"#, "exactly one");
    refused(&namespace(r#""Queues": [{"Properties": {}}]"#), "a queue has no Name");
    refused(&namespace(r#""Queues": {}"#), "must be a JSON array");
    refused(&namespace(r#""Queues": [], "Eventhubs": []"#), "Eventhubs is not supported");
    refused(r#"{"UserConfig": {"Namespaces": [{"Name": "a"}], "Telemetry": {}}}"#, "Telemetry is not supported");
}

#[test]
fn iso_durations() {
    let check = |text: &str, want: Option<f64>| {
        assert_eq!(iso_duration(text).map(|d| d.as_secs_f64()), want, "{text}");
    };
    check("PT1M", Some(60.0));
    check("PT20S", Some(20.0));
    check("PT0.5S", Some(0.5));
    check("P1DT2H3M4S", Some(93_784.0));
    check("P14D", Some(1_209_600.0));
    check("PT1H30M", Some(5400.0));
    check("PT", None);
    check("P", None);
    check("1M", None);
    check("PT1M2H", None);
    check("PT-1S", None);
    check("P1Y", None);
}

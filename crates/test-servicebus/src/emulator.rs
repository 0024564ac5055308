//! Microsoft's Service Bus emulator configuration (`Config.json`, as the emulator and
//! .NET Aspire write it): `UserConfig.Namespaces[]` with `Queues` and `Topics` (their
//! `Subscriptions` and `Rules`), and `Logging`. Every property the broker honours is
//! mapped; an unknown or unsupported one is refused with the entity and property
//! named, so a configuration never runs with a setting silently dropped. `Logging`
//! and the namespace's name are read and ignored (this broker logs to stderr and has
//! one namespace).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::BrokerConfig;
use crate::queue::QueueConfig;
use crate::rules::{CorrelationFilter, Filter, PropertyValue, Rule, SubscriptionConfig, TopicConfig, sql_filter};

/// Service Bus's duplicate detection window when none is given.
const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(600);
/// Longer than this is forever (`TimeSpan.MaxValue` is how configurations say it).
const FOREVER: Duration = Duration::from_secs(3650 * 86_400);

/// Read an emulator `Config.json` into `base` (its queues and topics are added).
///
/// # Errors
/// The JSON is malformed, or names something this broker does not model (the
/// message names the entity and property).
pub fn read_emulator_config(json: &str, mut base: BrokerConfig) -> Result<BrokerConfig, String> {
    let root: Value = serde_json::from_str(json).map_err(|e| format!("Config.json is not valid JSON: {e}"))?;
    let user = object(&root, "the file")?;
    only(user, "the file", &["UserConfig"])?;
    let user = object(user.get("UserConfig").ok_or("Config.json has no UserConfig")?, "UserConfig")?;
    only(user, "UserConfig", &["Namespaces", "Logging"])?;
    let namespaces = array(user.get("Namespaces"), "UserConfig.Namespaces")?;
    if namespaces.len() != 1 {
        return Err(format!(
            "UserConfig.Namespaces has {} namespaces; test-servicebus serves exactly one",
            namespaces.len()
        ));
    }
    let ns = object(&namespaces[0], "the namespace")?;
    only(ns, "the namespace", &["Name", "Queues", "Topics"])?;
    for q in array(ns.get("Queues"), "Queues")? {
        let q = object(q, "a queue")?;
        let name = name_of(q, "a queue")?;
        let what = format!("queue {name}");
        only(q, &what, &["Name", "Properties"])?;
        let (config, _) = entity_properties(q.get("Properties"), &what, QUEUE_PROPERTIES)?;
        base.queues.push((name, config));
    }
    for t in array(ns.get("Topics"), "Topics")? {
        base.topics.push(topic(object(t, "a topic")?)?);
    }
    Ok(base)
}

const QUEUE_PROPERTIES: &[&str] = &[
    "DeadLetteringOnMessageExpiration",
    "DefaultMessageTimeToLive",
    "DuplicateDetectionHistoryTimeWindow",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "LockDuration",
    "MaxDeliveryCount",
    "RequiresDuplicateDetection",
    "RequiresSession",
];
const TOPIC_PROPERTIES: &[&str] =
    &["DefaultMessageTimeToLive", "DuplicateDetectionHistoryTimeWindow", "RequiresDuplicateDetection"];
const SUBSCRIPTION_PROPERTIES: &[&str] = &[
    "DeadLetteringOnMessageExpiration",
    "DefaultMessageTimeToLive",
    "ForwardDeadLetteredMessagesTo",
    "ForwardTo",
    "LockDuration",
    "MaxDeliveryCount",
    "RequiresSession",
];

fn topic(t: &Map<String, Value>) -> Result<TopicConfig, String> {
    let name = name_of(t, "a topic")?;
    let what = format!("topic {name}");
    only(t, &what, &["Name", "Properties", "Subscriptions"])?;
    let (props, dedup) = entity_properties(t.get("Properties"), &what, TOPIC_PROPERTIES)?;
    let mut subscriptions = Vec::new();
    for s in array(t.get("Subscriptions"), &format!("{what}: Subscriptions"))? {
        let s = object(s, "a subscription")?;
        let sub_name = name_of(s, "a subscription")?;
        let what = format!("subscription {name}/{sub_name}");
        only(s, &what, &["Name", "Properties", "Rules"])?;
        let (mut queue, _) = entity_properties(s.get("Properties"), &what, SUBSCRIPTION_PROPERTIES)?;
        // A message lives no longer than its topic or its subscription allows.
        queue.default_ttl = match (queue.default_ttl, props.default_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut rules = Vec::new();
        for r in array(s.get("Rules"), &format!("{what}: Rules"))? {
            rules.push(rule(object(r, "a rule")?, &what)?);
        }
        subscriptions.push(SubscriptionConfig { name: sub_name, queue, rules });
    }
    Ok(TopicConfig { name, duplicate_detection: dedup, subscriptions })
}

fn rule(r: &Map<String, Value>, owner: &str) -> Result<Rule, String> {
    let name = name_of(r, &format!("{owner}: a rule"))?;
    let what = format!("{owner}, rule {name}");
    only(r, &what, &["Name", "Properties"])?;
    let empty = Map::new();
    let p = match r.get("Properties") {
        Some(v) => object(v, &format!("{what}: Properties"))?,
        None => &empty,
    };
    only(p, &what, &["FilterType", "CorrelationFilter", "SqlFilter", "Action"])?;
    if let Some(action) = p.get("Action") {
        let sql = action.get("SqlExpression").and_then(Value::as_str).unwrap_or("");
        if !sql.trim().is_empty() || action.as_object().is_some_and(|a| a.keys().any(|k| k != "SqlExpression")) {
            return Err(format!("{what}: rule actions are not modelled by test-servicebus (Action {action})"));
        }
    }
    let filter = match p.get("FilterType").and_then(Value::as_str) {
        Some("Correlation") => correlation(p.get("CorrelationFilter"), &what)?,
        Some("Sql") => {
            let sql = p
                .get("SqlFilter")
                .and_then(|f| f.get("SqlExpression"))
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{what}: FilterType Sql needs SqlFilter.SqlExpression"))?;
            sql_filter(sql).map_err(|e| format!("{what}: {e}"))?
        }
        other => return Err(format!("{what}: FilterType must be \"Correlation\" or \"Sql\", got {other:?}")),
    };
    Ok(Rule { name, filter })
}

fn correlation(v: Option<&Value>, what: &str) -> Result<Filter, String> {
    let c = object(v.ok_or_else(|| format!("{what}: FilterType Correlation needs CorrelationFilter"))?, what)?;
    let mut f = CorrelationFilter::default();
    for (key, value) in c {
        let text = || {
            value.as_str().map(str::to_owned).ok_or_else(|| format!("{what}: CorrelationFilter.{key} must be a string"))
        };
        match key.as_str() {
            "CorrelationId" => f.correlation_id = Some(text()?),
            "MessageId" => f.message_id = Some(text()?),
            "To" => f.to = Some(text()?),
            "ReplyTo" => f.reply_to = Some(text()?),
            "Label" | "Subject" => f.subject = Some(text()?),
            "SessionId" => f.session_id = Some(text()?),
            "ReplyToSessionId" => f.reply_to_session_id = Some(text()?),
            "ContentType" => f.content_type = Some(text()?),
            "Properties" => {
                for (name, v) in object(value, &format!("{what}: CorrelationFilter.Properties"))? {
                    let pv = match v {
                        Value::String(s) => PropertyValue::String(s.clone()),
                        Value::Bool(b) => PropertyValue::Bool(*b),
                        Value::Number(n) => match n.as_i64() {
                            Some(i) => PropertyValue::Int(i),
                            None => PropertyValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                        },
                        other => {
                            return Err(format!(
                                "{what}: property {name} has a value this broker cannot compare: {other}"
                            ));
                        }
                    };
                    f.properties.push((name.clone(), pv));
                }
            }
            other => return Err(format!("{what}: unknown CorrelationFilter field {other:?}")),
        }
    }
    Ok(Filter::Correlation(Box::new(f)))
}

/// An entity's properties: its queue behaviour and its duplicate detection window.
fn entity_properties(v: Option<&Value>, what: &str, known: &[&str]) -> Result<(QueueConfig, Option<Duration>), String> {
    let mut config = QueueConfig::default();
    let Some(v) = v else { return Ok((config, None)) };
    let p = object(v, &format!("{what}: Properties"))?;
    let mut dedup = false;
    let mut window = None;
    for (key, value) in p {
        if !known.contains(&key.as_str()) {
            return Err(format!(
                "{what}: property {key} is not supported by test-servicebus (known: {})",
                known.join(", ")
            ));
        }
        let bad = |want: &str| format!("{what}: {key} must be {want}, got {value}");
        let flag = || value.as_bool().ok_or_else(|| bad("true or false"));
        let span = || value.as_str().and_then(iso_duration).ok_or_else(|| bad("an ISO 8601 duration such as \"PT1M\""));
        match key.as_str() {
            "DeadLetteringOnMessageExpiration" => config.dead_letter_on_expiry = flag()?,
            "RequiresSession" => config.requires_session = flag()?,
            "RequiresDuplicateDetection" => dedup = flag()?,
            "DuplicateDetectionHistoryTimeWindow" => window = Some(span()?),
            "DefaultMessageTimeToLive" => config.default_ttl = Some(span()?).filter(|d| *d < FOREVER),
            "LockDuration" => {
                config.lock_duration = span()?;
                if config.lock_duration.is_zero() {
                    return Err(bad("a positive duration"));
                }
            }
            "MaxDeliveryCount" => {
                config.max_delivery_count = value
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("a whole number from 1"))?;
            }
            "ForwardTo" | "ForwardDeadLetteredMessagesTo" => {
                if value.as_str().is_none_or(|s| !s.is_empty()) {
                    return Err(format!(
                        "{what}: {key} is not modelled by test-servicebus (only \"\" is accepted), got {value}"
                    ));
                }
            }
            _ => return Err(format!("{what}: property {key} is not supported by test-servicebus")),
        }
    }
    let window = dedup.then(|| window.unwrap_or(DEFAULT_DEDUP_WINDOW)).filter(|w| !w.is_zero());
    config.duplicate_detection = window;
    Ok((config, window))
}

/// An ISO 8601 duration of days, hours, minutes and seconds (`P1DT2H3M4.5S`, `PT20S`).
pub(crate) fn iso_duration(text: &str) -> Option<Duration> {
    let rest = text.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut secs = 0f64;
    let mut any = false;
    let mut add = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut rest = part;
        for (unit, scale) in units {
            if let Some(i) = rest.find(*unit) {
                let n: f64 = rest[..i].parse().ok()?;
                if !n.is_finite() || n < 0.0 {
                    return None;
                }
                secs += n * scale;
                any = true;
                rest = &rest[i + 1..];
            }
        }
        rest.is_empty().then_some(())
    };
    add(days, &[('D', 86_400.0)])?;
    if let Some(t) = time {
        if t.is_empty() {
            return None;
        }
        add(t, &[('H', 3600.0), ('M', 60.0), ('S', 1.0)])?;
    }
    // Anything past a century is forever to a test broker.
    (any && secs.is_finite()).then(|| Duration::from_secs_f64(secs.min(100.0 * 365.0 * 86_400.0)))
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| format!("{what} must be a JSON object, got {v}"))
}

fn array<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a [Value], String> {
    match v {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(format!("{what} must be a JSON array, got {other}")),
    }
}

fn name_of(m: &Map<String, Value>, what: &str) -> Result<String, String> {
    m.get("Name").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| format!("{what} has no Name"))
}

/// Refuse keys other than `allowed` (a typo must not be dropped silently).
fn only(m: &Map<String, Value>, what: &str, allowed: &[&str]) -> Result<(), String> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("{what}: {k} is not supported by test-servicebus (known: {})", allowed.join(", "))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

//! Topics and the rules of their subscriptions: a message sent to a topic is copied
//! to each subscription that has a rule whose filter matches it. Filters modelled:
//! the true filter (SQL `1=1`, Service Bus's default rule), the false filter (SQL
//! `1=0`) and correlation filters (system properties and application properties,
//! compared for equality). Any other SQL is refused when the broker starts, since a
//! filter we cannot evaluate would silently route wrong.

use std::time::Duration;

use fe2o3_amqp_types::messaging::MessageId;
use fe2o3_amqp_types::primitives::SimpleValue;

use crate::message::{StoredMessage, id_string};
use crate::queue::QueueConfig;

/// An application property value a correlation filter compares with.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyValue {
    /// A string.
    String(String),
    /// A whole number (any AMQP integer type compares equal by value).
    Int(i64),
    /// A number with a fraction (float or double).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// A correlation filter: every field given must equal the message's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CorrelationFilter {
    /// `properties.correlation-id`.
    pub correlation_id: Option<String>,
    /// `properties.message-id`.
    pub message_id: Option<String>,
    /// `properties.to`.
    pub to: Option<String>,
    /// `properties.reply-to`.
    pub reply_to: Option<String>,
    /// `properties.subject` (Service Bus's label).
    pub subject: Option<String>,
    /// `properties.group-id` (the session id).
    pub session_id: Option<String>,
    /// `properties.reply-to-group-id`.
    pub reply_to_session_id: Option<String>,
    /// `properties.content-type`.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Vec<(String, PropertyValue)>,
}

/// What a rule matches.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Every message (SQL `1=1`).
    True,
    /// No message (SQL `1=0`).
    False,
    /// Messages whose fields equal the filter's.
    Correlation(Box<CorrelationFilter>),
}

/// A subscription rule (no actions: a rule with an action is refused at start).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name.
    pub name: String,
    /// Its filter.
    pub filter: Filter,
}

impl Rule {
    /// The rule Service Bus gives a subscription created without one.
    #[must_use]
    pub fn default_rule() -> Rule {
        Rule { name: "$Default".to_owned(), filter: Filter::True }
    }
}

/// A subscription of a topic.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionConfig {
    /// Its name (the address is `<topic>/Subscriptions/<name>`).
    pub name: String,
    /// How its queue of messages behaves.
    pub queue: QueueConfig,
    /// Its rules; a message is copied once when any matches.
    pub rules: Vec<Rule>,
}

/// A topic and its subscriptions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicConfig {
    /// Its name.
    pub name: String,
    /// Duplicate detection window of the topic; `None`: off.
    pub duplicate_detection: Option<Duration>,
    /// Its subscriptions.
    pub subscriptions: Vec<SubscriptionConfig>,
}

/// The filter a SQL expression stands for, if this broker can evaluate it.
///
/// # Errors
/// Any SQL other than `1=1` and `1=0` (spaces aside).
pub fn sql_filter(expression: &str) -> Result<Filter, String> {
    let compact: String = expression.chars().filter(|c| !c.is_whitespace()).collect();
    match compact.as_str() {
        "1=1" => Ok(Filter::True),
        "1=0" => Ok(Filter::False),
        _ => Err(format!(
            "test-servicebus does not evaluate the SQL filter {expression:?} (only 1=1 and 1=0; use a correlation filter)"
        )),
    }
}

impl Filter {
    /// Whether `message` matches.
    pub(crate) fn matches(&self, message: &StoredMessage) -> bool {
        match self {
            Filter::True => true,
            Filter::False => false,
            Filter::Correlation(c) => c.matches(message),
        }
    }
}

impl CorrelationFilter {
    fn matches(&self, message: &StoredMessage) -> bool {
        let p = message.properties.as_ref();
        let same = |want: &Option<String>, got: Option<String>| want.as_ref().is_none_or(|w| got.as_deref() == Some(w));
        let id = |m: Option<&MessageId>| m.map(id_string);
        let address = |a: Option<&String>| a.cloned();
        let fields_match = same(&self.correlation_id, id(p.and_then(|p| p.correlation_id.as_ref())))
            && same(&self.message_id, id(p.and_then(|p| p.message_id.as_ref())))
            && same(&self.to, address(p.and_then(|p| p.to.as_ref())))
            && same(&self.reply_to, address(p.and_then(|p| p.reply_to.as_ref())))
            && same(&self.subject, p.and_then(|p| p.subject.clone()))
            && same(&self.session_id, p.and_then(|p| p.group_id.clone()))
            && same(&self.reply_to_session_id, p.and_then(|p| p.reply_to_group_id.clone()))
            && same(&self.content_type, p.and_then(|p| p.content_type.as_ref().map(|s| s.0.clone())));
        fields_match
            && self.properties.iter().all(|(name, want)| {
                let got = message.application_properties.as_ref().and_then(|ap| ap.0.get(name));
                got.is_some_and(|v| equals(want, v))
            })
    }
}

/// Whether an application property value equals what a filter wants.
fn equals(want: &PropertyValue, got: &SimpleValue) -> bool {
    let int = match got {
        SimpleValue::Byte(n) => Some(i64::from(*n)),
        SimpleValue::Short(n) => Some(i64::from(*n)),
        SimpleValue::Int(n) => Some(i64::from(*n)),
        SimpleValue::Long(n) => Some(*n),
        SimpleValue::Ubyte(n) => Some(i64::from(*n)),
        SimpleValue::Ushort(n) => Some(i64::from(*n)),
        SimpleValue::Uint(n) => Some(i64::from(*n)),
        SimpleValue::Ulong(n) => i64::try_from(*n).ok(),
        _ => None,
    };
    let float = match got {
        SimpleValue::Float(f) => Some(f64::from(f.into_inner())),
        SimpleValue::Double(f) => Some(f.into_inner()),
        _ => int.map(|n| n as f64),
    };
    match (want, got) {
        (PropertyValue::String(w), SimpleValue::String(g)) => w == g,
        (PropertyValue::Bool(w), SimpleValue::Bool(g)) => w == g,
        (PropertyValue::Int(w), _) => int == Some(*w) || float == Some(*w as f64),
        (PropertyValue::Float(w), _) => float == Some(*w),
        _ => false,
    }
}

/// A topic as the broker keeps it: its duplicate detection and, per subscription,
/// the key of its queue and its rules.
#[derive(Debug)]
pub(crate) struct Topic {
    pub(crate) name: String,
    pub(crate) dedup: Option<crate::queue::Dedup>,
    pub(crate) subscriptions: Vec<(String, Vec<Rule>)>,
    /// Scheduled sends by the topic's sequence number: each copy's subscription and
    /// sequence number there (a cancel cancels every copy).
    pub(crate) scheduled: std::collections::HashMap<i64, Vec<(String, i64)>>,
    pub(crate) next_sequence: i64,
}

impl Topic {
    /// The keys of the subscriptions `message` goes to.
    pub(crate) fn routes(&self, message: &StoredMessage) -> Vec<String> {
        self.subscriptions
            .iter()
            .filter(|(_, rules)| rules.iter().any(|r| r.filter.matches(message)))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// The key of a subscription's queue: `<topic>/subscriptions/<name>`, lower case.
pub(crate) fn subscription_key(topic: &str, name: &str) -> String {
    format!("{topic}/subscriptions/{name}").to_ascii_lowercase()
}

#[cfg(test)]
mod tests;

//! What a broker is started with, and the `--queue NAME[:max-delivery=N,lock-secs=S,dedup-secs=D]`
//! grammar the binary and tests share.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::queue::QueueConfig;
use crate::rules::TopicConfig;

/// The shared access policy Microsoft's emulator has.
pub const DEFAULT_KEY_NAME: &str = "RootManageSharedAccessKey";
/// The key Microsoft's emulator documents (`SAS_KEY_VALUE`).
pub const DEFAULT_KEY: &str = "SAS_KEY_VALUE";

/// How to start a [`Broker`](crate::Broker).
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    /// Address to listen on (loopback by default).
    pub address: IpAddr,
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// The one shared access policy: its name.
    pub key_name: String,
    /// Its key (SAS tokens are signed with it; SASL PLAIN with name and key is accepted too).
    pub key: String,
    /// Queues that exist from the start (more can be created later).
    pub queues: Vec<(String, QueueConfig)>,
    /// Topics with their subscriptions and rules.
    pub topics: Vec<TopicConfig>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            key_name: DEFAULT_KEY_NAME.to_owned(),
            key: DEFAULT_KEY.to_owned(),
            queues: Vec::new(),
            topics: Vec::new(),
        }
    }
}

impl BrokerConfig {
    /// Add a queue.
    #[must_use]
    pub fn queue(mut self, name: impl Into<String>, config: QueueConfig) -> Self {
        self.queues.push((name.into(), config));
        self
    }

    /// Add a topic.
    #[must_use]
    pub fn topic(mut self, topic: TopicConfig) -> Self {
        self.topics.push(topic);
        self
    }
}

/// Whether `name` can be a queue: 1 to 260 letters, digits, `.`, `-`, `_` and `/`
/// (not at either end), as Service Bus allows.
pub fn check_queue_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/');
    if name.is_empty() || name.len() > 260 {
        return Err(format!("queue name {name:?} must be 1 to 260 characters"));
    }
    if !name.chars().all(ok_char) || name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Err(format!(
            "queue name {name:?} may hold only letters, digits, '.', '-', '_' and inner '/' (a '$' names a sub-queue)"
        ));
    }
    Ok(())
}

/// Parse `NAME[:max-delivery=N,lock-secs=S,dedup-secs=D]` (seconds may have a
/// fraction; `dedup-secs=0` is off).
pub fn parse_queue_spec(spec: &str) -> Result<(String, QueueConfig), String> {
    let (name, options) = spec.split_once(':').unwrap_or((spec, ""));
    check_queue_name(name)?;
    let mut config = QueueConfig::default();
    for option in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (key, value) =
            option.split_once('=').ok_or_else(|| format!("queue {name}: option {option:?} is not key=value"))?;
        match key.trim() {
            "max-delivery" => {
                config.max_delivery_count = match value.trim().parse::<u32>() {
                    Ok(n) if n >= 1 => n,
                    _ => {
                        return Err(format!("queue {name}: max-delivery must be a whole number from 1, got {value:?}"));
                    }
                }
            }
            "lock-secs" => {
                config.lock_duration = seconds(value).filter(|d| !d.is_zero()).ok_or_else(|| {
                    format!("queue {name}: lock-secs must be a positive number of seconds, got {value:?}")
                })?;
            }
            "dedup-secs" => {
                let window = seconds(value)
                    .ok_or_else(|| format!("queue {name}: dedup-secs must be a number of seconds, got {value:?}"))?;
                config.duplicate_detection = (!window.is_zero()).then_some(window);
            }
            other => {
                return Err(format!(
                    "queue {name}: unknown option {other:?} (known: max-delivery, lock-secs, dedup-secs)"
                ));
            }
        }
    }
    Ok((name.to_owned(), config))
}

/// Non-negative seconds, with a fraction, up to a day.
fn seconds(value: &str) -> Option<Duration> {
    let v: f64 = value.trim().parse().ok()?;
    (v.is_finite() && (0.0..=86_400.0).contains(&v)).then(|| Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(spec: &str, want: Result<(&str, u32, u64, Option<u64>), &str>) {
        let got = parse_queue_spec(spec).map(|(n, c)| {
            (
                n,
                c.max_delivery_count,
                c.lock_duration.as_millis() as u64,
                c.duplicate_detection.map(|d| d.as_millis() as u64),
            )
        });
        match want {
            Ok((n, max, lock, dedup)) => assert_eq!(got, Ok((n.to_owned(), max, lock, dedup)), "{spec}"),
            Err(needle) => {
                let err = got.expect_err(spec);
                assert!(err.contains(needle), "{spec}: {err}");
            }
        }
    }

    #[test]
    fn queue_specs() {
        check("requests", Ok(("requests", 10, 60_000, None)));
        check("requests:", Ok(("requests", 10, 60_000, None)));
        check("a.b-c_d/e:max-delivery=3,lock-secs=0.5,dedup-secs=60", Ok(("a.b-c_d/e", 3, 500, Some(60_000))));
        check("q:dedup-secs=0", Ok(("q", 10, 60_000, None)));
        check("q: lock-secs = 2 ", Ok(("q", 10, 2_000, None)));
        check("", Err("1 to 260"));
        check("q$x", Err("may hold only"));
        check("/q", Err("may hold only"));
        check("q:max-delivery=0", Err("max-delivery"));
        check("q:lock-secs=0", Err("lock-secs"));
        check("q:lock-secs=-1", Err("lock-secs"));
        check("q:lock-secs=NaN", Err("lock-secs"));
        check("q:dedup-secs=x", Err("dedup-secs"));
        check("q:ttl=5", Err("unknown option \"ttl\""));
        check("q:lock-secs", Err("not key=value"));
    }
}

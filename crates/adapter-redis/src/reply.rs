//! Reading replies: the shapes the scripts and pipelines return. `None` means "not
//! the shape drain writes", which the callers turn into a `Protocol` error.

use std::time::Duration;

use drain_core::LeaseToken;
use drain_core::ports::{Acquire, ClaimState, OwnerClaim};
use redis::Value;

use crate::store::Scanned;

/// `GET` + `PTTL` of one key: `Some(None)` when absent, `None` for a non-string.
pub(crate) fn holding(get: &Value, pttl: &Value) -> Option<Option<Scanned>> {
    let value = match get {
        Value::Nil => return Some(None),
        other => text(other)?,
    };
    let remaining = match pttl {
        // Expired between the two reads: it was there, with nothing left.
        Value::Int(-2) => Some(Duration::ZERO),
        Value::Int(ms) => u64::try_from(*ms).ok().map(Duration::from_millis),
        _ => return None,
    };
    Some(Some(Scanned { value, remaining }))
}

/// A held lease's time left from its key's TTL: `None` when it expired between the
/// reads (it is free now); a key without a TTL (written by hand, never by drain)
/// never expires: [`Duration::MAX`].
pub(crate) fn remaining(ttl: Option<Duration>) -> Option<Duration> {
    match ttl {
        None => Some(Duration::MAX),
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
    }
}

/// What a peek of an owner's claim key found.
pub(crate) fn owner_claim(read: Option<Scanned>) -> OwnerClaim {
    match read.and_then(|s| Some((remaining(s.remaining)?, s.value))) {
        Some((remaining, value)) => OwnerClaim::Busy { holder: LeaseToken::holder_of(&value).to_owned(), remaining },
        None => OwnerClaim::Free,
    }
}

/// A fence counter read with `GET`: a missing key is 0 (never taken).
pub(crate) fn counter(v: &Value) -> Option<u64> {
    match v {
        Value::Nil => Some(0),
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// The acquire script's fence (an integer) or `{holder_token, pttl}`.
pub(crate) fn acquire(v: &Value) -> Option<Acquire> {
    let items = match v {
        Value::Int(fence) => return Some(Acquire::Acquired { fence: u64::try_from(*fence).ok()? }),
        Value::Array(items) => items,
        _ => return None,
    };
    match items.as_slice() {
        [token, Value::Int(pttl)] => Some(Acquire::Busy {
            holder: LeaseToken::holder_of(&text(token)?).to_owned(),
            // No TTL (-1): a key written by hand; it holds until someone deletes it.
            remaining: u64::try_from(*pttl).map_or(Duration::MAX, |ms| Duration::from_millis(ms.max(1))),
        }),
        _ => None,
    }
}

/// A script's `1` / `0`.
pub(crate) fn flag(v: &Value) -> Option<bool> {
    match v {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}

/// One element of the claim script's reply: `1` (claimed now) or the value found.
pub(crate) fn claim_state(v: &Value) -> Option<ClaimState> {
    if let Value::Int(1) = v {
        return Some(ClaimState::Claimed);
    }
    let found = text(v)?;
    if found == "done" || found.starts_with("done:") {
        return Some(ClaimState::Done);
    }
    let holder = found.strip_prefix("pending:").map_or(found.as_str(), LeaseToken::holder_of);
    Some(ClaimState::PendingElsewhere { holder: holder.to_owned() })
}

/// An array reply of exactly `n` elements.
pub(crate) fn array(v: Value, n: usize) -> Option<Vec<Value>> {
    match v {
        Value::Array(items) if items.len() == n => Some(items),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `(host, port)` of every reachable primary in a `CLUSTER NODES` reply.
pub(crate) fn cluster_primaries(nodes: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else { continue };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|f| matches!(*f, "fail" | "fail?" | "noaddr" | "handshake")) {
            continue;
        }
        // `ip:port@cport[,hostname]`
        let addr = addr.split(['@', ',']).next().unwrap_or_default();
        if let Some((host, port)) = addr.rsplit_once(':')
            && let Ok(port) = port.parse()
        {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            out.push((host.to_owned(), port));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn holdings() {
        assert_eq!(holding(&Value::Nil, &Value::Int(-2)), Some(None));
        assert_eq!(
            holding(&bulk("v"), &Value::Int(1500)),
            Some(Some(Scanned { value: "v".into(), remaining: Some(Duration::from_millis(1500)) }))
        );
        assert_eq!(holding(&bulk("v"), &Value::Int(-1)), Some(Some(Scanned { value: "v".into(), remaining: None })));
        assert_eq!(
            holding(&bulk("v"), &Value::Int(-2)),
            Some(Some(Scanned { value: "v".into(), remaining: Some(Duration::ZERO) }))
        );
        assert_eq!(holding(&Value::Int(3), &Value::Int(-1)), None);
    }

    #[test]
    fn acquires() {
        let a = |items: Vec<Value>| acquire(&Value::Array(items));
        assert_eq!(acquire(&Value::Int(7)), Some(Acquire::Acquired { fence: 7 }));
        assert_eq!(acquire(&Value::Int(-1)), None, "a fence is never negative");
        assert_eq!(
            a(vec![bulk("host-1:abc"), Value::Int(900)]),
            Some(Acquire::Busy { holder: "host-1".into(), remaining: Duration::from_millis(900) })
        );
        assert_eq!(
            a(vec![bulk("x:y"), Value::Int(-1)]),
            Some(Acquire::Busy { holder: "x".into(), remaining: Duration::MAX })
        );
        assert_eq!(a(vec![Value::Int(1), Value::Int(7)]), None, "the old shape is not taken for a holder");
        assert_eq!(a(vec![bulk("x:y")]), None);
        assert_eq!(acquire(&Value::Nil), None);
    }

    #[test]
    fn owner_claims_and_fences() {
        let held =
            |v: &str, ttl: Option<u64>| Some(Scanned { value: v.into(), remaining: ttl.map(Duration::from_millis) });
        assert_eq!(owner_claim(None), OwnerClaim::Free);
        assert_eq!(
            owner_claim(held("w-1:ab", Some(900))),
            OwnerClaim::Busy { holder: "w-1".into(), remaining: Duration::from_millis(900) }
        );
        assert_eq!(owner_claim(held("w-1:ab", Some(0))), OwnerClaim::Free, "expired between the reads");
        assert_eq!(
            owner_claim(held("hand", None)),
            OwnerClaim::Busy { holder: "hand".into(), remaining: Duration::MAX }
        );
        assert_eq!(counter(&Value::Nil), Some(0));
        assert_eq!(counter(&bulk("41")), Some(41));
        assert_eq!(counter(&bulk("x")), None);
    }

    #[test]
    fn claims() {
        assert_eq!(claim_state(&Value::Int(1)), Some(ClaimState::Claimed));
        assert_eq!(claim_state(&bulk("done:h:abc")), Some(ClaimState::Done));
        assert_eq!(claim_state(&bulk("done")), Some(ClaimState::Done));
        assert_eq!(
            claim_state(&bulk("pending:host-2:abc")),
            Some(ClaimState::PendingElsewhere { holder: "host-2".into() })
        );
        assert_eq!(claim_state(&Value::Int(0)), None);
        assert_eq!(flag(&Value::Int(1)), Some(true));
        assert_eq!(flag(&Value::Int(0)), Some(false));
        assert_eq!(flag(&Value::Nil), None);
    }

    #[test]
    fn primaries() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7002@17002 master,fail - 0 0 3 connected
d4 127.0.0.1:7003@17003 slave a1 0 0 1 connected
e5 [::1]:7004@17004 master - 0 0 4 connected 10923-16383
";
        assert_eq!(
            cluster_primaries(nodes),
            vec![("127.0.0.1".into(), 7000), ("127.0.0.1".into(), 7001), ("::1".into(), 7004)]
        );
    }
}

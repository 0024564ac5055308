//! Secrets never leave the process in clear: not in `drain config`, logs, errors
//! or panics.

use std::fmt;

/// A value that may contain a secret. `Debug` and `Display` show it redacted.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(value: String) -> Self {
        Secret(value)
    }

    /// The clear value, for the adapter that needs it. Never log this.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", redact(&self.0))
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

const MASK: &str = "***";

/// Redact the secret parts of a URL or connection string: the password of
/// `scheme://user:password@host` (of each URL of a comma-separated seed list), and
/// the values of `SharedAccessKey`, `SharedAccessSignature`, `password`,
/// `AccountKey` and `token` pairs in `key=value;` connection strings and
/// `?key=value&` queries.
pub(crate) fn redact(value: &str) -> String {
    let mut out = urls(value).into_iter().map(redact_userinfo).collect::<Vec<_>>().join(",");
    for key in ["sharedaccesskey", "sharedaccesssignature", "password", "accountkey", "token", "sas", "sig"] {
        out = redact_pairs(&out, key);
    }
    out
}

/// `value` cut at the commas that start another `scheme://` URL (a Redis Cluster
/// seed list); a comma anywhere else, e.g. in a password, stays in its URL.
fn urls(value: &str) -> Vec<&str> {
    let starts_url = |s: &str| {
        let s = s.trim_start();
        s.find("://").is_some_and(|end| {
            let scheme = &s[..end];
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b))
        })
    };
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in value.match_indices(',') {
        if starts_url(&value[i + 1..]) {
            out.push(&value[start..i]);
            start = i + 1;
        }
    }
    out.push(&value[start..]);
    out
}

/// Everything between `://` and the last `@` is user information, even a `/`, `?`,
/// `#` or `,` (a password that was not percent-encoded): over-redacting an odd URL
/// beats printing a password.
fn redact_userinfo(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_owned();
    };
    let rest = &value[scheme_end + 3..];
    let Some(at) = rest.rfind('@') else {
        return value.to_owned();
    };
    let userinfo = &rest[..at];
    let redacted_userinfo = match userinfo.find(':') {
        Some(colon) => format!("{}:{MASK}", &userinfo[..colon]),
        // `redis://secret@host` puts the password in the user part.
        None if !userinfo.is_empty() => MASK.to_owned(),
        None => String::new(),
    };
    format!("{}://{}@{}", &value[..scheme_end], redacted_userinfo, &rest[at + 1..])
}

/// Mask `key=value` up to the next `;`, `&` or end, case-insensitively.
fn redact_pairs(value: &str, key: &str) -> String {
    let lower = value.to_ascii_lowercase();
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    while let Some(found) = lower[i..].find(key) {
        let start = i + found;
        let after = start + key.len();
        let boundary_ok = start == 0 || matches!(lower.as_bytes()[start - 1], b';' | b'&' | b'?' | b' ');
        if boundary_ok && lower.as_bytes().get(after) == Some(&b'=') {
            let value_start = after + 1;
            let value_end = value[value_start..].find([';', '&']).map_or(value.len(), |e| value_start + e);
            out.push_str(&value[i..value_start]);
            out.push_str(MASK);
            i = value_end;
        } else {
            out.push_str(&value[i..after]);
            i = after;
        }
    }
    out.push_str(&value[i..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(input: &str, expected: &str) {
        assert_eq!(redact(input), expected);
    }

    #[test]
    fn urls_and_connection_strings() {
        check("redis://127.0.0.1:6379", "redis://127.0.0.1:6379");
        check("redis://user:hunter2@host:6379/0", "redis://user:***@host:6379/0");
        check("rediss://:hunter2@host", "rediss://:***@host");
        check("redis://hunter2@host", "redis://***@host");
        check("amqp://guest:guest@127.0.0.1:5672/requests", "amqp://guest:***@127.0.0.1:5672/requests");
        check("amqp://a:p@ss@host/q", "amqp://a:***@host/q");
        check(
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=abc+/=;EntityPath=q",
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=***;EntityPath=q",
        );
        check("endpoint=sb://x/;sharedaccesskey=abc", "endpoint=sb://x/;sharedaccesskey=***");
        check("redis://host/?password=abc&db=1", "redis://host/?password=***&db=1");
        check("SharedAccessSignature=SharedAccessSignature sr=x&sig=y", "SharedAccessSignature=***&sig=***");
        check("no secrets here", "no secrets here");
        // Seed lists: every seed's password (the second one used to show).
        check("redis://u:hunter2@a:1,redis://u:hunter2@b:2", "redis://u:***@a:1,redis://u:***@b:2");
        check("redis://u:hunter2@a:1, rediss://:hunter2@b:2", "redis://u:***@a:1, rediss://:***@b:2");
        // Passwords that were not percent-encoded used to show up to the `/`, `?`, `#`.
        check("redis://u:hun/ter2@h:1/0", "redis://u:***@h:1/0");
        check("redis://u:hun?ter2@h", "redis://u:***@h");
        check("rediss://:hun#ter2@h", "rediss://:***@h");
        check("redis://u:hun,ter2@h", "redis://u:***@h");
        check("amqp://u:p/w@h:5672/q", "amqp://u:***@h:5672/q");
    }

    #[test]
    fn secret_never_prints_clear() {
        let s = Secret::new("redis://u:topsecret@h".into());
        assert!(!format!("{s} {s:?}").contains("topsecret"));
        assert_eq!(s.expose(), "redis://u:topsecret@h");
    }
}

//! Secrets never leave a process in clear: the one redaction every crate uses for
//! URLs and connection strings (in logs, errors, `Debug`, `drain config`, panics),
//! and [`Secret`], the one type that holds a secret. Pure string work: it reads
//! nothing and keeps nothing.

use std::fmt;
use std::ops::Range;

/// A secret: a password, a key, or a URL or connection string that may hold one.
/// `Debug` and `Display` never show it in clear; [`Secret::expose`] is for the code
/// that connects.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    clear: String,
    shown: String,
}

impl Secret {
    /// A value that is secret as a whole (a password, a key, a token): shown as `***`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret { clear: value.into(), shown: MASK.to_owned() }
    }

    /// A URL or connection string: shown with its secret parts masked by
    /// [`redact`], so logs still say where it points.
    pub fn url(value: impl Into<String>) -> Self {
        let clear = value.into();
        let shown = redact(&clear);
        Secret { clear, shown }
    }

    /// The clear value, for the code that connects. Never log this.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.clear
    }

    /// What of it is secret, each also percent-decoded, so that a text quoting one
    /// (a panic message, say) can be [`scrub`]bed even when the URL around it is
    /// gone: the whole value of [`Secret::new`]; of [`Secret::url`], the password of
    /// each URL (the whole user information when it has no `:`) and the value of
    /// each secret `key=value` pair.
    #[must_use]
    pub fn parts(&self) -> Vec<String> {
        if self.shown == MASK { vec![self.clear.clone()] } else { secret_parts(&self.clear) }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", self.shown)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

const MASK: &str = "***";

/// Keys of `key=value` pairs whose value is a secret, lower case.
const SECRET_KEYS: [&str; 9] =
    ["sharedaccesskey", "sharedaccesssignature", "password", "pass", "secret", "accountkey", "token", "sas", "sig"];

/// Redact the secret parts of a URL or connection string: the password of
/// `scheme://user:password@host` (of each URL of a comma-separated seed list), and
/// the values of `SharedAccessKey`, `SharedAccessSignature`, `password`,
/// `AccountKey`, `token`, `pass`, `secret`, `sas` and `sig` pairs in `key=value;`
/// connection strings, libpq's `key=value` form and `?key=value&` queries (a
/// pair's value runs to the next `;` or `&`: over-redacting beats printing a
/// password). Idempotent; anything else comes back unchanged.
#[must_use]
pub fn redact(value: &str) -> String {
    let mut out = urls(value).into_iter().map(redact_userinfo).collect::<Vec<_>>().join(",");
    for key in SECRET_KEYS {
        out = redact_pairs(&out, key);
    }
    out
}

/// The secret parts of a URL or connection string, as [`redact`] sees them
/// ([`Secret::parts`]).
fn secret_parts(value: &str) -> Vec<String> {
    let mut parts: Vec<String> =
        urls(value).into_iter().filter_map(|url| password_span(url).map(|span| url[span].to_owned())).collect();
    for key in SECRET_KEYS {
        parts.extend(pair_values(value, key).into_iter().map(|span| value[span].to_owned()));
    }
    let decoded: Vec<String> = parts.iter().filter_map(|p| percent_decoded(p)).collect();
    parts.extend(decoded);
    parts.retain(|p| !p.is_empty());
    parts.sort_unstable();
    parts.dedup();
    parts
}

/// Free `text` (a panic message, say) with every occurrence of each of `secrets`
/// masked (longest first, so a secret that contains another is masked whole), and
/// then each whitespace-separated word [`redact`]ed, which also catches a URL or
/// connection string whose secret was not configured.
#[must_use]
pub fn scrub<S: AsRef<str>>(text: &str, secrets: &[S]) -> String {
    let mut sorted: Vec<&str> = secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()).collect();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut masked = text.to_owned();
    for secret in sorted {
        masked = masked.replace(secret, MASK);
    }
    let mut out = String::with_capacity(masked.len());
    for chunk in masked.split_inclusive(char::is_whitespace) {
        let word = chunk.trim_end();
        out.push_str(&redact(word));
        out.push_str(&chunk[word.len()..]);
    }
    out
}

/// `%XX` sequences decoded, when there are any and the result is UTF-8.
fn percent_decoded(value: &str) -> Option<String> {
    if !value.contains('%') {
        return None;
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok().filter(|d| d != value)
}

/// `value` cut at the commas that start another `scheme://` URL (a cluster's
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

/// Where the password of `url` is: after the `:` of the user information, or all
/// of it when it has no `:` (`kv://secret@host`); `None` without user
/// information. Everything between `://` and the last `@` is user information, even
/// a `/`, `?`, `#` or `,` (a password that was not percent-encoded): over-redacting
/// an odd URL beats printing a password.
fn password_span(url: &str) -> Option<Range<usize>> {
    let start = url.find("://")? + 3;
    let at = start + url[start..].rfind('@')?;
    match url[start..at].find(':') {
        Some(colon) => Some(start + colon + 1..at),
        None if at > start => Some(start..at),
        None => None,
    }
}

fn redact_userinfo(url: &str) -> String {
    match password_span(url) {
        Some(span) => format!("{}{MASK}{}", &url[..span.start], &url[span.end..]),
        None => url.to_owned(),
    }
}

/// Where the values of `key=value` pairs are (the key case-insensitive, at the
/// start or after `;`, `&`, `?`, a space, `_` or `-` (`client_secret`); the value
/// up to the next `;`, `&` or the end), in order. A pair quoted inside another's value is listed too.
fn pair_values(value: &str, key: &str) -> Vec<Range<usize>> {
    let lower = value.to_ascii_lowercase();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = lower[from..].find(key) {
        let start = from + found;
        let after = start + key.len();
        from = after;
        let boundary_ok = start == 0 || matches!(lower.as_bytes()[start - 1], b';' | b'&' | b'?' | b' ' | b'_' | b'-');
        if boundary_ok && lower.as_bytes().get(after) == Some(&b'=') {
            let value_start = after + 1;
            let value_end = value[value_start..].find([';', '&']).map_or(value.len(), |e| value_start + e);
            spans.push(value_start..value_end);
        }
    }
    spans
}

/// Mask the values of `key=value` pairs ([`pair_values`]). A pair inside a value
/// already masked starts at or before that value's end and is skipped; any other
/// starts past it (after a `;` or `&`), and the first starts after its key.
fn redact_pairs(value: &str, key: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    for span in pair_values(value, key) {
        if span.start <= i {
            continue;
        }
        out.push_str(&value[i..span.start]);
        out.push_str(MASK);
        i = span.end;
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
        check("kv://127.0.0.1:6379", "kv://127.0.0.1:6379");
        check("kv://user:hunter2@host:6379/0", "kv://user:***@host:6379/0");
        check("kvs://:hunter2@host", "kvs://:***@host");
        check("kv://hunter2@host", "kv://***@host");
        check("amqp://guest:guest@127.0.0.1:5672/requests", "amqp://guest:***@127.0.0.1:5672/requests");
        check("amqp://a:p@ss@host/q", "amqp://a:***@host/q");
        check(
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=abc+/=;EntityPath=q",
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=***;EntityPath=q",
        );
        check("endpoint=sb://x/;sharedaccesskey=abc", "endpoint=sb://x/;sharedaccesskey=***");
        check("kv://host/?password=abc&db=1", "kv://host/?password=***&db=1");
        check("SharedAccessSignature=SharedAccessSignature sr=x&sig=y", "SharedAccessSignature=***&sig=***");
        check("no secrets here", "no secrets here");
        // Seed lists: every seed's password (the second one used to show).
        check("kv://u:hunter2@a:1,kv://u:hunter2@b:2", "kv://u:***@a:1,kv://u:***@b:2");
        check("kv://u:hunter2@a:1, kvs://:hunter2@b:2", "kv://u:***@a:1, kvs://:***@b:2");
        // Passwords that were not percent-encoded used to show up to the `/`, `?`, `#`.
        check("kv://u:hun/ter2@h:1/0", "kv://u:***@h:1/0");
        check("kv://u:hun?ter2@h", "kv://u:***@h");
        check("kvs://:hun#ter2@h", "kvs://:***@h");
        check("kv://u:hun,ter2@h", "kv://u:***@h");
        check("amqp://u:p/w@h:5672/q", "amqp://u:***@h:5672/q");
    }

    #[test]
    fn a_pair_quoted_inside_a_masked_value_is_masked_once() {
        check("password=a password=b", "password=***");
        check("Password=a password=b;token=t&x=1", "Password=***;token=***&x=1");
        check("password=;password=b", "password=***;password=***");
        assert_eq!(secret_parts("password=a password=b"), ["a password=b", "b"]);
    }

    #[test]
    fn secret_parts_are_what_redact_masks() {
        let parts = |v: &str| Secret::url(v).parts();
        assert_eq!(parts("kv://127.0.0.1:6379"), Vec::<String>::new());
        assert_eq!(parts("kv://u:hun%2Fter2@h,kvs://:other@h2"), ["hun%2Fter2", "hun/ter2", "other"]);
        assert_eq!(parts("kv://justapassword@h"), ["justapassword"]);
        assert_eq!(parts("amqp://a:p@ss@host/q"), ["p@ss"]);
        assert_eq!(
            parts("Endpoint=sb://ns/;SharedAccessKeyName=root;SharedAccessKey=abc+/=;EntityPath=q"),
            ["abc+/="],
            "the key's name is not a secret"
        );
        assert_eq!(parts("kv://host/?password=pw1&db=1"), ["pw1"]);
        // Every part is masked by `redact` in the value it came from.
        for v in ["kv://u:hunter2@a:1,kv://u:second@b:2", "endpoint=sb://x/;sharedaccesskey=abc"] {
            for p in parts(v) {
                assert!(!redact(v).contains(&p), "{p} in {}", redact(v));
            }
        }
    }

    #[test]
    fn scrub_masks_secrets_quoted_anywhere() {
        let secrets = secret_parts("kv://u:hun%2Fter2@h:1");
        let text = "connecting with hun/ter2 (raw hun%2Fter2) to amqp://g:other@h and kv://u:hun%2Fter2@h:1";
        let out = scrub(text, &secrets);
        assert_eq!(out, "connecting with *** (raw ***) to amqp://g:***@h and kv://u:***@h:1");
        assert_eq!(scrub::<&str>("nothing to hide", &[]), "nothing to hide");
        assert_eq!(
            scrub::<&str>("unconfigured \"kv://x:pw9@h\",\n\tEndpoint=sb://n/;SharedAccessKey=k1;", &[]),
            "unconfigured \"kv://x:***@h\",\n\tEndpoint=sb://n/;SharedAccessKey=***;"
        );
    }

    #[test]
    fn secret_never_prints_clear() {
        let url = Secret::url("kv://u:topsecret@h");
        assert_eq!(format!("{url} {url:?}"), "kv://u:***@h Secret(kv://u:***@h)", "a URL says where it points");
        assert_eq!(url.expose(), "kv://u:topsecret@h");
        // A bare secret is masked whole, even when it looks like a URL.
        let key = Secret::new("p://x");
        assert_eq!(format!("{key} {key:?}"), "*** Secret(***)");
        assert_eq!(key.expose(), "p://x");
        assert_eq!((key.parts(), url.parts()), (vec!["p://x".to_owned()], vec!["topsecret".to_owned()]));
    }

    #[test]
    fn redaction_is_idempotent() {
        for v in ["kv://u:pw@h", "a=1;password=x;b=2", "kv://h/?pass=1&secret=2&db=0", "plain text"] {
            let once = redact(v);
            assert_eq!(redact(&once), once, "{v}");
        }
        check("kv://h/?pass=1&client_secret=2&access-token=3", "kv://h/?pass=***&client_secret=***&access-token=***");
        check("host=db password=s3cret user=a", "host=db password=***");
    }
}

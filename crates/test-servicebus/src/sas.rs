//! Checking shared access signature tokens the way Service Bus does:
//! `SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>`,
//! valid when `skn` names the configured policy, `sig` is the base64 HMAC-SHA256 of
//! `<sr as sent>\n<se>` under the policy's key, and `se` (Unix seconds) is still ahead.
//! The resource is a URI (`sb://`, `amqps://`, …) whose path names what the token
//! grants: a queue, anything under it, or (an empty path) the whole namespace.

use base64::Engine as _;
use percent_encoding::percent_decode_str;
use ring::hmac;

/// Why a token is refused. The texts are what the CBS node answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SasError {
    /// Not of the form above.
    Malformed(&'static str),
    /// `skn` names another policy.
    UnknownKeyName(String),
    /// The signature does not match the key.
    BadSignature,
    /// `se` has passed.
    Expired { expiry: i64, now: i64 },
}

impl std::fmt::Display for SasError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SasError::Malformed(why) => write!(f, "InvalidSignature: the token is malformed ({why})"),
            SasError::UnknownKeyName(n) => {
                write!(f, "InvalidSignature: the shared access policy {n:?} does not exist on this namespace")
            }
            SasError::BadSignature => {
                f.write_str("InvalidSignature: the token has an invalid signature (check the SharedAccessKey)")
            }
            SasError::Expired { expiry, now } => {
                write!(f, "ExpiredToken: the token expired at {expiry} (Unix seconds); it is {now} now")
            }
        }
    }
}

/// A token whose signature and expiry were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The path the token grants, lower case, without slashes at the ends (empty:
    /// the whole namespace).
    pub(crate) path: String,
    /// When it expires, Unix milliseconds.
    pub(crate) expires_ms: i64,
}

fn decode(s: &str) -> Option<String> {
    let s = s.replace('+', " ");
    percent_decode_str(&s).decode_utf8().ok().map(|c| c.into_owned())
}

/// Check `token` against the policy `key_name` / `key` at `now_ms`.
pub(crate) fn check(token: &str, key_name: &str, key: &str, now_ms: i64) -> Result<Granted, SasError> {
    let fields = token
        .trim()
        .strip_prefix("SharedAccessSignature ")
        .ok_or(SasError::Malformed("no SharedAccessSignature prefix"))?;
    let (mut sr, mut sig, mut se, mut skn) = (None, None, None, None);
    for pair in fields.split('&') {
        let (name, value) = pair.split_once('=').ok_or(SasError::Malformed("a field without '='"))?;
        match name {
            "sr" => sr = Some(value),
            "sig" => sig = Some(value),
            "se" => se = Some(value),
            "skn" => skn = Some(value),
            _ => {}
        }
    }
    let sr_raw = sr.ok_or(SasError::Malformed("no sr"))?;
    let sig =
        decode(sig.ok_or(SasError::Malformed("no sig"))?).ok_or(SasError::Malformed("sig is not URL-encoded UTF-8"))?;
    let se_raw = se.ok_or(SasError::Malformed("no se"))?;
    let expiry: i64 = se_raw.parse().map_err(|_| SasError::Malformed("se is not a number"))?;
    let skn =
        decode(skn.ok_or(SasError::Malformed("no skn"))?).ok_or(SasError::Malformed("skn is not URL-encoded UTF-8"))?;
    if skn != key_name {
        return Err(SasError::UnknownKeyName(skn));
    }
    let signature = base64::engine::general_purpose::STANDARD
        .decode(sig.as_bytes())
        .map_err(|_| SasError::Malformed("sig is not base64"))?;
    let mac = hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes());
    hmac::verify(&mac, format!("{sr_raw}\n{se_raw}").as_bytes(), &signature).map_err(|_| SasError::BadSignature)?;
    let now = now_ms.div_euclid(1000);
    if expiry <= now {
        return Err(SasError::Expired { expiry, now });
    }
    let resource = decode(sr_raw).ok_or(SasError::Malformed("sr is not URL-encoded UTF-8"))?;
    Ok(Granted { path: resource_path(&resource), expires_ms: expiry.saturating_mul(1000) })
}

/// The entity path a resource URI names: `sb://ns:5672/Q/` -> `q`; a bare path as it is.
pub(crate) fn resource_path(resource: &str) -> String {
    let rest = match resource.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map_or("", |(_, path)| path),
        None => resource,
    };
    rest.trim_matches('/').to_ascii_lowercase()
}

/// Whether a token for `granted` (a [`resource_path`]) covers the entity `path`.
pub(crate) fn covers(granted: &str, path: &str) -> bool {
    let path = path.trim_matches('/').to_ascii_lowercase();
    granted.is_empty() || path == granted || path.strip_prefix(granted).is_some_and(|rest| rest.starts_with('/'))
}

/// A token signed like Microsoft's SDKs sign one (for clients and tests that take a
/// token rather than a key).
pub(crate) fn sign(resource: &str, key_name: &str, key: &str, expiry: i64) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const SET: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    let set = SET;
    let sr = utf8_percent_encode(resource, set).to_string();
    let mac = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes()), format!("{sr}\n{expiry}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.as_ref());
    format!(
        "SharedAccessSignature sr={sr}&sig={}&se={expiry}&skn={}",
        utf8_percent_encode(&sig, set),
        utf8_percent_encode(key_name, set)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "c2VjcmV0LWtleS12YWx1ZQ==";
    const NAME: &str = "RootManageSharedAccessKey";

    /// The vector adapter-servicebus's tests compute with Python's standard library,
    /// as Microsoft's SDK signs.
    const PYTHON: &str = "SharedAccessSignature sr=amqps%3A%2F%2Fdrain-test.servicebus.windows.net%2Frequests&sig=jTNflPNJ8BnUI5tSdiWHwi%2FOkeTQ9MXXgeXzkPbQzjU%3D&se=1767225600&skn=RootManageSharedAccessKey";

    #[test]
    fn a_token_signed_by_the_sdks_is_accepted_until_it_expires() {
        let before = 1_767_225_599_999;
        assert_eq!(
            check(PYTHON, NAME, KEY, before),
            Ok(Granted { path: "requests".into(), expires_ms: 1_767_225_600_000 })
        );
        assert_eq!(
            check(PYTHON, NAME, KEY, 1_767_225_600_000),
            Err(SasError::Expired { expiry: 1_767_225_600, now: 1_767_225_600 })
        );
        assert_eq!(check(&sign("sb://127.0.0.1:5672/Q", NAME, KEY, 100), NAME, KEY, 0).map(|g| g.path), Ok("q".into()));
    }

    #[test]
    fn wrong_keys_names_and_shapes_are_refused() {
        let check_err = |token: &str, want: SasError| assert_eq!(check(token, NAME, KEY, 0), Err(want), "{token}");
        check_err(&sign("sb://h/q", NAME, "other-key", 100), SasError::BadSignature);
        check_err(&sign("sb://h/q", "send-only", KEY, 100), SasError::UnknownKeyName("send-only".into()));
        // Changing what was signed breaks the signature.
        check_err(&sign("sb://h/q", NAME, KEY, 100).replace("se=100", "se=200"), SasError::BadSignature);
        check_err(
            &sign("sb://h/q", NAME, KEY, 100).replace("sr=sb%3A%2F%2Fh%2Fq", "sr=sb%3A%2F%2Fh%2Fr"),
            SasError::BadSignature,
        );
        check_err("Bearer x", SasError::Malformed("no SharedAccessSignature prefix"));
        check_err("SharedAccessSignature sr=a&sig=b&skn=c", SasError::Malformed("no se"));
        check_err("SharedAccessSignature sr=a&sig=b&se=x&skn=c", SasError::Malformed("se is not a number"));
        check_err(
            "SharedAccessSignature sr=a&sig=%%%&se=1&skn=RootManageSharedAccessKey",
            SasError::Malformed("sig is not base64"),
        );
        check_err("SharedAccessSignature garbage", SasError::Malformed("a field without '='"));
    }

    #[test]
    fn what_a_resource_covers() {
        let check = |resource: &str, path: &str, want: bool| {
            assert_eq!(covers(&resource_path(resource), path), want, "{resource} covers {path}");
        };
        check("sb://ns.servicebus.windows.net/", "q", true);
        check("sb://ns.servicebus.windows.net", "q", true);
        check("sb://127.0.0.1:5672/q", "q", true);
        check("amqps://127.0.0.1/Q", "q/$DeadLetterQueue", true);
        check("amqps://127.0.0.1/q", "q/$management", true);
        check("sb://h/q", "q2", false);
        check("sb://h/q/$deadletterqueue", "q", false);
        check("q", "q", true);
    }
}

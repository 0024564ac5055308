//! Shared access signature (SAS) tokens for Service Bus, and when to refresh them.
//!
//! A token is `SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>`
//! where `resource` is the URL-encoded audience, `expiry` is Unix seconds, and
//! `signature` is the URL-encoded base64 of HMAC-SHA256(key, `<resource>\n<expiry>`).
//! The key is used as given (its UTF-8 bytes), as every Azure SDK does.

use std::time::Duration;

use base64::Engine as _;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use ring::hmac;

/// Characters left as they are: letters, digits and `-._~` (what Python's
/// `urllib.parse.quote_plus` and .NET's `WebUtility.UrlEncode` leave alone, spaces aside).
const URL_ENCODE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// How long a generated token is valid.
pub(crate) const TOKEN_TTL: Duration = Duration::from_secs(3600);

/// How long before its expiry a token is replaced.
pub(crate) const REFRESH_MARGIN: Duration = Duration::from_secs(300);

fn encode(s: &str) -> String {
    utf8_percent_encode(s, URL_ENCODE).to_string()
}

/// A SAS token for `resource` (e.g. `amqps://ns.servicebus.windows.net/queue`), signed
/// with `key` under the policy `key_name`, valid until `expiry_unix_secs`.
#[must_use]
pub fn sas_token(resource: &str, key_name: &str, key: &str, expiry_unix_secs: u64) -> String {
    let resource = encode(resource);
    let to_sign = format!("{resource}\n{expiry_unix_secs}");
    let mac = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes()), to_sign.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.as_ref());
    format!(
        "SharedAccessSignature sr={resource}&sig={}&se={expiry_unix_secs}&skn={}",
        encode(&signature),
        encode(key_name)
    )
}

/// The expiry (`se=`, Unix seconds) of a ready-made token; `None` when it has none.
#[must_use]
pub(crate) fn token_expiry(token: &str) -> Option<u64> {
    let fields = token.trim().strip_prefix("SharedAccessSignature ")?;
    fields.split('&').find_map(|pair| pair.strip_prefix("se=")).and_then(|se| se.parse().ok())
}

/// How long to wait before replacing a token that is valid for `valid_for` more:
/// [`REFRESH_MARGIN`] before it expires, but never sooner than a tenth of its
/// remaining life (so a short-lived token is not refreshed in a loop).
#[must_use]
pub(crate) fn refresh_after(valid_for: Duration) -> Duration {
    valid_for.saturating_sub(REFRESH_MARGIN).max(valid_for / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known vector computed independently with Python 3's standard library:
    ///
    /// ```text
    /// import hmac, hashlib, base64, urllib.parse
    /// sr = urllib.parse.quote_plus("amqps://drain-test.servicebus.windows.net/requests")
    /// se = 1767225600
    /// sig = base64.b64encode(hmac.new(b"c2VjcmV0LWtleS12YWx1ZQ==",
    ///     f"{sr}\n{se}".encode(), hashlib.sha256).digest()).decode()
    /// print(f"SharedAccessSignature sr={sr}&sig={urllib.parse.quote_plus(sig)}&se={se}&skn="
    ///       + urllib.parse.quote_plus("RootManageSharedAccessKey"))
    /// ```
    const VECTOR: &str = "SharedAccessSignature sr=amqps%3A%2F%2Fdrain-test.servicebus.windows.net%2Frequests&sig=jTNflPNJ8BnUI5tSdiWHwi%2FOkeTQ9MXXgeXzkPbQzjU%3D&se=1767225600&skn=RootManageSharedAccessKey";

    #[test]
    fn token_matches_an_independent_computation() {
        let token = sas_token(
            "amqps://drain-test.servicebus.windows.net/requests",
            "RootManageSharedAccessKey",
            "c2VjcmV0LWtleS12YWx1ZQ==",
            1_767_225_600,
        );
        assert_eq!(token, VECTOR);
    }

    #[test]
    fn key_name_and_resource_are_url_encoded() {
        let token = sas_token("sb://ns/a b", "my key/1", "k", 10);
        assert!(token.starts_with("SharedAccessSignature sr=sb%3A%2F%2Fns%2Fa%20b&sig="), "{token}");
        assert!(token.ends_with("&se=10&skn=my%20key%2F1"), "{token}");
        let sig = token.split("&sig=").nth(1).unwrap().split('&').next().unwrap();
        assert!(!sig.contains(['+', '/', '=']), "the signature is URL-encoded: {sig}");
    }

    #[test]
    fn expiry_of_a_ready_made_token() {
        assert_eq!(token_expiry(VECTOR), Some(1_767_225_600));
        assert_eq!(token_expiry("SharedAccessSignature sr=x&sig=y"), None);
        assert_eq!(token_expiry("SharedAccessSignature sr=x&se=soon"), None);
        assert_eq!(token_expiry("sr=x&se=10"), None);
    }

    #[test]
    fn refresh_schedule() {
        let check = |valid_for: u64, want: u64| {
            assert_eq!(
                refresh_after(Duration::from_secs(valid_for)),
                Duration::from_secs(want),
                "valid_for={valid_for}"
            );
        };
        check(3600, 3300); // a fresh one-hour token: 5 minutes before expiry
        check(600, 300);
        check(300, 30); // inside the margin: a tenth of what is left
        check(100, 10);
        check(0, 0); // expired: now
    }
}

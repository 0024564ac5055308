//! Redis URL handling: drain-runtime's `redact` (the one redaction every crate uses)
//! and adapter-redis's `RedisConfig` endpoint, TLS detection and `Debug`. Any text: never a panic, redaction is idempotent.
//! Structured: the input is split into user, password and host (newline-separated)
//! and built into `redis://user:password@host`; the password MUST NOT appear in the
//! redacted URL or the endpoint, and `Debug` MUST show the redacted URL.
//!
//! (Connection strings' cases are unit tests in `crates/drain-core/src/redact.rs`.
//! The AMQP parser has its own target, `amqp_endpoint`.)
#![no_main]

use adapter_redis::RedisConfig;
use drain_runtime::redact::redact;
use libfuzzer_sys::fuzz_target;

fn any_text(text: &str) {
    let once = redact(text);
    assert_eq!(redact(&once), once, "redaction is idempotent");
    let cfg = RedisConfig::new(text);
    let _ = (cfg.endpoint(), cfg.uses_tls(), format!("{cfg:?}"));
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    any_text(&text);

    let mut parts = text.splitn(3, '\n');
    let (Some(user), Some(password), Some(host)) = (parts.next(), parts.next(), parts.next()) else { return };
    // The password must be recognisable: one character that nothing else in the
    // output could contribute.
    let foreign = |c: char| !user.contains(c) && !host.contains(c) && !"rediss://:*@127.0.0.1:6379,[]".contains(c);
    // A password holding `,redis://` reads as a seed list (documented: percent-encode it).
    let seed_list = password.split(',').skip(1).any(|s| s.trim_start().starts_with("redis"));
    if user.contains([':', '@']) || seed_list || !password.chars().any(foreign) {
        return;
    }
    for scheme in ["redis", "rediss"] {
        let url = format!("{scheme}://{user}:{password}@{host}");
        let shown = redact(&url);
        assert!(!shown.contains(password), "redact leaks the password of {url:?}: {shown:?}");
        let cfg = RedisConfig::new(url.as_str());
        let endpoint = cfg.endpoint();
        assert!(!endpoint.contains(password), "endpoint() leaks the password of {url:?}: {endpoint:?}");
        let debug = format!("{cfg:?}");
        assert!(debug.contains(&format!("url: {shown:?},")), "Debug shows the redacted URL: {debug}");
    }
});

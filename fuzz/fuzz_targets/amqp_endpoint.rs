//! adapter-servicebus's `Endpoint::parse` for `amqp[s]://` URLs and Service Bus
//! connection strings. Any text: never a panic. Structured: the input is split into
//! user, secret and host (newline-separated) and built into an AMQP URL and a
//! Service Bus connection string; the secret MUST NOT appear in the parsed endpoint's
//! `Display` or `Debug`, in any warning, or in the error when parsing fails.
#![no_main]

use adapter_servicebus::Endpoint;
use libfuzzer_sys::fuzz_target;

fn shown(input: &str) -> String {
    match Endpoint::parse(input) {
        Ok(parsed) => format!("{} {:?} {:?}", parsed.endpoint, parsed.endpoint, parsed.warnings),
        Err(e) => e.to_string(),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = shown(&text);

    let mut parts = text.splitn(3, '\n');
    let (Some(user), Some(secret), Some(host)) = (parts.next(), parts.next(), parts.next()) else { return };
    // The secret must be recognisable: one character nothing else in the output could
    // contribute, and long enough not to be a fragment of the fixed text.
    let fixed = "amqps://:@/queue;=EndpointsbSharedAccessKeyNameEntityPathkq.";
    // Debug formatting in messages adds `\`, `"`, `'` and escape letters: never count
    // those as the secret's own.
    let context = format!("{user}{host}{user:?}{host:?}{fixed}");
    let foreign = |c: char| !context.contains(c) && c.is_alphanumeric();
    if secret.len() < 3 || !secret.chars().any(foreign) || secret.contains([';', '@', '/', '?', '#', '%']) {
        return;
    }
    let url = format!("amqp://{user}:{secret}@{host}/queue");
    let out = shown(&url);
    assert!(!out.contains(secret), "an AMQP URL leaks its password: {url:?} -> {out:?}");
    let conn = format!("Endpoint=sb://{host}/;SharedAccessKeyName=k;SharedAccessKey={secret};EntityPath=q");
    let out = shown(&conn);
    assert!(!out.contains(secret), "a connection string leaks its key: {conn:?} -> {out:?}");
});

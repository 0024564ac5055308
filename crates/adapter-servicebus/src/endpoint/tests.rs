use super::*;

const KEY: &str = "c2VjcmV0LWtleS12YWx1ZQ==";

fn sb(host: &str, port: u16, tls: bool, entity: Option<&str>) -> Endpoint {
    Endpoint {
        profile: Profile::ServiceBus,
        host: host.to_owned(),
        port,
        tls,
        credentials: Credentials::SharedAccessKey {
            key_name: "RootManageSharedAccessKey".into(),
            key: Secret::new(KEY),
        },
        entity: entity.map(str::to_owned),
        vhost: None,
    }
}

fn amqp(host: &str, port: u16, tls: bool, user: Option<(&str, &str)>, entity: Option<&str>) -> Endpoint {
    Endpoint {
        profile: Profile::Generic,
        host: host.to_owned(),
        port,
        tls,
        credentials: match user {
            Some((u, p)) => Credentials::Plain { username: u.into(), password: Secret::new(p) },
            None => Credentials::Anonymous,
        },
        entity: entity.map(str::to_owned),
        vhost: None,
    }
}

/// One case: the input parses to `expected` with `warnings` warnings.
fn check(input: &str, expected: Endpoint, warnings: usize) {
    let parsed = Endpoint::parse(input).unwrap_or_else(|e| panic!("{input:?} should parse: {e}"));
    assert_eq!(parsed.endpoint, expected, "{input:?}");
    assert_eq!(parsed.warnings.len(), warnings, "{input:?}: {:?}", parsed.warnings);
    for w in &parsed.warnings {
        assert!(!w.contains(KEY.trim_end_matches('=')) && !w.contains("s3cret"), "a warning leaks a secret: {w}");
    }
}

/// One case: the input fails with a Config error whose message contains `says` and
/// never any secret.
fn check_err(input: &str, says: &str) {
    let e = Endpoint::parse(input).expect_err(input);
    assert_eq!(e.kind, ErrorKind::Config, "{input:?}");
    assert!(!e.is_temporary());
    assert!(e.message.contains(says), "{input:?}: {:?} should say {says:?}", e.message);
    for secret in [KEY, "s3cret", "p@ss", "hunter2"] {
        assert!(!e.message.contains(secret), "{input:?}: the error leaks a secret: {}", e.message);
    }
}

#[test]
fn service_bus_connection_strings() {
    let full = format!(
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};EntityPath=requests"
    );
    check(&full, sb("ns.servicebus.windows.net", 5671, true, Some("requests")), 0);
    // Any key order, case-insensitive keys, blanks around fields, a trailing ';'.
    check(
        &format!(
            " entitypath=requests ; SHAREDACCESSKEY={KEY};sharedAccessKeyName=RootManageSharedAccessKey;ENDPOINT=SB://ns.servicebus.windows.net ;"
        ),
        sb("ns.servicebus.windows.net", 5671, true, Some("requests")),
        0,
    );
    // No EntityPath: the caller names the queue later.
    check(
        &format!(
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"
        ),
        sb("ns.servicebus.windows.net", 5671, true, None),
        0,
    );
    // Unknown keys are ignored with a warning; a repeated key warns and the last wins.
    check(
        &format!(
            "Endpoint=sb://old/;Endpoint=sb://ns.servicebus.windows.net/;TransportType=Amqp;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};EntityPath=q"
        ),
        sb("ns.servicebus.windows.net", 5671, true, Some("q")),
        2,
    );
    check(
        &format!(
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};{KEY};x1=2"
        ),
        sb("ns.servicebus.windows.net", 5671, true, None),
        2,
    );
    // The development emulator: plain AMQP on 5672, or the port given.
    check(
        &format!(
            "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=true;EntityPath=queue.1"
        ),
        sb("localhost", 5672, false, Some("queue.1")),
        0,
    );
    check(
        &format!(
            "Endpoint=sb://localhost:5673;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=TRUE"
        ),
        sb("localhost", 5673, false, None),
        0,
    );
    check(
        &format!(
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY};UseDevelopmentEmulator=false"
        ),
        sb("ns.servicebus.windows.net", 5671, true, None),
        0,
    );
}

#[test]
fn bad_service_bus_connection_strings() {
    check_err("", "empty");
    check_err("   ", "empty");
    check_err("just-a-name", "expected an amqp:// or amqps:// URL");
    check_err(&format!("SharedAccessKeyName=k;SharedAccessKey={KEY}"), "missing Endpoint");
    check_err("Endpoint=sb://ns/;SharedAccessKeyName=k", "missing SharedAccessKey");
    check_err(&format!("Endpoint=sb://ns/;SharedAccessKey={KEY}"), "missing SharedAccessKeyName");
    check_err("Endpoint=sb://ns/", "missing SharedAccessKeyName, SharedAccessKey");
    check_err("Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=", "missing SharedAccessKey");
    check_err(&format!("Endpoint=https://ns/;SharedAccessKeyName=k;SharedAccessKey={KEY}"), "must start with sb://");
    check_err(&format!("Endpoint=ns.servicebus.windows.net;SharedAccessKeyName=k;SharedAccessKey={KEY}"), "sb://");
    check_err(&format!("Endpoint=sb:///;SharedAccessKeyName=k;SharedAccessKey={KEY}"), "no host");
    check_err(&format!("Endpoint=sb://ns:99999/;SharedAccessKeyName=k;SharedAccessKey={KEY}"), "port \"99999\"");
    check_err(
        &format!("Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey={KEY};UseDevelopmentEmulator=yes"),
        "must be true or false",
    );
    // A segment without '=' is reported by position, never echoed (it may be a key).
    // A key pasted on its own parses as an unknown `name=` (base64 ends in '='): not echoed.
    check_err(&format!("Endpoint=sb://ns/;SharedAccessKeyName=k;{KEY}"), "missing SharedAccessKey");
    check_err("Endpoint=sb://ns/;SharedAccessKeyName=k;hunter2", "segment 3");
    check_err("Endpoint=sb://ns/;SharedAccessSignature=sr=x&sig=s3cret", "a whole token");
    check_err(
        &format!(
            "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey={KEY};SharedAccessSignature=SharedAccessSignature sr=x&sig=s3cret"
        ),
        "not both",
    );
}

#[test]
fn shared_access_signature_strings() {
    let token = "SharedAccessSignature sr=amqps%3A%2F%2Fns%2Fq&sig=s3cret%3D&se=1767225600&skn=send";
    let parsed = Endpoint::parse(&format!(
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature={token};EntityPath=q"
    ))
    .expect("parses");
    let e = parsed.endpoint;
    assert_eq!(e.credentials, Credentials::SharedAccessSignature { token: Secret::new(token) });
    assert_eq!(
        (e.host.as_str(), e.port, e.tls, e.entity.as_deref()),
        ("ns.servicebus.windows.net", 5671, true, Some("q"))
    );
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains("s3cret"), "the token is never shown: {shown}");
    assert_eq!(e.to_string(), "sb://sas:***@ns.servicebus.windows.net:5671/q");
}

#[test]
fn amqp_urls() {
    check(
        "amqp://guest:guest@127.0.0.1:5672/requests",
        amqp("127.0.0.1", 5672, false, Some(("guest", "guest")), Some("requests")),
        0,
    );
    check("AMQP://localhost", amqp("localhost", 5672, false, None, None), 0);
    check("amqps://broker.example/q", amqp("broker.example", 5671, true, None, Some("q")), 0);
    check("amqps://u:p@broker.example:6000/q/", amqp("broker.example", 6000, true, Some(("u", "p")), Some("q")), 0);
    // Percent-decoding of user, password and queue; '@' inside the password is fine.
    check(
        "amqp://drain%40ops:p%40ss%3Aw%2Fd@rabbit:5672/my%20queue",
        amqp("rabbit", 5672, false, Some(("drain@ops", "p@ss:w/d")), Some("my queue")),
        0,
    );
    check("amqp://u:p@ss@rabbit/q", amqp("rabbit", 5672, false, Some(("u", "p@ss")), Some("q")), 0);
    // Unencoded '/', '?' and ':' in the user info stay in it (everything before the
    // last '@'); found by the amqp_endpoint fuzz target, where a '/' in the user name
    // pushed the password into the path, which an error echoed.
    check("amqp://u:pa/ss?x@rabbit/q", amqp("rabbit", 5672, false, Some(("u", "pa/ss?x")), Some("q")), 0);
    check("amqp://us/er:pw@rabbit:5673/q", amqp("rabbit", 5673, false, Some(("us/er", "pw")), Some("q")), 0);
    check("amqp://user@rabbit/q", amqp("rabbit", 5672, false, Some(("user", "")), Some("q")), 0);
    check("amqp://[::1]:5673/q", amqp("::1", 5673, false, None, Some("q")), 0);
    let mut with_vhost = amqp("rabbit", 5672, false, Some(("u", "p")), Some("q"));
    with_vhost.vhost = Some("tenant-a".into());
    check("amqp://u:p@rabbit/q?vhost=tenant-a", with_vhost.clone(), 0);
    check("amqp://u:p@rabbit/q?vhost=tenant-a&heartbeat=10", with_vhost, 1);
}

#[test]
fn bad_amqp_urls() {
    check_err("amqp://", "no host");
    check_err("amqp://u:s3cret@/q", "no host");
    check_err("amqp://u:s3cret@rabbit:0/q", "port \"0\"");
    check_err("amqp://u:s3cret@rabbit:abc/q", "port \"abc\"");
    check_err("amqp://u:s3cret@rabbit/a/b", "one queue name");
    check_err("amqp://:s3cret@rabbit/q", "without a user name");
    check_err("amqp://u:s3%ffcret@rabbit/q", "password is not valid");
    check_err("amqp://u:s3cret#x@rabbit/q", "fragment");
    check_err("amqp://u:s3cret@[::1/q", "unclosed '['");
    check_err("amqp://a/b:s3cret@rabbit/x/y", "one queue name");
    check_err("amqp://u/:s3cret/@rabbit:99999/q", "port \"99999\"");
}

#[test]
fn display_and_debug_redact_secrets() {
    let parsed = Endpoint::parse("amqp://guest:hunter2@127.0.0.1/q?vhost=v").unwrap();
    assert_eq!(parsed.endpoint.to_string(), "amqp://guest:***@127.0.0.1:5672/q?vhost=v");
    assert!(!format!("{:?}", parsed.endpoint).contains("hunter2"));
    let parsed = Endpoint::parse(&format!(
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey={KEY};EntityPath=q"
    ))
    .unwrap();
    assert_eq!(parsed.endpoint.to_string(), "sb://listen:***@ns.servicebus.windows.net:5671/q");
    assert!(!format!("{parsed:?}").contains(KEY));
    assert_eq!(amqp("::1", 5672, false, None, None).to_string(), "amqp://[::1]:5672/");
}

#[test]
fn entity_and_open_hostname() {
    let e = amqp("rabbit", 5672, false, None, None);
    let err = e.require_entity().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(err.message.contains("no queue given"), "{}", err.message);
    let e = e.with_entity("q");
    assert_eq!(e.require_entity().unwrap(), "q");
    assert_eq!(e.open_hostname(), "rabbit");
    let mut v = e.clone();
    v.vhost = Some("t".into());
    assert_eq!(v.open_hostname(), "vhost:t");
}

use std::collections::BTreeMap;

use super::*;
use registry::SETTINGS;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn load(pairs: &[(&str, &str)]) -> Loaded {
    resolve(&env(pairs), None, "host-1").expect("valid config")
}

#[test]
fn defaults() {
    let l = load(&[]);
    let c = &l.config;
    assert_eq!(c.singleflight, Switch::Off);
    assert_eq!(c.lease_ttl, Duration::from_secs(120));
    assert_eq!((c.lease_renew, c.atomic_claim, c.claim_aware), (Switch::On, Switch::On, Switch::On));
    assert_eq!(c.release_wake, Switch::On);
    assert_eq!(c.scheduler_config().release_wake, Switch::On);
    assert_eq!((c.drain_concurrency, c.drain_batch, c.worker_concurrency), (1, 32, 4));
    assert_eq!((c.backoff_min, c.backoff_max), (Duration::from_secs(5), Duration::from_secs(15)));
    assert_eq!(c.max_lock_renewal, Duration::from_secs(300));
    assert_eq!(c.metrics_addr, Some(SocketAddr::from(([127, 0, 0, 1], 9464))));
    assert_eq!(c.key_prefix, "drain");
    assert_eq!(c.instance_id, "host-1");
    assert!(c.redis_url.is_none() && c.source_url.is_none());
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    assert_eq!(l.effective.len(), SETTINGS.len(), "every registry entry is resolved once");
    assert!(l.effective.iter().all(|e| e.origin == Origin::Default));
}

#[test]
fn lock_renewal_can_be_turned_off_or_bounded() {
    assert_eq!(load(&[("SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS", "0")]).config.max_lock_renewal, Duration::ZERO);
    let l = load(&[("SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS", "1800")]);
    assert_eq!(l.config.max_lock_renewal, Duration::from_secs(1800));
    let l = load(&[("SERVICEBUS_DRAIN_MAX_LOCK_RENEWAL_SECONDS", "forever")]);
    assert_eq!(l.config.max_lock_renewal, Duration::from_secs(300), "garbage falls back to the default");
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
}

#[test]
fn each_bad_value_gives_one_warning() {
    let l = load(&[
        ("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "5"),
        ("SERVICEBUS_ATOMIC_CLAIM", "nope"),
        ("DRAIN_METRICS_ADDR", "everywhere"),
        ("DRAIN_LOG_FORMAT", "xml"),
        ("DRAIN_KEY_PREFIX", "a{b}"),
    ]);
    let c = &l.config;
    assert_eq!(c.lease_ttl, Duration::from_secs(10));
    assert_eq!(c.atomic_claim, Switch::On, "a bad value never disables a safety feature");
    assert_eq!(c.metrics_addr, Some(SocketAddr::from(([127, 0, 0, 1], 9464))));
    assert_eq!(c.log_format, LogFormat::Text);
    assert_eq!(c.key_prefix, "drain");
    let mut names: Vec<&str> = l.warnings.iter().map(|w| w.variable.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "DRAIN_KEY_PREFIX",
            "DRAIN_LOG_FORMAT",
            "DRAIN_METRICS_ADDR",
            "SERVICEBUS_ATOMIC_CLAIM",
            "SERVICEBUS_DRAIN_LOCK_TTL_SECONDS"
        ]
    );
}

#[test]
fn env_wins_over_file_and_origins_are_reported() {
    let file = parse_file(
        "f.toml",
        "SERVICEBUS_DRAIN_SINGLEFLIGHT = true\nservicebus_drain_batch = 8\nDRAIN_BEAT_INTERVAL_SECONDS = \"3\"\nUNKNOWN_THING = 1\n",
    )
    .expect("file parses");
    let l = resolve(&env(&[("DRAIN_BEAT_INTERVAL_SECONDS", "7")]), Some(&file), "h").expect("valid");
    assert_eq!(l.config.singleflight, Switch::On);
    assert_eq!(l.config.drain_batch, 8);
    assert_eq!(l.config.beat_interval, Duration::from_secs(7));
    let origin = |n: &str| l.effective.iter().find(|e| e.name == n).map(|e| e.origin);
    assert_eq!(origin("SERVICEBUS_DRAIN_SINGLEFLIGHT"), Some(Origin::File));
    assert_eq!(origin("DRAIN_BEAT_INTERVAL_SECONDS"), Some(Origin::Env));
    assert_eq!(origin("DRAIN_LOG"), Some(Origin::Default));
    assert!(l.warnings.iter().any(|w| w.variable == "UNKNOWN_THING"));
}

#[test]
fn bad_file_is_a_clear_error_without_secrets() {
    let e = parse_file("f.toml", "DRAIN_REDIS_URL = \"redis://u:topsecret@h\n").unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("config file f.toml:"), "{msg}");
    assert!(!msg.contains("topsecret"), "{msg}");
    let e = parse_file("f.toml", "DRAIN_LOG = [1, 2]").unwrap_err();
    assert!(e.to_string().contains("expected a string"), "{e}");
}

#[test]
fn urls_are_validated_and_redacted() {
    let l = load(&[
        ("DRAIN_REDIS_URL", "redis://app:topsecret@127.0.0.1:6379"),
        ("DRAIN_SOURCE_URL", "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=topsecret;EntityPath=q"),
    ]);
    assert_eq!(l.config.redis_url.as_ref().map(Secret::expose), Some("redis://app:topsecret@127.0.0.1:6379"));
    let shown = effective_table(&l.effective, &l.warnings);
    assert!(!shown.contains("topsecret"), "{shown}");
    assert!(shown.contains("redis://app:***@127.0.0.1:6379"), "{shown}");
    assert!(!format!("{:?}", l.config).contains("topsecret"));

    let e = resolve(&env(&[("DRAIN_REDIS_URL", "http://u:topsecret@h")]), None, "h").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("DRAIN_REDIS_URL") && msg.contains("redis://"), "{msg}");
    assert!(!msg.contains("topsecret"), "{msg}");
}

#[test]
fn metrics_can_be_turned_off() {
    assert_eq!(load(&[("DRAIN_METRICS_ADDR", "OFF")]).config.metrics_addr, None);
    assert_eq!(
        load(&[("DRAIN_METRICS_ADDR", "0.0.0.0:9000")]).config.metrics_addr,
        Some(SocketAddr::from(([0, 0, 0, 0], 9000)))
    );
}

#[test]
fn flags_markdown_lists_every_setting() {
    let md = flags_markdown();
    for s in SETTINGS {
        assert!(md.contains(&format!("| `{}` |", s.name)), "{}", s.name);
    }
}

#[test]
fn log_filter_needs_levels() {
    for ok in ["info", "debug", "info,drain=debug", "warn, drain::tick=trace", "OFF"] {
        let l = load(&[("DRAIN_LOG", ok)]);
        assert!(l.warnings.is_empty(), "{ok}: {:?}", l.warnings);
        assert_eq!(l.config.log_filter, ok.trim());
    }
    for bad in ["-1", "", "drain", "on off", "info,", "drain=loud", "{}=info"] {
        let l = load(&[("DRAIN_LOG", bad)]);
        assert_eq!(l.config.log_filter, "info", "{bad:?}");
        assert_eq!(l.warnings.len(), 1, "{bad:?}");
    }
}

#[test]
fn the_fence_property_is_a_plain_name_or_nothing() {
    assert_eq!(load(&[]).config.target_fence_property, None);
    assert_eq!(load(&[("DRAIN_TARGET_FENCE_PROPERTY", "  ")]).config.target_fence_property, None);
    let l = load(&[("DRAIN_TARGET_FENCE_PROPERTY", " drain-fence ")]);
    assert_eq!(l.config.target_fence_property.as_deref(), Some("drain-fence"));
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);
    let long = "x".repeat(129);
    for bad in ["with space", "tab\there", long.as_str(), "ünïcode"] {
        let l = load(&[("DRAIN_TARGET_FENCE_PROPERTY", bad)]);
        assert_eq!(l.config.target_fence_property, None, "{bad:?}");
        assert_eq!(l.warnings.len(), 1, "{bad:?}: {:?}", l.warnings);
        assert_eq!(l.warnings[0].variable, "DRAIN_TARGET_FENCE_PROPERTY");
    }
}

#[test]
fn a_set_but_blank_url_is_fatal_not_the_embedded_default() {
    for name in ["DRAIN_REDIS_URL", "DRAIN_SOURCE_URL", "DRAIN_TARGET_URL"] {
        for blank in ["", "  "] {
            let e = resolve(&env(&[(name, blank)]), None, "h").unwrap_err();
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{name}=")) && msg.contains("blank"), "{msg}");
        }
        let file = parse_file("f.toml", &format!("{name} = \"\"")).expect("file parses");
        assert!(resolve(&env(&[]), Some(&file), "h").is_err(), "{name} blank in the file");
    }
    let e = resolve(&env(&[("DRAIN_REDIS_URL", "\u{1}x")]), None, "h").unwrap_err();
    assert_eq!(e.to_string().lines().count(), 1, "escaped, one line: {e}");
    assert!(!e.to_string().contains('\u{1}'), "{e}");
}

#[test]
fn secret_parts_cover_every_url() {
    let l = load(&[
        ("DRAIN_REDIS_URL", "redis://app:redis-pw@127.0.0.1:6379"),
        ("DRAIN_SOURCE_URL", "amqp://guest:amqp-pw@h:5672/requests"),
        ("DRAIN_TARGET_URL", "Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=sas-key;EntityPath=q"),
    ]);
    let mut parts = l.config.secret_parts();
    parts.sort_unstable();
    assert_eq!(parts, ["amqp-pw", "redis-pw", "sas-key"]);
    assert!(load(&[]).config.secret_parts().is_empty());
}

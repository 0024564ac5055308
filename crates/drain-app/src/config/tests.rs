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
    assert_eq!(c.skip_served, Switch::On);
    assert_eq!(c.scheduler_config().skip_served, Switch::On);
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
        ("DRAIN_INSTANCE_ID", "a b"),
    ]);
    let c = &l.config;
    assert_eq!(c.lease_ttl, Duration::from_secs(10));
    assert_eq!(c.atomic_claim, Switch::On, "a bad value never disables a safety feature");
    assert_eq!(c.metrics_addr, Some(SocketAddr::from(([127, 0, 0, 1], 9464))));
    assert_eq!(c.log_format, LogFormat::Text);
    assert_eq!(c.instance_id, "host-1");
    let mut names: Vec<&str> = l.warnings.iter().map(|w| w.variable.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "DRAIN_INSTANCE_ID",
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

/// A prefix that cannot be used is fatal (exit 2 in the binary, one line naming
/// `DRAIN_KEY_PREFIX`), never the shared `drain`: that would silently merge two
/// tenants, and complete one tenant's messages as the other's duplicates.
#[test]
fn a_bad_key_prefix_is_fatal_never_the_shared_default() {
    for bad in ["a{b}", "", "  ", "tenant a", "é", &"p".repeat(65)] {
        let e = resolve(&env(&[("DRAIN_KEY_PREFIX", bad)]), None, "h").expect_err(bad);
        let msg = e.to_string();
        assert!(msg.starts_with("DRAIN_KEY_PREFIX="), "{bad:?}: {msg}");
        assert_eq!(msg.lines().count(), 1, "{msg}");
        let file = parse_file("f.toml", &format!("DRAIN_KEY_PREFIX = {bad:?}")).expect("file parses");
        assert!(resolve(&env(&[]), Some(&file), "h").is_err(), "{bad:?} in the file");
    }
    assert_eq!(load(&[("DRAIN_KEY_PREFIX", " tenant-a ")]).config.key_prefix, "tenant-a");
    assert_eq!(load(&[]).config.key_prefix, "drain");
}

/// The origin of a value that fell back to the default is `default` (the warning
/// says what was set); a clamped value still comes from where it was set.
#[test]
fn a_value_that_fell_back_to_the_default_has_origin_default() {
    let origin = |pairs: &[(&str, &str)], name: &str| {
        let l = load(pairs);
        l.effective.iter().find(|e| e.name == name).map(|e| (e.origin, e.value.clone())).expect(name)
    };
    let check = |name: &str, raw: &str, expected: (Origin, &str)| {
        let (o, v) = origin(&[(name, raw)], name);
        assert_eq!((o, v.as_str()), expected, "{name}={raw:?}");
    };
    check("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "abc", (Origin::Default, "120"));
    check("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "5", (Origin::Env, "10"));
    check("SERVICEBUS_DRAIN_LOCK_TTL_SECONDS", "60", (Origin::Env, "60"));
    check("SERVICEBUS_ATOMIC_CLAIM", "nope", (Origin::Default, "on"));
    check("SERVICEBUS_ATOMIC_CLAIM", "off", (Origin::Env, "off"));
    check("DRAIN_METRICS_ADDR", "everywhere", (Origin::Default, "127.0.0.1:9464"));
    check("DRAIN_LOG_FORMAT", "xml", (Origin::Default, "text"));
    check("DRAIN_LOG", "drain", (Origin::Default, "info"));
    check("DRAIN_INSTANCE_ID", "a b", (Origin::Default, "host-1"));
    check("DRAIN_TARGET_FENCE_PROPERTY", "with space", (Origin::Default, "unset"));
    let file =
        parse_file("f.toml", "SERVICEBUS_DRAIN_BATCH = \"many\"\nSERVICEBUS_DRAIN_CONCURRENCY = 8").expect("file");
    let l = resolve(&env(&[]), Some(&file), "h").expect("valid");
    let o = |n: &str| l.effective.iter().find(|e| e.name == n).map(|e| e.origin);
    assert_eq!(o("SERVICEBUS_DRAIN_BATCH"), Some(Origin::Default));
    assert_eq!(o("SERVICEBUS_DRAIN_CONCURRENCY"), Some(Origin::File));
}

/// A `--config` file follows the environment's grammar: TOML `true` is On, but
/// `false` is not `off` (only `off` disables a default-on switch), so it keeps the
/// default with one warning that shows the file's value and says it came from the
/// file.
#[test]
fn a_config_file_follows_the_switch_grammar() {
    let check = |toml: &str, name: &str, expected: Switch, warned: bool| {
        let file = parse_file("f.toml", toml).expect("file parses");
        let l = resolve(&env(&[]), Some(&file), "h").expect("valid");
        let value = l.effective.iter().find(|e| e.name == name).map(|e| e.value.clone()).expect(name);
        assert_eq!(value, expected.as_str(), "{toml}");
        let w: Vec<&Warning> = l.warnings.iter().filter(|w| w.variable == name).collect();
        assert_eq!(w.len(), usize::from(warned), "{toml}: {w:?}");
        if let Some(w) = w.first() {
            assert_eq!(w.value, "false", "the file's value: {w}");
            assert!(w.message.contains("config file"), "{w}");
        }
    };
    check("SERVICEBUS_ATOMIC_CLAIM = false", "SERVICEBUS_ATOMIC_CLAIM", Switch::On, true);
    check("SERVICEBUS_ATOMIC_CLAIM = \"off\"", "SERVICEBUS_ATOMIC_CLAIM", Switch::Off, false);
    check("SERVICEBUS_DRAIN_LEASE_RENEW = false", "SERVICEBUS_DRAIN_LEASE_RENEW", Switch::On, true);
    check("SERVICEBUS_DRAIN_SINGLEFLIGHT = true", "SERVICEBUS_DRAIN_SINGLEFLIGHT", Switch::On, false);
    check("SERVICEBUS_DRAIN_SINGLEFLIGHT = false", "SERVICEBUS_DRAIN_SINGLEFLIGHT", Switch::Off, true);
    check("PROJECTION_DRAIN_CLAIM_AWARE = false", "PROJECTION_DRAIN_CLAIM_AWARE", Switch::On, true);
}

/// A lone `PROJECTION_DRAIN_BACKOFF_MIN_SECONDS=20` (above the maximum's default
/// 15) is blamed on the minimum, with its value, not on an unset maximum.
#[test]
fn the_backoff_warning_names_the_variable_that_was_set() {
    let l = load(&[("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", "20")]);
    assert_eq!((l.config.backoff_min, l.config.backoff_max), (Duration::from_secs(15), Duration::from_secs(20)));
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert_eq!(
        (l.warnings[0].variable.as_str(), l.warnings[0].value.as_str()),
        ("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", "20")
    );
    let l = load(&[("PROJECTION_DRAIN_BACKOFF_MIN_SECONDS", "20"), ("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS", "3")]);
    assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
    assert_eq!(l.warnings[0].variable, "PROJECTION_DRAIN_BACKOFF_MAX_SECONDS");
    assert_eq!(l.warnings[0].value, "3");
}

/// An unknown variable with one of drain's prefixes is warned about, naming the
/// closest known setting; the test suites' own `DRAIN_TEST_*` and other prefixes are
/// not.
#[test]
fn an_unknown_variable_with_a_known_prefix_names_the_closest_setting() {
    let check = |name: &str, hint: Option<&str>| {
        let w = unknown_variable(name);
        match hint {
            None => assert!(w.is_none(), "{name}: {w:?}"),
            Some(h) => {
                let w = w.unwrap_or_else(|| panic!("{name} is warned about"));
                assert_eq!(w.variable, name);
                assert!(w.message.contains(&format!("did you mean {h}?")), "{name}: {w}");
                // Before, the value read `""`, as if the variable were set but blank.
                assert_eq!(w.to_string(), format!("{name}=\"<not shown>\": {}", w.message));
            }
        }
    };
    check("SERVICEBUS_DRAIN_SINGLEFLIGT", Some("SERVICEBUS_DRAIN_SINGLEFLIGHT"));
    check("DRAIN_REDIS_ULR", Some("DRAIN_REDIS_URL"));
    check("PROJECTION_DRAIN_BACKOF_MAX_SECONDS", Some("PROJECTION_DRAIN_BACKOFF_MAX_SECONDS"));
    check("SERVICEBUS_ATOMIC_CLAIMS", Some("SERVICEBUS_ATOMIC_CLAIM"));
    check("DRAIN_TEST_REDIS_URL", None);
    check("HOME", None);
    check("REDIS_URL", None);
    let far = unknown_variable("DRAIN_SOMETHING_ELSE_ENTIRELY").expect("warned");
    assert!(!far.message.contains("did you mean"), "{far}");
    let file = parse_file("f.toml", "SERVICEBUS_DRAIN_SINGLEFLIGT = \"on\"").expect("file");
    let l = resolve(&env(&[]), Some(&file), "h").expect("valid");
    assert!(
        l.warnings.iter().any(|w| w.message.contains("did you mean SERVICEBUS_DRAIN_SINGLEFLIGHT?")),
        "{:?}",
        l.warnings
    );
}

/// The binary's defaults (this registry) are the ones drain-core documents for
/// embedders (`TickConfig::new`, `SchedulerConfig::default`): one set of defaults.
/// The binary adds only the lease holder's concurrency, which it derives from its
/// worker slots (1 message at a time x 4 workers).
#[test]
fn the_binarys_defaults_are_the_cores() {
    let c = load(&[]).config;
    let mut core = TickConfig::new("q");
    core.held_concurrency = Some(4);
    assert_eq!(c.tick_config("q"), core);
    assert_eq!(c.scheduler_config(), SchedulerConfig::default());
}

#[test]
fn the_store_url_picks_the_store_by_scheme() {
    let c = load(&[("DRAIN_STORE_URL", "postgresql://app:pg-topsecret@db:5432/app")]).config;
    assert!(c.redis_url.is_none());
    assert_eq!(c.postgres_url.as_ref().map(Secret::expose), Some("postgresql://app:pg-topsecret@db:5432/app"));
    assert!(c.secret_parts().contains(&"pg-topsecret".to_owned()), "the panic hook masks it");
    let c = load(&[("DRAIN_STORE_URL", "rediss://:pw@h:6380")]).config;
    assert_eq!(
        (c.redis_url.as_ref().map(Secret::expose), c.postgres_url.is_none()),
        (Some("rediss://:pw@h:6380"), true)
    );
    let c = load(&[("DRAIN_REDIS_URL", "redis://h:6379")]).config;
    assert!(c.redis_url.is_some() && c.postgres_url.is_none(), "the older name still selects Redis");

    let both = [("DRAIN_STORE_URL", "postgres://h/app"), ("DRAIN_REDIS_URL", "redis://h")];
    let e = resolve(&env(&both), None, "h").unwrap_err().to_string();
    assert!(e.contains("DRAIN_STORE_URL") && e.contains("DRAIN_REDIS_URL") && !e.contains('\n'), "{e}");
    // Both set is fatal even when one comes from the file.
    let file = env(&[("DRAIN_REDIS_URL", "redis://h")]);
    assert!(resolve(&env(&both[..1]), Some(&file), "h").is_err());
    for bad in ["mysql://h/app", "postgres://app:pg-topsecret@h:notaport/app"] {
        let e = resolve(&env(&[("DRAIN_STORE_URL", bad)]), None, "h").unwrap_err().to_string();
        assert!(e.starts_with("DRAIN_STORE_URL=") && !e.contains("pg-topsecret") && !e.contains('\n'), "{e}");
    }
}

#[test]
fn service_bus_sessions_and_dead_letter_properties() {
    let check = |raw: &str, want: Option<&[&str]>, warned: bool| {
        let l = load(&[("DRAIN_SOURCE_SESSIONS", raw)]);
        let want = want.map(|w| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(l.config.source_sessions, want, "{raw:?}");
        assert_eq!(l.warnings.iter().any(|w| w.to_string().contains("DRAIN_SOURCE_SESSIONS")), warned, "{raw:?}");
    };
    check("off", None, false);
    check("", None, false);
    check("ANY", Some(&[]), false);
    check("a, b", Some(&["a", "b"]), false);
    check("a,,b", None, true);
    let c = load(&[]).config;
    assert_eq!((c.source_sessions.clone(), c.max_sessions, c.session_idle), (None, 1, Duration::from_secs(10)));
    assert!(!c.drop_dead_letter_properties);
    assert_eq!(c.tick_config("q").concurrency, 1);
    let l = load(&[("DRAIN_SOURCE_DEAD_LETTER_PROPERTIES", "drop")]);
    assert!(l.config.drop_dead_letter_properties);
    let l = load(&[("DRAIN_SOURCE_DEAD_LETTER_PROPERTIES", "maybe")]);
    assert!(!l.config.drop_dead_letter_properties, "garbage keeps them");
    assert_eq!(l.warnings.len(), 1);
    // With sessions, a session's messages go one at a time, in order.
    let l = load(&[("DRAIN_SOURCE_SESSIONS", "any"), ("SERVICEBUS_DRAIN_CONCURRENCY", "8")]);
    let tick = l.config.tick_config("q");
    assert_eq!((tick.concurrency, tick.held_concurrency), (1, None));
}

//! Security: `rediss://` with a certificate made here, the minimal
//! ACL through the `drain` binary (and `drain doctor` naming each missing right),
//! `DRAIN_KEY_PREFIX` isolation between two tenants on one Redis, no secret in any
//! output, `/metrics` on loopback by default.
//!
//! Every server is a private `redis-server` on a free loopback port (test-servers
//! kills it on drop); every `drain` runs with a bound. Independent binary runs go in
//! parallel threads.

use std::collections::BTreeMap;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use adapter_redis::{RedisConfig, RedisStore};
use drain_core::ports::{Acquire, ClaimState, ClaimStore, LeaseName, LeaseStore, MessageId, Release};
use drain_core::testkit::TestRng;
use drain_core::{ErrorKind, LeaseToken};
use drain_e2e::{drain, free_port, output, redis};
use test_servers::{RedisServer, Reply};

/// The longest one `drain` command may take.
const LIMIT: Duration = Duration::from_secs(60);

/// `drain run --once` settings for a quick tick against Redis: the lease and the
/// claim on, 16 submits at a time (the demo target takes 100 ms per submit).
fn once(url: &str) -> Command {
    let mut cmd = drain();
    cmd.args(["run", "--once"])
        .env("DRAIN_REDIS_URL", url)
        .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on")
        .env("SERVICEBUS_DRAIN_CONCURRENCY", "16");
    cmd
}

/// Run every command at once, each on its own thread; the outputs in order.
fn run_all(cmds: Vec<Command>) -> Vec<Output> {
    let runs: Vec<_> = cmds.into_iter().map(|cmd| thread::spawn(move || output(cmd, LIMIT))).collect();
    runs.into_iter().map(|r| r.join().expect("runner thread")).collect()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The report line of `drain run --once`.
fn report(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "drain run --once failed:\n{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("one JSON line ({e}):\n{}", text(out)))
}

fn keys(server: &RedisServer, pattern: &str) -> BTreeMap<String, Option<String>> {
    let Reply::Array(Some(items)) = server.command(&["KEYS", pattern]).expect("KEYS") else { panic!("KEYS") };
    items
        .into_iter()
        .map(|item| {
            let Reply::Bulk(Some(key)) = item else { panic!("KEYS item") };
            let key = String::from_utf8(key).expect("ASCII key");
            let value = match server.command(&["GET", &key]).expect("GET") {
                Reply::Bulk(Some(v)) => Some(String::from_utf8_lossy(&v).into_owned()),
                _ => None,
            };
            (key, value)
        })
        .collect()
}

/// The rights of the minimal ACL of `drain <mode>` (`run`, `owners`, `leases`), read
/// from docs/operations.md so the test checks what operators are told to grant.
fn acl_of(mode: &str) -> Vec<String> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"))
        .expect("docs/operations.md");
    let user = format!("ACL SETUSER drain-{mode} on");
    let start = doc.find(&user).unwrap_or_else(|| panic!("{user} in docs/operations.md"));
    let rest = &doc[start..];
    let block = &rest[..rest.find("\n\n").or_else(|| rest.find("```")).expect("end of the block")];
    let rights: Vec<String> = block.split_whitespace().filter(|w| w.starts_with('+')).map(str::to_owned).collect();
    assert!(rights.len() >= 4, "{block}");
    rights
}

/// What one user needs for `drain run`, `drain doctor` and `drain leases`.
fn minimal_rights() -> Vec<String> {
    let mut rights = acl_of("run");
    for r in acl_of("leases") {
        if !rights.contains(&r) {
            rights.push(r);
        }
    }
    rights
}

/// `user` with `password`, `rights` and the keys `<prefix>:*` and channels
/// `<prefix>:wake:*`.
fn set_user(server: &RedisServer, user: &str, password: &str, prefix: &str, rights: &[String]) {
    let rights: Vec<&str> = rights.iter().map(String::as_str).collect();
    let (keys, channels) = (format!("{prefix}:*"), format!("{prefix}:wake:*"));
    server.acl_user(user, password, &[&keys], &[&channels], &rights).expect("ACL SETUSER");
}

// ---------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------

/// A CA and a server certificate for 127.0.0.1, made with the openssl CLI in a
/// private directory (removed on drop).
struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// Fails the test, saying so, when openssl is not installed.
    fn generate() -> Certs {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("drain-tls-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let certs = Certs { dir };
        fs::write(
            certs.path("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write ext");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let steps: [Vec<&str>; 3] = [
            [
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=drain test CA"],
            ]
            .concat(),
            [&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]].concat(),
            vec![
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        ];
        for args in steps {
            let run = Command::new("openssl").args(&args).current_dir(&certs.dir).stdout(Stdio::null()).output();
            match run {
                Ok(out) if out.status.success() => {}
                Ok(out) => panic!("openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    panic!("openssl is not installed, so this test cannot make its certificate: install openssl")
                }
                Err(e) => panic!("cannot run openssl: {e}"),
            }
        }
        certs
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `rediss://` against a server whose certificate a CA made here signed: with the
/// system roots the handshake fails with a typed, temporary `Connection` error that
/// names the endpoint and TLS and never the password; with
/// `RedisConfig::tls_ca_file` every operation works over TLS (the SCAN pool too);
/// the `drain` binary takes the CA from `DRAIN_REDIS_CA_FILE`; a CA file that cannot
/// be used is a `Config` error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_works_with_a_trusted_ca_and_fails_typed_without_it() {
    let certs = Certs::generate();
    let tls_port = free_port().to_string();
    let server = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &certs.arg("server.pem"),
        "--tls-key-file",
        &certs.arg("server.key"),
        "--tls-ca-cert-file",
        &certs.arg("ca.pem"),
        "--tls-auth-clients",
        "no",
        "--requirepass",
        "Tls-Pw-7q2x",
    ]);
    let url = format!("rediss://:Tls-Pw-7q2x@127.0.0.1:{tls_port}");
    let timeouts = |c: RedisConfig| c.timeouts(Duration::from_secs(2), Duration::from_secs(2));

    let e = RedisStore::connect(timeouts(RedisConfig::new(&url))).await.expect_err("the test CA is not a system root");
    assert_eq!(e.kind, ErrorKind::Connection, "{e}");
    assert!(e.is_temporary(), "{e}");
    assert!(e.message.contains(&format!("127.0.0.1:{tls_port}")) && e.message.contains("TLS"), "{e}");
    assert!(!e.message.contains("Tls-Pw-7q2x"), "{e}");

    let store =
        RedisStore::connect(timeouts(RedisConfig::new(&url).tls_ca_file(certs.path("ca.pem")).key_prefix("tls")))
            .await
            .expect("trusting the test CA");
    let me = LeaseToken::generate("tls", &mut TestRng::new(1));
    let lease = LeaseName::queue("q");
    let got = store.acquire(&lease, &me, Duration::from_secs(30)).await.expect("acquire");
    assert!(matches!(got, Acquire::Acquired { .. }), "{got:?}");
    let claims = [MessageId::from("m1")];
    assert_eq!(
        store.claim_batch("q", &claims, &me, Duration::from_secs(30)).await.expect("claim"),
        [ClaimState::Claimed]
    );
    assert_eq!(store.scan().await.expect("scan over the TLS pool").len(), 3);
    assert_eq!(store.release(&lease, &me).await.expect("release"), Release::Released);
    let calls = server.command_calls().expect("commandstats");
    assert!(calls.get("evalsha").is_some_and(|&n| n >= 3) && calls.get("scan") == Some(&1), "{calls:?}");

    let junk = certs.path("server.ext");
    for (config, hint) in [
        (RedisConfig::new(&url).tls_ca_file(certs.path("missing.pem")), "cannot read"),
        (RedisConfig::new(&url).tls_ca_file(&junk), "no PEM certificate"),
        (RedisConfig::new(server.url()).tls_ca_file(certs.path("ca.pem")), "not rediss://"),
    ] {
        let e = RedisStore::connect(config).await.expect_err("an unusable CA file");
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(e.message.contains(hint), "{e}");
    }

    // The binary: DRAIN_REDIS_CA_FILE, and without it a fail-open tick that submits nothing.
    let mut trusted = once(&url);
    trusted.env("DRAIN_REDIS_CA_FILE", certs.path("ca.pem"));
    let mut doctor = drain();
    doctor.arg("doctor").env("DRAIN_REDIS_URL", &url).env("DRAIN_REDIS_CA_FILE", certs.path("ca.pem"));
    let outs = run_all(vec![trusted, once(&url), doctor]);
    let r = report(&outs[0]);
    assert_eq!(r["lease"].as_str(), Some("held"), "{r}");
    assert!(r["fence"].as_u64().is_some(), "{r}");
    assert!(r["submitted"].as_u64().is_some_and(|n| n > 0), "{r}");
    let r = report(&outs[1]);
    assert_eq!((r["lease"].as_str(), r["submitted"].as_u64()), (Some("fail_open"), Some(0)), "{r}");
    assert!(text(&outs[1]).contains("TLS"), "the log says why: {}", text(&outs[1]));
    assert!(outs[2].status.success(), "doctor over TLS: {}", text(&outs[2]));
    for out in &outs {
        assert!(!text(out).contains("Tls-Pw-7q2x"), "{}", text(out));
    }
}

// ---------------------------------------------------------------------------------
// ACL
// ---------------------------------------------------------------------------------

/// Each subcommand runs under exactly its ACL of docs/operations.md, with nothing
/// refused (`drain run --once` holds the lease and submits; `drain owners` records
/// every seeded item; `drain leases` lists), and `drain doctor --for` it passes; a
/// user missing any one of its rights fails `drain doctor --for` it with exit 1 and a
/// FAIL line naming that right (`+script|load` only warns: scripts are then cached by
/// `EVAL`). Before, one ACL lacked `llen` and `hincrby` for `drain owners`, and
/// doctor passed it anyway.
#[test]
fn each_subcommand_runs_under_its_acl_and_doctor_names_each_missing_right() {
    let server = redis();
    let url = |user: &str| format!("redis://{user}:Acl-Pw-3k9@127.0.0.1:{}", server.port());
    let doctor = |user: &str, mode: &str| {
        let mut c = drain();
        c.args(["doctor", "--for", mode]).env("DRAIN_REDIS_URL", url(user)).env("DRAIN_INSTANCE_ID", user);
        c
    };
    let mut cmds = Vec::new();
    let mut expected = Vec::new();
    for mode in ["run", "owners", "leases"] {
        let rights = acl_of(mode);
        let user = format!("drain-{mode}");
        set_user(&server, &user, "Acl-Pw-3k9", "drain", &rights);
        cmds.push(doctor(&user, mode));
        expected.push((mode, None));
        for right in &rights {
            let user = format!("{mode}-no{}", right.replace(['+', '|'], "-"));
            let others: Vec<String> = rights.iter().filter(|r| *r != right).cloned().collect();
            set_user(&server, &user, "Acl-Pw-3k9", "drain", &others);
            cmds.push(doctor(&user, mode));
            expected.push((mode, Some(right.clone())));
        }
    }
    let outs = run_all(cmds);
    for ((mode, dropped), out) in expected.iter().zip(&outs) {
        let shown = text(out);
        assert!(!shown.contains("Acl-Pw-3k9"), "{shown}");
        let Some(right) = dropped else {
            assert!(out.status.success(), "doctor --for {mode} passes with its ACL:\n{shown}");
            continue;
        };
        let name = right.trim_start_matches('+');
        if right == "+script|load" {
            assert!(out.status.success(), "{mode} without {right} only warns:\n{shown}");
            assert!(shown.lines().any(|l| l.starts_with("warn") && l.contains(name)), "{mode} {right}:\n{shown}");
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "doctor --for {mode} fails without {right}:\n{shown}");
        assert!(
            shown.lines().any(|l| l.starts_with("FAIL") && l.contains(name)),
            "a FAIL line names {right} for {mode}:\n{shown}"
        );
    }

    // The subcommands themselves, each under exactly its ACL.
    let r = report(&run_all(vec![once(&url("drain-run"))])[0]);
    assert_eq!(r["lease"].as_str(), Some("held"), "{r}");
    assert!(r["fence"].as_u64().is_some(), "{r}");
    assert!(r["submitted"].as_u64().is_some_and(|n| n > 0), "{r}");
    let mut seed = drain();
    seed.args(["owners", "--owners", "5", "--seed", "50", "--seed-only"]).env("DRAIN_REDIS_URL", url("drain-owners"));
    let mut owners = drain();
    owners
        .args(["owners", "--owners", "5", "--batch", "5", "--pass-ms", "100"])
        .env("DRAIN_REDIS_URL", url("drain-owners"));
    let mut leases = drain();
    leases.args(["leases", "--json"]).env("DRAIN_REDIS_URL", url("drain-leases"));
    let outs = run_all(vec![seed]);
    assert!(outs[0].status.success(), "seeding under the owners ACL: {}", text(&outs[0]));
    let outs = run_all(vec![owners, leases]);
    for out in &outs {
        let log = text(out);
        assert!(out.status.success(), "{log}");
        assert!(!log.contains("NOPERM") && !log.contains("permission"), "nothing refused: {log}");
    }
    let owners: serde_json::Value = serde_json::from_slice(&outs[0].stdout).expect("owners report");
    assert_eq!((&owners["processed"], &owners["complete"]), (&50.into(), &true.into()), "{owners}");
    let listing: serde_json::Value = serde_json::from_slice(&outs[1].stdout).expect("leases --json");
    assert!(listing["owner_claims"].is_array(), "{listing}");
}

/// `drain doctor`, for each subcommand and with every switch that makes it probe
/// more, leaves nothing behind on a fresh server: its probe lease's fence (before:
/// a fence key with no TTL on every run, which `drain leases` then listed forever),
/// its claims, its backlog, in-flight and processed probe keys, its waiter list.
#[test]
fn doctor_leaves_nothing_behind() {
    let server = redis();
    for mode in ["run", "owners", "leases"] {
        let mut c = drain();
        c.args(["doctor", "--for", mode])
            .env("DRAIN_REDIS_URL", server.url())
            .env("SERVICEBUS_DRAIN_SINGLEFLIGHT", "on");
        let out = output(c, LIMIT);
        assert!(out.status.success(), "{mode}: {}", text(&out));
        assert_eq!(server.command(&["DBSIZE"]).expect("DBSIZE"), Reply::Int(0), "{mode}: {:?}", keys(&server, "*"));
    }
}

// ---------------------------------------------------------------------------------
// Tenants
// ---------------------------------------------------------------------------------

/// Two tenants on one Redis, each with its own `DRAIN_KEY_PREFIX` and an ACL user
/// confined to it: tenant B's ticks (two at once, then one more) run clean — had they
/// touched a key outside `tenant-b:` the ACL would have refused it and the tick
/// would have failed open or closed — and every key and value of tenant A is
/// exactly as tenant A's own tick left it; fences count per tenant.
#[test]
fn two_tenants_on_one_redis_never_touch_each_others_keys() {
    let server = redis();
    let rights = minimal_rights();
    set_user(&server, "tenant-a", "Tenant-Pw-a1", "tenant-a", &rights);
    set_user(&server, "tenant-b", "Tenant-Pw-b2", "tenant-b", &rights);
    let tenant = |name: &str, pw: &str| {
        let mut c = once(&format!("redis://{name}:{pw}@127.0.0.1:{}", server.port()));
        c.env("DRAIN_KEY_PREFIX", name);
        c
    };
    // A clean tick: the lease held, no store error (an ACL refusal would show as one).
    let clean = |out: &Output| {
        let r = report(out);
        assert_eq!(r["lease"], "held", "{r}");
        assert!(r["received"].as_u64().is_some_and(|n| n > 0), "{r}");
        let log = text(out);
        assert!(!log.contains("fail-open") && !log.contains("fail-closed"), "{log}");
        r
    };

    let a = clean(&run_all(vec![tenant("tenant-a", "Tenant-Pw-a1")])[0]);
    assert!(a["fence"].as_u64().is_some(), "{a}");
    assert!(a["submitted"].as_u64().is_some_and(|n| n > 0), "{a}");
    let before = keys(&server, "tenant-a:*");
    assert!(before.len() >= 10 && before.keys().any(|k| k.starts_with("tenant-a:msg:")), "{before:?}");

    // The demo queue has the same message ids in both tenants: B submits them anyway
    // (A's done claims are not B's).
    let overlapping = run_all(vec![tenant("tenant-b", "Tenant-Pw-b2"), tenant("tenant-b", "Tenant-Pw-b2")]);
    let ran: Vec<serde_json::Value> =
        overlapping.iter().filter(|o| report(o)["skipped"] != "locked").map(&clean).collect();
    assert!(!ran.is_empty(), "at most one of two overlapping ticks is skipped");
    let submitted: u64 = ran.iter().map(|r| r["submitted"].as_u64().unwrap_or(0)).sum();
    assert_eq!(submitted, a["submitted"].as_u64().unwrap_or(0), "tenant B submits its own copies once: {ran:?}");
    let b = clean(&run_all(vec![tenant("tenant-b", "Tenant-Pw-b2")])[0]);
    let b_first = ran.iter().filter_map(|r| r["fence"].as_u64()).max().expect("B's first fences");
    assert!(b["fence"].as_u64().is_some_and(|f| f > b_first), "tenant B's own fence counter: {b}");
    assert_eq!(b["submitted"], 0, "B's done claims hold for B: {b}");

    assert_eq!(keys(&server, "tenant-a:*"), before, "tenant A's keys and values are untouched");
    let all = keys(&server, "*");
    assert!(all.keys().all(|k| k.starts_with("tenant-a:") || k.starts_with("tenant-b:")), "{all:?}");
    assert!(all.keys().any(|k| k.starts_with("tenant-b:msg:")));
}

// ---------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------

/// Passwords in `DRAIN_REDIS_URL` (right, wrong, on a server that is down, over TLS
/// to a plain server, with `/`, `#` and `,` unencoded, in a Cluster seed list), in
/// AMQP URLs and a Service Bus connection string: no line of stdout or stderr of
/// `drain run --once`, `drain doctor`, `drain leases` or `drain config` (text and
/// JSON) shows one, with logs at `trace`.
#[test]
fn no_secret_in_any_output_or_log() {
    let server = redis();
    const SECRETS: [&str; 6] =
        ["Pw-Right-9f3Zq", "Pw-Wrong-4kT1", "Pw-Down-8sQ2", "Pw/Od,d#x7Lm", "Amqp-Pw-5hN", "SasKey5x9Y"];
    set_user(&server, "drain", SECRETS[0], "drain", &minimal_rights());
    let port = server.port();
    let down = free_port();
    let urls = [
        format!("redis://drain:{}@127.0.0.1:{port}", SECRETS[0]),
        format!("redis://drain:{}@127.0.0.1:{port}", SECRETS[1]),
        format!("redis://drain:{}@127.0.0.1:{down}", SECRETS[2]),
        format!("rediss://drain:{}@127.0.0.1:{port}", SECRETS[0]),
        format!("redis://drain:{}@127.0.0.1:{port}", SECRETS[3]),
    ];
    let mut cmds = Vec::new();
    for url in &urls {
        for format in ["json", "text"] {
            let mut c = once(url);
            c.env("DRAIN_LOG", "trace").env("DRAIN_LOG_FORMAT", format);
            cmds.push(c);
        }
        for sub in [&["doctor"][..], &["leases"], &["leases", "--json"]] {
            let mut c = drain();
            c.args(sub).env("DRAIN_REDIS_URL", url).env("DRAIN_LOG", "trace");
            cmds.push(c);
        }
    }
    let seeds = format!("redis://drain:{0}@127.0.0.1:{port},redis://drain:{0}@127.0.0.1:{down}", SECRETS[0]);
    for args in [&["config"][..], &["config", "--json"]] {
        let mut c = drain();
        c.args(args)
            .env("DRAIN_REDIS_URL", &seeds)
            .env("DRAIN_REDIS_CLUSTER", "on")
            .env("DRAIN_SOURCE_URL", format!("amqp://guest:{}@127.0.0.1:{down}/requests", SECRETS[4]))
            .env(
                "DRAIN_TARGET_URL",
                format!(
                    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={};EntityPath=q",
                    SECRETS[5]
                ),
            );
        cmds.push(c);
    }
    let outs = run_all(cmds);
    for out in &outs {
        let shown = text(out);
        assert!(!shown.contains("panicked"), "{shown}");
        for secret in SECRETS {
            let pieces = secret.split(['/', ',', '#']).filter(|p| p.len() >= 3);
            for piece in std::iter::once(secret).chain(pieces) {
                assert!(!shown.contains(piece), "{piece:?} appears in:\n{shown}");
            }
        }
    }
    // The redaction was exercised, not skipped: the URL is logged, masked.
    for out in &outs[..2] {
        assert!(text(out).contains("drain:***@127.0.0.1"), "{}", text(out));
    }
    assert!(text(&outs[outs.len() - 1]).contains("***"), "{}", text(&outs[outs.len() - 1]));
    let wrong = text(&outs[5]);
    assert!(wrong.contains("refused to authenticate"), "the auth failure is explained: {wrong}");
}

// ---------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------

/// `/metrics` binds loopback unless told otherwise: the default of
/// `DRAIN_METRICS_ADDR` is a loopback address, and a value that is not `host:port`
/// falls back to it (with a warning) instead of to a wildcard address.
#[test]
fn metrics_bind_loopback_by_default() {
    let effective = |value: Option<&str>| {
        let mut c = drain();
        c.args(["config", "--json"]).env_remove("DRAIN_METRICS_ADDR");
        if let Some(v) = value {
            c.env("DRAIN_METRICS_ADDR", v);
        }
        let out = output(c, LIMIT);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("config --json");
        let s = v["settings"].as_array().expect("settings").iter().find(|s| s["name"] == "DRAIN_METRICS_ADDR").cloned();
        (s.expect("DRAIN_METRICS_ADDR listed"), v["warnings"].as_array().map_or(0, Vec::len))
    };
    // A value that fell back to the default shows origin `default` (the warning says what was set).
    for (value, origin, warnings) in
        [(None, "default", 0), (Some("0.0.0.0"), "default", 1), (Some("*:9464"), "default", 1)]
    {
        let (s, w) = effective(value);
        let addr: SocketAddr = s["value"].as_str().expect("value").parse().expect("host:port");
        assert!(addr.ip().is_loopback(), "{value:?} -> {addr}");
        assert_eq!((s["origin"].as_str(), w), (Some(origin), warnings), "{value:?}: {s}");
    }
}

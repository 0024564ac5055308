//! `cargo xtask arch`: the architecture invariants of docs/architecture.md, from
//! `cargo metadata`, drain-core's clippy.toml (its purity rules, which the `clippy`
//! gate enforces) and a scan of drain-core's source for what clippy cannot say.

use std::fs;

use crate::files::{project_files, rust_files_under};
use crate::metadata::{DepKind, Metadata, Package};
use crate::scan::{self, Word};
use crate::util::{Failure, GateResult, Outcome, project_root, rel};
use crate::vocabulary;

/// The pure core.
const CORE: &str = "drain-core";
/// The composition root, the only crate that knows every adapter.
const APP: &str = "drain-app";
/// The fleet simulator: drain-core's code on in-memory stores, nothing else.
const SIMULATOR: &str = "drain-simulate";
/// Adapters are the members whose name starts with this.
const ADAPTER_PREFIX: &str = "adapter-";
/// Test support (private servers, the Service Bus test broker, the benches' shared
/// code): members whose name starts with one of these.
const TEST_SUPPORT_PREFIXES: &[&str] = &["test-", "bench-"];
/// The end-to-end test package, whose load program and benches use test support as
/// normal dependencies (a binary cannot use dev-dependencies).
const E2E: &str = "drain-e2e";

/// Crates drain-core must not reach over normal dependencies (a trailing `*` matches
/// any suffix): async runtimes, Redis, AMQP, exporters, HTTP.
const BANNED: &[&str] =
    &["tokio", "redis", "deadpool*", "fe2o3*", "metrics-exporter*", "hyper", "reqwest", "mio", "async-std", "smol"];

const RANDOM: &str = "OS randomness; take an injected `Rng`";

/// Words drain-core's source must not use that clippy's `disallowed-types` misses:
/// the OS generators are unit structs, used as values.
const CORE_WORDS: &[Word] = &[("OsRng", RANDOM), ("SysRng", RANDOM), ("getrandom", RANDOM)];

/// drain-core's clippy configuration, relative to its directory.
const CORE_CLIPPY: &str = "clippy.toml";

/// Paths drain-core's clippy.toml must disallow: the clock, OS randomness, the
/// environment, I/O and threads (the `clippy` gate enforces them).
const CORE_DISALLOWED: &[&str] = &[
    "std::time::Instant::now",
    "std::time::SystemTime::now",
    "rand::rng",
    "rand::random",
    "std::env::var",
    "std::env::var_os",
    "std::env::vars",
    "std::env::vars_os",
    "std::fs::read",
    "std::fs::write",
    "std::fs::File",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::process::Command",
    "std::thread::spawn",
    "std::thread::Builder",
];

/// Run the gate.
pub(crate) fn run() -> GateResult {
    let meta = Metadata::load()?;
    let mut violations = Vec::new();
    violations.extend(banned_dependencies(&meta)?);
    violations.extend(workspace_edges(&meta));
    violations.extend(core_source(&meta)?);
    violations.extend(core_lints(&meta)?);
    violations.extend(core_vocabulary(&meta)?);
    violations.extend(production_build(&meta)?);
    violations.extend(code_references()?);
    if violations.is_empty() {
        return Ok(Outcome::Passed);
    }
    for v in &violations {
        println!("  {v}");
    }
    Err(Failure::new(format!("{} architecture violation(s), listed above", violations.len()))
        .fix("remove the dependency, call, word or reference (see docs/architecture.md); trace a crate with `cargo tree -p drain-core -e normal -i <crate>`"))
}

/// Whether a crate name is on the ban list.
fn is_banned(name: &str) -> bool {
    BANNED.iter().any(|b| match b.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == *b,
    })
}

fn banned_dependencies(meta: &Metadata) -> Result<Vec<String>, Failure> {
    let core = meta.member(CORE).ok_or_else(|| Failure::new(format!("no workspace member is called {CORE}")))?;
    let closure = meta.normal_closure(core);
    let mut out = Vec::new();
    for id in closure.keys() {
        let name = meta.name(id);
        if !is_banned(name) {
            continue;
        }
        let mut chain = vec![name];
        let mut at = id;
        while let Some(Some(parent)) = closure.get(at) {
            chain.push(meta.name(parent));
            at = parent;
        }
        chain.reverse();
        out.push(format!("{CORE} must not depend on `{name}` (normal dependency path: {})", chain.join(" -> ")));
    }
    Ok(out)
}

/// Whether `name` is a test-support crate.
fn is_test_support(name: &str) -> bool {
    TEST_SUPPORT_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `member` may depend on the test-support crate `dep` with these kinds: test
/// support depends on no workspace crate, and everything but the end-to-end package
/// (and test support itself) takes it as a dev-dependency only, so it is never
/// linked into the `drain` binary or a library users embed.
fn test_support_rule(member: &str, dep: &str, kinds: &[DepKind]) -> Option<&'static str> {
    if is_test_support(member) {
        return Some("test support must not depend on workspace crates (it tests them from outside)");
    }
    if is_test_support(dep) && member != E2E && kinds.iter().any(|k| *k != DepKind::Dev) {
        return Some("test support is a dev-dependency only (never in the drain binary or a library)");
    }
    None
}

/// Why `member` must not depend on the workspace member `dep` (any kind of
/// dependency), if it must not.
fn member_rule(member: &str, dep: &str) -> Option<&'static str> {
    let is_adapter = |name: &str| name.starts_with(ADAPTER_PREFIX);
    if member == CORE {
        Some("drain-core must not depend on any workspace crate")
    } else if is_adapter(member) && is_adapter(dep) {
        Some("adapters must not depend on each other")
    } else if member == SIMULATOR && dep != CORE && !is_test_support(dep) {
        Some("the simulator runs drain-core's code on in-memory stores: it depends on drain-core alone")
    } else if member == "xtask" {
        Some("xtask must not depend on workspace crates (it must build when they do not)")
    } else {
        None
    }
}

/// Rules between workspace members, over every kind of dependency (normal, dev,
/// build): the core depends on no member; adapters only on the core; the simulator
/// only on the core (and test support); nothing but drain-app depends on every
/// adapter; xtask on no member; test support only as a dev-dependency, and on no
/// member itself.
fn workspace_edges(meta: &Metadata) -> Vec<String> {
    let is_adapter = |name: &str| name.starts_with(ADAPTER_PREFIX);
    let adapters: Vec<&str> = meta.members.iter().map(|id| meta.name(id)).filter(|n| is_adapter(n)).collect();
    let mut out = Vec::new();
    for member in &meta.members {
        let name = meta.name(member);
        let mut deps: Vec<&str> = meta
            .edges
            .get(member)
            .into_iter()
            .flatten()
            .filter(|e| e.pkg != *member && meta.members.contains(&e.pkg))
            .map(|e| meta.name(&e.pkg))
            .collect();
        deps.sort_unstable();
        deps.dedup();
        for dep in &deps {
            if let Some(rule) = member_rule(name, dep) {
                out.push(format!("{name} depends on {dep}: {rule}"));
            }
        }
        for edge in meta.edges.get(member).into_iter().flatten() {
            if edge.pkg == *member || !meta.members.contains(&edge.pkg) {
                continue;
            }
            if let Some(rule) = test_support_rule(name, meta.name(&edge.pkg), &edge.kinds) {
                out.push(format!("{name} depends on {}: {rule}", meta.name(&edge.pkg)));
            }
        }
        let knows_every_adapter = adapters.len() > 1 && adapters.iter().all(|a| deps.contains(a));
        if name != APP && knows_every_adapter {
            out.push(format!("{name} depends on every adapter: only {APP} composes them"));
        }
    }
    out
}

fn core_source(meta: &Metadata) -> Result<Vec<String>, Failure> {
    let core = meta.member(CORE).map(|id| &meta.packages[id]);
    let src = core
        .and_then(|p| p.manifest_path.parent())
        .map(|dir| dir.join("src"))
        .ok_or_else(|| Failure::new(format!("cannot find {CORE}'s source directory")))?;
    let mut out = Vec::new();
    for file in rust_files_under(&src) {
        let text =
            fs::read_to_string(&file).map_err(|e| Failure::new(format!("cannot read {}: {e}", file.display())))?;
        for hit in scan::find(&text, CORE_WORDS) {
            out.push(format!("{}:{}: `{}` {}", rel(&file), hit.line, hit.needle, hit.why));
        }
    }
    Ok(out)
}

/// The entries of [`CORE_DISALLOWED`] missing from drain-core's clippy.toml.
fn core_lints(meta: &Metadata) -> Result<Vec<String>, Failure> {
    let dir = meta
        .member(CORE)
        .and_then(|id| meta.packages[id].manifest_path.parent().map(std::path::Path::to_path_buf))
        .ok_or_else(|| Failure::new(format!("cannot find {CORE}'s directory")))?;
    let file = dir.join(CORE_CLIPPY);
    let text = fs::read_to_string(&file).unwrap_or_default();
    Ok(missing_lints(&text).into_iter().map(|p| format!("{}: `{p}` is not disallowed", rel(&file))).collect())
}

/// The paths of [`CORE_DISALLOWED`] that no `path = "…"` entry of `clippy_toml` names.
fn missing_lints(clippy_toml: &str) -> Vec<&'static str> {
    CORE_DISALLOWED.iter().copied().filter(|p| !clippy_toml.contains(&format!("path = \"{p}\""))).collect()
}

/// drain-core's feature that carries test code (contract suites, broken stores,
/// recorders): a production build of drain-app (or of the simulator it links) must
/// not turn it on.
const TEST_ONLY_FEATURE: &str = "testkit";

fn production_build(meta: &Metadata) -> Result<Vec<String>, Failure> {
    let package = |name: &str| {
        meta.member(name)
            .map(|id| &meta.packages[id])
            .ok_or_else(|| Failure::new(format!("no workspace member is called {name}")))
    };
    let core = package(CORE)?;
    let mut out = test_features_in_production(package(APP)?, core);
    out.extend(test_features_in_production(package(SIMULATOR)?, core));
    Ok(out)
}

/// The violations when `app`'s normal dependency on `core`, with `app`'s default
/// features, turns on the test-only feature (directly or through another feature).
fn test_features_in_production(app: &Package, core: &Package) -> Vec<String> {
    let mut out = Vec::new();
    for dep in app.deps.iter().filter(|d| d.name == core.name && d.kind == DepKind::Normal) {
        let mut asked: Vec<(String, String)> =
            dep.features.iter().map(|f| (f.clone(), format!("its dependency on {}", core.name))).collect();
        if dep.default_features {
            asked.push(("default".to_owned(), format!("{}'s default features", core.name)));
        }
        let prefixes = [format!("{}/", core.name), format!("{}?/", core.name)];
        for (feature, via) in expand(&app.features, "default") {
            if let Some(f) = prefixes.iter().find_map(|p| feature.strip_prefix(p.as_str())) {
                asked.push((f.to_owned(), format!("its feature `{via}`")));
            }
        }
        for (feature, via) in asked {
            if expand(&core.features, &feature).iter().any(|(f, _)| f == TEST_ONLY_FEATURE) {
                out.push(format!(
                    "{} enables {}'s `{TEST_ONLY_FEATURE}` in its production build (through {via}, feature `{feature}`): use `memory` for the in-memory ports",
                    app.name, core.name
                ));
            }
        }
    }
    out
}

/// `start` and every feature it turns on in `table`, each with the feature of the
/// table that named it.
fn expand(table: &std::collections::BTreeMap<String, Vec<String>>, start: &str) -> Vec<(String, String)> {
    let mut seen = vec![(start.to_owned(), start.to_owned())];
    let mut i = 0;
    while i < seen.len() {
        let (current, _) = seen[i].clone();
        for next in table.get(&current).into_iter().flatten() {
            if !seen.iter().any(|(f, _)| f == next) {
                seen.push((next.clone(), current.clone()));
            }
        }
        i += 1;
    }
    seen
}

/// Directories of drain-core whose text (documentation included) must not speak
/// Redis: the library and the examples embedders copy.
const CORE_VOCABULARY_DIRS: &[&str] = &["src", "examples"];

fn core_vocabulary(meta: &Metadata) -> Result<Vec<String>, Failure> {
    let dir = meta
        .member(CORE)
        .and_then(|id| meta.packages[id].manifest_path.parent().map(std::path::Path::to_path_buf))
        .ok_or_else(|| Failure::new(format!("cannot find {CORE}'s directory")))?;
    let mut out = Vec::new();
    for sub in CORE_VOCABULARY_DIRS {
        for file in rust_files_under(&dir.join(sub)) {
            let text =
                fs::read_to_string(&file).map_err(|e| Failure::new(format!("cannot read {}: {e}", file.display())))?;
            for hit in vocabulary::find(&text, vocabulary::REDIS_WORDS) {
                out.push(format!("{}:{}: `{}` {}", rel(&file), hit.line, hit.found, hit.why));
            }
        }
    }
    Ok(out)
}

/// The one file that must name what the reference check refuses.
const VOCABULARY_SOURCE: &str = "xtask/src/vocabulary.rs";

/// Source files whose text is code (or a manifest, a script).
fn is_code(path: &std::path::Path) -> bool {
    let code_ext = matches!(path.extension().and_then(|e| e.to_str()), Some("rs" | "lua" | "toml" | "sh" | "py"));
    code_ext && path != std::path::Path::new(VOCABULARY_SOURCE)
}

fn code_references() -> Result<Vec<String>, Failure> {
    let root = project_root();
    let mut out = Vec::new();
    for file in project_files(&root).into_iter().filter(|f| is_code(f)) {
        let Ok(text) = fs::read_to_string(root.join(&file)) else { continue };
        for hit in vocabulary::references(&text) {
            out.push(format!("{}:{}: `{}` {}", file.display(), hit.line, hit.found, hit.why));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ban_list_matches_names_and_prefixes() {
        let check = |name: &str, banned: bool| assert_eq!(is_banned(name), banned, "{name}");
        check("tokio", true);
        check("redis", true);
        check("deadpool-redis", true);
        check("fe2o3-amqp", true);
        check("metrics-exporter-prometheus", true);
        check("hyper", true);
        check("mio", true);
        check("tokio-macros", false);
        check("metrics", false);
        check("futures", false);
        check("miow", false);
        check("redis-test", false);
    }

    #[test]
    fn test_support_is_a_dev_dependency_of_everything_but_the_e2e_tests() {
        use DepKind::{Build, Dev, Normal};
        let check = |member: &str, dep: &str, kinds: &[DepKind], allowed: bool| {
            assert_eq!(test_support_rule(member, dep, kinds).is_none(), allowed, "{member} -> {dep} {kinds:?}");
        };
        check("adapter-servicebus", "test-servicebus", &[Dev], true);
        check("adapter-servicebus", "test-servicebus", &[Normal], false);
        check("adapter-redis", "test-servers", &[Dev, Build], false);
        check("drain-app", "test-servicebus", &[Normal, Dev], false);
        check("drain-e2e", "test-servicebus", &[Normal], true);
        check("drain-e2e", "test-servers", &[Normal, Dev], true);
        check("test-servicebus", "drain-core", &[Dev], false);
        check("test-servers", "test-servicebus", &[Normal], false);
        check("adapter-redis", "bench-support", &[Dev], true);
        check("adapter-redis", "bench-support", &[Normal], false);
        check("drain-e2e", "bench-support", &[Normal], true);
        check("bench-support", "drain-core", &[Normal], false);
        check("drain-app", "drain-core", &[Normal], true);
    }

    #[test]
    fn member_rules() {
        let check = |member: &str, dep: &str, allowed: bool| {
            assert_eq!(member_rule(member, dep).is_none(), allowed, "{member} -> {dep}");
        };
        check("drain-core", "drain-simulate", false);
        check("drain-core", "test-servers", false);
        check("adapter-redis", "drain-core", true);
        check("adapter-redis", "adapter-metrics", false);
        check("drain-simulate", "drain-core", true);
        check("drain-simulate", "test-servers", true);
        check("drain-simulate", "drain-runtime", false);
        check("drain-simulate", "adapter-redis", false);
        check("drain-app", "drain-simulate", true);
        check("drain-app", "adapter-redis", true);
        check("xtask", "drain-core", false);
    }

    #[test]
    fn core_source_words() {
        let check = |src: &str, expected: &[&str]| {
            let got: Vec<&str> = scan::find(src, CORE_WORDS).iter().map(|h| h.needle).collect();
            assert_eq!(got, expected, "{src}");
        };
        check("let r = StdRng::try_from_rng(&mut rand::rngs::SysRng);", &["SysRng"]);
        check("use rand::rngs::OsRng;", &["OsRng"]);
        check("getrandom::fill(&mut buf)", &["getrandom"]);
        check("/// never uses `SysRng`", &[]);
        check("use rand::{rngs::StdRng, Rng, SeedableRng};", &[]);
    }

    #[test]
    fn core_clippy_toml_holds_every_rule() {
        let full: String =
            CORE_DISALLOWED.iter().map(|p| format!("    {{ path = \"{p}\", reason = \"r\" }},\n")).collect();
        assert_eq!(missing_lints(&full), Vec::<&str>::new());
        let without_clock = full.replace("std::time::Instant::now", "std::time::Instant::elapsed");
        assert_eq!(missing_lints(&without_clock), vec!["std::time::Instant::now"]);
        assert_eq!(missing_lints("").len(), CORE_DISALLOWED.len());
        let real = fs::read_to_string(project_root().join("crates/drain-core").join(CORE_CLIPPY)).expect("clippy.toml");
        assert_eq!(missing_lints(&real), Vec::<&str>::new(), "crates/drain-core/clippy.toml");
    }

    #[test]
    fn production_build_features() {
        let table = |entries: &[(&str, &[&str])]| {
            entries.iter().map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect())).collect()
        };
        let core = Package {
            name: "drain-core".to_owned(),
            manifest_path: std::path::PathBuf::new(),
            deps: Vec::new(),
            features: table(&[("default", &[]), ("memory", &[]), ("testkit", &["memory"]), ("all", &["testkit"])]),
            targets: Vec::new(),
        };
        let app = |features: &[&str], kind: DepKind, own: &[(&str, &[&str])]| Package {
            name: "drain-app".to_owned(),
            manifest_path: std::path::PathBuf::new(),
            deps: vec![crate::metadata::Declared {
                name: "drain-core".to_owned(),
                rename: None,
                kind,
                optional: false,
                default_features: true,
                features: features.iter().map(|s| (*s).to_owned()).collect(),
            }],
            features: table(own),
            targets: Vec::new(),
        };
        let check = |app: Package, expected: usize| {
            let got = test_features_in_production(&app, &core);
            assert_eq!(got.len(), expected, "{got:?}");
        };
        check(app(&["memory"], DepKind::Normal, &[]), 0);
        check(app(&["testkit"], DepKind::Normal, &[]), 1);
        check(app(&["all"], DepKind::Normal, &[]), 1);
        check(app(&["testkit"], DepKind::Dev, &[]), 0);
        check(app(&[], DepKind::Normal, &[("default", &["extra"]), ("extra", &["drain-core/testkit"])]), 1);
        check(app(&[], DepKind::Normal, &[("default", &[]), ("sim", &["drain-core/testkit"])]), 0);
    }
}

//! The package gate's rules on fixtures, and its reading of `cargo metadata`.

use serde_json::json;

use super::rules::{manifest_problems, package_problems};
use super::*;

/// A publishable member with everything in place.
fn good() -> Member {
    Member {
        name: "drain-thing".into(),
        version: "0.1.0".into(),
        dir: PathBuf::from("/w/crates/drain-thing"),
        manifest: "crates/drain-thing/Cargo.toml".into(),
        publishable: true,
        description: Some("A thing.".into()),
        license: Some("MIT OR Apache-2.0".into()),
        readme: Some("README.md".into()),
        keywords: vec!["lease".into(), "single-flight".into()],
        categories: vec!["asynchronous".into(), "development-tools::testing".into()],
        links: vec![("documentation".into(), "https://docs.rs/drain-thing".into())],
        docs_rs: Some(json!({"targets": ["x86_64-unknown-linux-gnu"]})),
        lib: Some("src/lib.rs".into()),
        ..Member::default()
    }
}

fn member(name: &str, publishable: bool) -> Member {
    Member { name: name.into(), version: "0.2.0".into(), publishable, ..Member::default() }
}

fn dep(name: &str, kind: Kind, req: &str) -> Dep {
    Dep { name: name.into(), kind, req: req.into(), path: Some(PathBuf::from(format!("/w/crates/{name}"))) }
}

#[track_caller]
fn check_manifest(change: impl FnOnce(&mut Member), expected: &[&str]) {
    let mut m = good();
    change(&mut m);
    let workspace = [m.clone(), member("drain-core", true), member("test-servers", false)];
    let got: Vec<String> =
        manifest_problems(&m, &workspace).into_iter().map(|p| format!("{} | {}", p.what, p.fix)).collect();
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for (g, e) in got.iter().zip(expected) {
        assert!(g.contains(e), "expected `{e}` in `{g}`");
    }
}

#[test]
fn manifest_rules() {
    check_manifest(|_| {}, &[]);
    check_manifest(|m| m.description = None, &["no description | add `description"]);
    check_manifest(|m| m.license = None, &["no license"]);
    check_manifest(|m| (m.license, m.license_file) = (None, Some("LICENSE".into())), &[]);
    check_manifest(|m| m.readme = None, &["no readme | write a README.md beside crates/drain-thing/Cargo.toml"]);
    check_manifest(|m| m.readme = Some("../../README.md".into()), &["is not the crate's own"]);
    check_manifest(|m| m.keywords.clear(), &["0 keyword(s)"]);
    check_manifest(|m| m.keywords = vec!["a".into(); 6], &["6 keyword(s)"]);
    check_manifest(|m| m.keywords = vec!["sans io".into(), "9lives".into()], &["`sans io`", "`9lives`"]);
    check_manifest(|m| m.keywords = vec!["twenty-one-characters".into()], &["`twenty-one-characters`"]);
    check_manifest(|m| m.categories.clear(), &["0 categories"]);
    check_manifest(|m| m.categories = vec!["Asynchronous".into(), "a::".into()], &["`Asynchronous`", "`a::`"]);
    check_manifest(
        |m| m.links.clear(),
        &["no documentation, homepage or repository link | add `documentation = \"https://docs.rs/drain-thing\"`"],
    );
    check_manifest(
        |m| m.links.push(("repository".into(), "https://example.invalid/drain".into())),
        &["`repository = \"https://example.invalid/drain\"` is a placeholder (a top-level domain reserved"],
    );
    check_manifest(
        |m| m.links = vec![("homepage".into(), "http://www.example.com/x".into())],
        &["reserved for examples"],
    );
    check_manifest(|m| m.docs_rs = None, &["no [package.metadata.docs.rs]"]);
    check_manifest(|m| m.features = vec!["memory".into()], &["docs.rs would document none of its features (memory)"]);
    check_manifest(
        |m| {
            m.features = vec!["memory".into()];
            m.docs_rs = Some(json!({"all-features": true}));
        },
        &[],
    );
    check_manifest(
        |m| m.deps = vec![dep("drain-core", Kind::Normal, "^0.2.0"), dep("test-servers", Kind::Dev, "*")],
        &[],
    );
    check_manifest(
        |m| m.deps = vec![dep("drain-core", Kind::Normal, "*")],
        &["depends on `drain-core` by path without a version | add `version = \"0.2.0\"`"],
    );
    check_manifest(
        |m| m.deps = vec![dep("test-servers", Kind::Normal, "*")],
        &["`test-servers`, which is `publish = false`"],
    );
    check_manifest(
        |m| m.deps = vec![dep("test-servers", Kind::Dev, "^0.1.0")],
        &[
            "dev-depends on `test-servers`, which is `publish = false`, with a version: the package would keep it | declare `test-servers` by path only",
        ],
    );
    // A registry dependency without a path is cargo's business.
    check_manifest(|m| m.deps = vec![Dep { path: None, ..dep("tokio", Kind::Normal, "^1") }], &[]);
}

const README: &str = "# drain-thing\n\nWhat it is.\n\n## Example\n\n```rust\nfn main() {}\n```\n\nDocs: <https://docs.rs/drain-thing>.\n";

#[track_caller]
fn check_package(change: impl FnOnce(&mut Member, &mut Vec<(&str, String)>), expected: &[&str]) {
    let mut m = good();
    let mut files: Vec<(&str, String)> = vec![
        ("Cargo.toml", String::new()),
        ("LICENSE-MIT", String::new()),
        ("README.md", README.to_owned()),
        (
            "src/lib.rs",
            "#![doc = include_str!(\"../README.md\")]\n//!\n//! ## More\n#![forbid(unsafe_code)]\nmod a;\n".into(),
        ),
        ("src/a.rs", "const S: &str = include_str!(\"scripts/x.lua\");\n".into()),
        ("src/scripts/x.lua", String::new()),
    ];
    change(&mut m, &mut files);
    let list: Vec<String> = files.iter().map(|(f, _)| (*f).to_owned()).collect();
    let read = |path: &str| files.iter().find(|(f, _)| *f == path).map(|(_, t)| t.clone());
    let got: Vec<String> =
        package_problems(&m, &list, &read).into_iter().map(|p| format!("{} | {}", p.what, p.fix)).collect();
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for (g, e) in got.iter().zip(expected) {
        assert!(g.contains(e), "expected `{e}` in `{g}`");
    }
}

fn set<'a>(files: &mut Vec<(&'a str, String)>, path: &'a str, text: &str) {
    files.retain(|(f, _)| *f != path);
    files.push((path, text.to_owned()));
}

#[test]
fn package_rules() {
    check_package(|_, _| {}, &[]);
    check_package(
        |_, f| f.retain(|(p, _)| *p != "LICENSE-MIT"),
        &[
            "ships no license file | link the root's license files into the crate, from the root: `ln -s ../../LICENSE-MIT ../../LICENSE-APACHE crates/drain-thing/`",
        ],
    );
    check_package(
        |_, f| f.retain(|(p, _)| *p != "src/scripts/x.lua"),
        &[
            "crates/drain-thing/src/a.rs includes `scripts/x.lua`, which the package does not contain (src/scripts/x.lua)",
        ],
    );
    check_package(
        |_, f| set(f, "src/a.rs", "include_bytes!(\"../../../LICENSE\")"),
        &["outside the crate's directory"],
    );
    // Dropped dev-dependencies and the targets that need them.
    check_package(
        |m, f| {
            m.deps = vec![dep("test-servers", Kind::Dev, "*")];
            f.push(("tests/t.rs", String::new()));
            f.push(("benches/b.rs", String::new()));
        },
        &[
            "ships benches/ and tests/ although the package drops the dev-dependencies `test-servers` (a path without a version): they cannot build from it | add `exclude = [\"benches/\", \"tests/\"]`",
        ],
    );
    check_package(|m, _| m.deps = vec![dep("test-servers", Kind::Dev, "*")], &[]);
    check_package(|_, f| f.push(("tests/t.rs", String::new())), &[]);
    // The readme.
    check_package(
        |_, f| set(f, "README.md", "# x\n\nSee <https://docs.rs/x>.\n"),
        &["README.md shows no example", "its crate docs (crates/drain-thing/src/lib.rs) show no example"],
    );
    check_package(
        |_, f| set(f, "README.md", &README.replace("https://docs.rs/drain-thing", "the docs")),
        &["README.md links to no documentation"],
    );
    check_package(
        |_, f| {
            set(
                f,
                "README.md",
                &format!("{README}\nSee [ops](../../docs/operations.md) and [a](#example).\n[ref]: docs/x.md\n"),
            )
        },
        &["links to `../../docs/operations.md`", "links to `docs/x.md`"],
    );
    // The crate docs' opening example.
    for (block, why) in [
        ("```no_run", "open with a `no_run` example"),
        ("```rust,ignore", "open with a `ignore` example"),
        ("```text", "open with a `text` example"),
        ("```toml", "open with a `toml` block, not a Rust example"),
    ] {
        check_package(|_, f| set(f, "README.md", &README.replace("```rust", block)), &[why]);
    }
    check_package(|_, f| set(f, "README.md", &README.replace("```rust", "```rust,edition2024")), &[]);
    check_package(
        |_, f| set(f, "README.md", &README.replace("## Example", "## Round trips\n\n| a | b |\n\n## Example")),
        &["show their first example only after the section `## Round trips`"],
    );
    check_package(
        |_, f| {
            set(f, "src/lib.rs", "//! # thing\n//!\n//! ```\n//! assert!(true);\n//! ```\n#![forbid(unsafe_code)]\n")
        },
        &[],
    );
    // A binary: a console example in the README, run by a test.
    let console = "# drain\n\n```console\n$ drain --help\n```\n\n<https://docs.rs/crate/drain-app>\n";
    check_package(
        |m, f| {
            m.lib = None;
            set(f, "README.md", console);
            f.push(("tests/readme.rs", "const README: &str = include_str!(\"../README.md\");".into()));
        },
        &[],
    );
    check_package(
        |m, f| {
            m.lib = None;
            set(f, "README.md", console);
        },
        &["is a binary whose README example is not run by a test"],
    );
}

#[test]
fn members_come_from_cargo_metadata() {
    let json = json!({
        "workspace_members": ["path+file:///w/crates/a#0.1.0", "path+file:///w/crates/t#0.1.0"],
        "packages": [
            {"id": "path+file:///w/crates/a#0.1.0", "name": "a", "version": "0.1.0",
             "manifest_path": "/w/crates/a/Cargo.toml", "publish": null, "description": "A.",
             "license": "MIT", "license_file": null, "readme": "README.md", "keywords": ["k"],
             "categories": ["asynchronous"], "documentation": "https://docs.rs/a", "homepage": null,
             "repository": "", "metadata": {"docs": {"rs": {"all-features": true}}},
             "features": {"default": [], "memory": []},
             "targets": [{"kind": ["bench"], "src_path": "/w/crates/a/benches/b.rs"},
                         {"kind": ["lib"], "src_path": "/w/crates/a/src/lib.rs"}],
             "dependencies": [
                 {"name": "t", "kind": "dev", "req": "*", "path": "/w/crates/t"},
                 {"name": "tokio", "kind": null, "req": "^1"}]},
            {"id": "path+file:///w/crates/t#0.1.0", "name": "t", "version": "0.1.0",
             "manifest_path": "/w/crates/t/Cargo.toml", "publish": [], "targets": [], "dependencies": []},
            {"id": "registry+https://github.com/rust-lang/crates.io-index#tokio@1.0.0", "name": "tokio"}
        ]
    });
    let members = parse(&json, Path::new("/w"));
    assert_eq!(
        members.iter().map(|m| (m.name.as_str(), m.publishable)).collect::<Vec<_>>(),
        [("a", true), ("t", false)]
    );
    let a = &members[0];
    assert_eq!(a.manifest, "crates/a/Cargo.toml");
    assert_eq!(a.lib.as_deref(), Some("src/lib.rs"));
    assert_eq!(a.features, ["memory"]);
    assert_eq!(a.links, [("documentation".to_owned(), "https://docs.rs/a".to_owned())], "empty fields are absent");
    assert_eq!(a.docs_rs, Some(json!({"all-features": true})));
    assert_eq!(
        a.deps,
        [dep("t", Kind::Dev, "*"), Dep { name: "tokio".into(), kind: Kind::Normal, req: "^1".into(), path: None }]
    );
    assert!(a.deps[0].versionless());
    assert_eq!(members[1].docs_rs, None);
}

#[test]
fn arguments() {
    assert_eq!(parse_args(&[]), Ok(false));
    assert_eq!(parse_args(&["--verify"]), Ok(true));
    assert!(parse_args(&["--full"]).is_err());
}

#[test]
fn a_second_verify_forgets_the_first_runs_extracted_sources() {
    let home = std::env::temp_dir().join(format!("xtask-package-home-{}", std::process::id()));
    let src = home.join("registry/src");
    let dirs = [
        "-2bb50173e03123ae/drain-core-0.1.0",
        "-2bb50173e03123ae/drain-core-0.0.9",
        "-2bb50173e03123ae/serde-1.0.0",
        "-77aa/adapter-redis-0.1.0",
        "index.crates.io-1949cf8c6b5b557f/drain-core-0.1.0",
    ];
    for d in dirs {
        fs::create_dir_all(src.join(d)).expect("fixture");
        fs::write(src.join(d).join(".cargo-ok"), "{\"v\":1}").expect("fixture");
    }
    let removed = forget_extracted(&home, &[("drain-core", "0.1.0"), ("adapter-redis", "0.1.0")]);
    let left: Vec<bool> = dirs.iter().map(|d| src.join(d).exists()).collect();
    let _ = fs::remove_dir_all(&home);
    assert_eq!(removed, [src.join("-2bb50173e03123ae/drain-core-0.1.0"), src.join("-77aa/adapter-redis-0.1.0")]);
    // Other versions, other crates and crates.io's own copies stay.
    assert_eq!(left, [false, true, true, false, true]);
    assert!(forget_extracted(&home, &[("drain-core", "0.1.0")]).is_empty(), "no CARGO_HOME: nothing to do");
}

#[test]
fn a_second_verify_builds_the_registry_copies_again() {
    let dir = std::env::temp_dir().join(format!("xtask-package-target-{}", std::process::id()));
    let fingerprints = dir.join("debug/.fingerprint");
    let entries = [
        "drain-core-381ee1bcbd150a17",
        "drain-core-244387c1f92d4fa7",
        "drain-core-extra-0123456789abcdef",
        "tokio-0123456789abcdef",
        "drain-core",
        "drain-core-not-hex",
    ];
    for e in entries {
        fs::create_dir_all(fingerprints.join(e)).expect("fixture");
    }
    let removed = forget_fingerprints(&dir, &["drain-core", "drain-app"]);
    let left: Vec<bool> = entries.iter().map(|e| fingerprints.join(e).exists()).collect();
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(
        removed,
        [fingerprints.join("drain-core-244387c1f92d4fa7"), fingerprints.join("drain-core-381ee1bcbd150a17")]
    );
    assert_eq!(left, [false, false, true, true, true, true]);
    assert!(forget_fingerprints(&dir, &["drain-core"]).is_empty(), "no target directory: nothing to do");
}

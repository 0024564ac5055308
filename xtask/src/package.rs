//! `cargo xtask package [--verify]`: every crate meant for users packages as
//! crates.io would take it.
//!
//! The crates it checks are found, not listed: every workspace member whose
//! `publish` is not `false` (the workspace sets `publish = true`; test support and
//! xtask say `publish = false`). For each one:
//!
//! 1. the manifest: a description, a license, a `readme` of its own that shows an
//!    example and links to the docs with absolute links only (crates.io shows it
//!    away from the repository), 1-5 keywords and categories of crates.io's form,
//!    a documentation, homepage or repository link that is not a placeholder,
//!    `[package.metadata.docs.rs]` (with every feature documented when the crate
//!    has features), a version on every path dependency, no dependency on a
//!    `publish = false` crate, and dev-dependencies on those by path only (the
//!    package drops them);
//! 2. the package (`cargo package --list`): license files, every file an
//!    `include_str!`/`include_bytes!` of the sources names, no `tests/` or
//!    `benches/` when a dev-dependency is dropped (they could not build from the
//!    package), and crate docs that open with a runnable example (a binary-only
//!    crate: a README `console` example that a test under `tests/` runs);
//! 3. `cargo package` itself: with `--no-verify` in `ci`, followed by `cargo check`
//!    of each crate alone (the features it declares, not the workspace's union: what
//!    verification would catch first); with `--verify`, the full verification,
//!    which builds every crate from its packaged sources (minutes: see
//!    docs/architecture.md), in `target/package-verify`, after forgetting what a
//!    previous verification left of the same versions (cargo would reuse it).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

use rules::{manifest_problems, package_problems};

use crate::util::{Failure, GateResult, Outcome, cargo, project_root, run};

mod rules;
#[cfg(test)]
mod tests;

/// Where `--verify` builds, below the target directory.
const VERIFY_DIR: &str = "package-verify";

/// `--verify` or not.
pub(crate) fn parse_args(args: &[&str]) -> Result<bool, String> {
    match args {
        [] => Ok(false),
        ["--verify"] => Ok(true),
        other => {
            Err(format!("unexpected arguments to `package`: `{}` (expected `--verify` or nothing)", other.join(" ")))
        }
    }
}

/// Run the gate.
pub(crate) fn run_gate(verify: bool) -> GateResult {
    let (members, target) = load()?;
    let publishable: Vec<&Member> = members.iter().filter(|m| m.publishable).collect();
    if publishable.is_empty() {
        return Err(Failure::new("no workspace member is publishable: every one says `publish = false`")
            .fix("set `publish = true` in the root Cargo.toml's [workspace.package] and `publish.workspace = true` in the crates meant for users"));
    }
    let names: Vec<&str> = publishable.iter().map(|m| m.name.as_str()).collect();
    println!("xtask package: {} publishable crate(s): {}", names.len(), names.join(", "));

    let mut problems = Vec::new();
    for member in &publishable {
        let mut found = manifest_problems(member, &members);
        if found.is_empty() {
            let files = package_files(member)?;
            found = package_problems(member, &files, &|path| fs::read_to_string(member.dir.join(path)).ok());
        }
        problems.extend(found);
    }
    if !problems.is_empty() {
        let mut last = "";
        for p in &problems {
            if p.krate != last {
                let manifest = members.iter().find(|m| m.name == p.krate).map_or("", |m| m.manifest.as_str());
                println!("  {} ({manifest}; test support is `publish = false` instead):", p.krate);
                last = &p.krate;
            }
            println!("    {}\n      fix: {}", p.what, p.fix);
        }
        return Err(Failure::new(format!(
            "{} problem(s) would keep a crate from packaging, listed above",
            problems.len()
        ))
        .fix("fix each problem as its `fix:` line says, then run `cargo xtask package`"));
    }

    let started = Instant::now();
    let mut cmd = cargo();
    cmd.args(["package", "--allow-dirty"]);
    if verify {
        // Its own target directory: the packaged crates build with cargo's default
        // profile, not the workspace's, and must not replace target/debug/drain.
        let dir = target.join(VERIFY_DIR);
        let crates: Vec<(&str, &str)> = publishable.iter().map(|m| (m.name.as_str(), m.version.as_str())).collect();
        let mut stale = forget_extracted(&cargo_home(), &crates);
        stale.extend(forget_fingerprints(&dir, &names));
        if !stale.is_empty() {
            println!(
                "xtask package: {} copies of a previous run's packages forgotten, so they build again",
                stale.len()
            );
        }
        cmd.env("CARGO_TARGET_DIR", &dir);
    } else {
        cmd.arg("--no-verify");
    }
    for name in &names {
        cmd.args(["-p", name]);
    }
    run(&mut cmd).map_err(|f| {
        f.fix("cargo says above which crate and why (a file outside the crate, a dependency crates.io does not have, a version requirement no workspace crate meets); fix that crate's manifest")
    })?;
    let packaged = started.elapsed();
    if verify {
        println!("xtask package: {} crate(s) packaged and built from their packages in {:.0?}", names.len(), packaged);
        return Ok(Outcome::Passed);
    }
    // What verification would catch first: a crate that builds only because another
    // member turns on a feature of a shared dependency.
    let started = Instant::now();
    for name in &names {
        run(cargo().args(["check", "--quiet", "-p", name])).map_err(|f| {
            f.fix(format!(
                "`{name}` does not build alone: fix the error above; when the workspace builds (`cargo check --workspace`), it leans on a feature another member turns on, so declare the dependency features it uses in its own Cargo.toml"
            ))
        })?;
    }
    println!(
        "xtask package: {} crate(s) packaged in {:.0?} (not verified: `cargo xtask package --verify` builds each from its package), each checked alone in {:.0?}",
        names.len(),
        packaged,
        started.elapsed()
    );
    Ok(Outcome::Passed)
}

/// One problem with one crate, and what fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Problem {
    krate: String,
    what: String,
    fix: String,
}

/// A dependency's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Normal,
    Dev,
    Build,
}

/// One declared dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dep {
    name: String,
    kind: Kind,
    /// The version requirement, `*` when none was given.
    req: String,
    /// Set for a path dependency.
    path: Option<PathBuf>,
}

impl Member {
    /// `path` (relative to the crate) as a path from the project root, for messages.
    fn at(&self, path: &str) -> String {
        match self.manifest.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{path}"),
            None => path.to_owned(),
        }
    }
}

impl Dep {
    /// Has no version: `cargo package` drops such a dev-dependency.
    fn versionless(&self) -> bool {
        self.req == "*"
    }
}

/// One workspace member as packaging sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Member {
    name: String,
    version: String,
    /// The directory of its Cargo.toml.
    dir: PathBuf,
    /// Its Cargo.toml, relative to the root, for messages.
    manifest: String,
    publishable: bool,
    description: Option<String>,
    license: Option<String>,
    license_file: Option<String>,
    readme: Option<String>,
    keywords: Vec<String>,
    categories: Vec<String>,
    /// `documentation`, `homepage`, `repository`, as (field, URL).
    links: Vec<(String, String)>,
    /// `[package.metadata.docs.rs]`.
    docs_rs: Option<Value>,
    /// Its features, `default` left out.
    features: Vec<String>,
    deps: Vec<Dep>,
    /// Its library's root source file, relative to `dir`.
    lib: Option<String>,
}

/// `cargo metadata --no-deps`: the members, nothing resolved, and the target directory.
fn load() -> Result<(Vec<Member>, PathBuf), Failure> {
    let output = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| Failure::new(format!("could not run `cargo metadata`: {e}")))?;
    if !output.status.success() {
        return Err(Failure::new(format!(
            "`cargo metadata --no-deps` failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ))
        .fix("fix the manifest cargo names above"));
    }
    let json: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| Failure::new(format!("`cargo metadata` printed invalid JSON: {e}")))?;
    let target = PathBuf::from(json["target_directory"].as_str().unwrap_or("target"));
    Ok((parse(&json, &project_root()), target))
}

/// The members of `cargo metadata --no-deps --format-version 1`'s JSON.
fn parse(json: &Value, root: &Path) -> Vec<Member> {
    let members: BTreeSet<&str> =
        json["workspace_members"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let text = |v: &Value| v.as_str().filter(|s| !s.trim().is_empty()).map(str::to_owned);
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
    };
    let mut out = Vec::new();
    for p in json["packages"].as_array().into_iter().flatten() {
        if !p["id"].as_str().is_some_and(|id| members.contains(id)) {
            continue;
        }
        let manifest_path = PathBuf::from(p["manifest_path"].as_str().unwrap_or_default());
        let dir = manifest_path.parent().map(Path::to_path_buf).unwrap_or_default();
        let lib = p["targets"].as_array().into_iter().flatten().find_map(|t| {
            let kinds = strings(&t["kind"]);
            let is_lib = kinds.iter().any(|k| matches!(k.as_str(), "lib" | "rlib" | "proc-macro"));
            is_lib.then(|| relative(Path::new(t["src_path"].as_str().unwrap_or_default()), &dir))
        });
        let deps = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| Dep {
                name: d["name"].as_str().unwrap_or_default().to_owned(),
                kind: match d["kind"].as_str() {
                    Some("dev") => Kind::Dev,
                    Some("build") => Kind::Build,
                    _ => Kind::Normal,
                },
                req: d["req"].as_str().unwrap_or("*").to_owned(),
                path: d["path"].as_str().map(PathBuf::from),
            })
            .collect();
        out.push(Member {
            name: p["name"].as_str().unwrap_or_default().to_owned(),
            version: p["version"].as_str().unwrap_or_default().to_owned(),
            manifest: manifest_path.strip_prefix(root).unwrap_or(&manifest_path).to_string_lossy().replace('\\', "/"),
            dir,
            // `publish = false` is an empty list of registries; `null` is anywhere.
            publishable: p["publish"].as_array().is_none_or(|r| !r.is_empty()),
            description: text(&p["description"]),
            license: text(&p["license"]),
            license_file: text(&p["license_file"]),
            readme: text(&p["readme"]),
            keywords: strings(&p["keywords"]),
            categories: strings(&p["categories"]),
            links: ["documentation", "homepage", "repository"]
                .into_iter()
                .filter_map(|field| text(&p[field]).map(|url| (field.to_owned(), url)))
                .collect(),
            docs_rs: Some(p["metadata"]["docs"]["rs"].clone()).filter(Value::is_object),
            features: p["features"]
                .as_object()
                .map(|f| f.keys().filter(|k| *k != "default").cloned().collect())
                .unwrap_or_default(),
            deps,
            lib,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// `path` relative to `dir`, with `/` separators.
fn relative(path: &Path, dir: &Path) -> String {
    path.strip_prefix(dir).unwrap_or(path).to_string_lossy().replace('\\', "/")
}

/// The files `cargo package` would put in `member`'s package.
fn package_files(member: &Member) -> Result<Vec<String>, Failure> {
    let mut cmd = cargo();
    cmd.args(["package", "--list", "--allow-dirty", "-p", &member.name]);
    let output = cmd.output().map_err(|e| Failure::new(format!("could not run `cargo package --list`: {e}")))?;
    if !output.status.success() {
        return Err(Failure::new(format!(
            "`cargo package --list -p {}` failed:\n{}",
            member.name,
            String::from_utf8_lossy(&output.stderr)
        ))
        .fix(format!("fix {} as cargo says above", member.manifest)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect())
}

/// `$CARGO_HOME`, by default `~/.cargo`.
fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"))
}

/// Remove the build records of `names` in the verification's target directory
/// `dir`, and return what was removed.
///
/// A dependency the verification takes from its local registry is extracted with
/// the fixed old timestamps of a package's files, so cargo would take the build of a
/// previous run's sources of the same version as fresh. Every crate of `names` in
/// `dir` is such a copy or one of the packages, which build again anyway; the other
/// dependencies stay built.
fn forget_fingerprints(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = fs::read_dir(dir.join("debug").join(".fingerprint")) else { return removed };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some((name, hash)) = file_name.to_str().and_then(|n| n.rsplit_once('-')) else { continue };
        let ours = names.contains(&name) && !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit());
        if ours && fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed.sort();
    removed
}

/// Remove the sources of `crates` (name, version) that an earlier verification left
/// extracted under `home`, and return what was removed.
///
/// `cargo package` verifies a crate that depends on another one of the workspace
/// against the dependency it just packaged, served from a local registry
/// (`target/package/tmp-registry`) and extracted into
/// `$CARGO_HOME/registry/src/-<hash>/<name>-<version>` (a local registry has no host
/// in that name; crates.io's is `index.crates.io-<hash>`). It never extracts a version
/// it finds there again, so without this a second `--verify` of the same version
/// builds the dependents against the first run's sources (a dependent that needs a
/// newer API fails; one that lost it passes). Only local registries' copies are
/// removed; cargo extracts them again from the packages of this run.
fn forget_extracted(home: &Path, crates: &[(&str, &str)]) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(sources) = fs::read_dir(home.join("registry").join("src")) else { return removed };
    for source in sources.flatten() {
        if !source.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for (name, version) in crates {
            let dir = source.path().join(format!("{name}-{version}"));
            if dir.is_dir() && fs::remove_dir_all(&dir).is_ok() {
                removed.push(dir);
            }
        }
    }
    removed.sort();
    removed
}

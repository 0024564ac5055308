//! The rules `cargo xtask package` holds a publishable crate to: its manifest, and its
//! package's files and sources.

use std::collections::BTreeSet;
use std::path::{Component, Path};

use super::{Kind, Member, Problem};

/// Hosts no real project lives at (`repository = "https://example.invalid/drain"`).
const PLACEHOLDER_HOSTS: &[&str] = &["example.com", "example.org", "example.net", "localhost"];
/// Top-level domains reserved for examples and tests (RFC 2606).
const PLACEHOLDER_TLDS: &[&str] = &[".invalid", ".example", ".test", ".localhost"];
/// Code block attributes rustdoc does not run.
const NOT_RUN: &[&str] = &["ignore", "no_run", "compile_fail", "text"];

/// What is wrong with a publishable member's manifest; `members` is the workspace.
pub(super) fn manifest_problems(m: &Member, members: &[Member]) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut problem = |what: String, fix: String| out.push(Problem { krate: m.name.clone(), what, fix });
    let manifest = &m.manifest;
    if m.description.is_none() {
        problem("no description".into(), format!("add `description = \"…\"` to [package] in {manifest}"));
    }
    if m.license.is_none() && m.license_file.is_none() {
        problem("no license".into(), format!("add `license.workspace = true` to [package] in {manifest}"));
    }
    match &m.readme {
        None => problem(
            "no readme".into(),
            format!(
                "write a README.md beside {manifest} (what it is, a minimal example, a link to the docs) and add `readme = \"README.md\"`"
            ),
        ),
        Some(r) if r.starts_with("..") || Path::new(r).is_absolute() => problem(
            format!("its readme `{r}` is not the crate's own"),
            format!("write a README.md of its own beside {manifest} and point `readme` at it"),
        ),
        Some(_) => {}
    }
    if m.keywords.is_empty() || m.keywords.len() > 5 {
        problem(
            format!("{} keyword(s); crates.io takes 1 to 5", m.keywords.len()),
            format!("set `keywords = [\"…\"]` (at most 5) in {manifest}"),
        );
    }
    for k in &m.keywords {
        let mut chars = k.chars();
        let valid = k.len() <= 20
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || "_-+".contains(c));
        if !valid {
            problem(
                format!("keyword `{k}` is not one crates.io accepts"),
                format!("use at most 20 ASCII letters, digits, `_`, `-` or `+`, starting with a letter, in {manifest}"),
            );
        }
    }
    if m.categories.is_empty() || m.categories.len() > 5 {
        problem(
            format!("{} categories; crates.io takes 1 to 5", m.categories.len()),
            format!("set `categories = [\"…\"]` to slugs from https://crates.io/category_slugs in {manifest}"),
        );
    }
    for c in &m.categories {
        let valid =
            c.split("::").all(|part| !part.is_empty() && part.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-'));
        if !valid {
            problem(
                format!("category `{c}` is not a crates.io slug"),
                format!(
                    "use a slug from https://crates.io/category_slugs (such as `asynchronous` or `development-tools::testing`) in {manifest}"
                ),
            );
        }
    }
    if m.links.is_empty() {
        problem(
            "no documentation, homepage or repository link".into(),
            format!("add `documentation = \"https://docs.rs/{}\"` to [package] in {manifest}", m.name),
        );
    }
    for (field, url) in &m.links {
        if let Some(why) = placeholder(url) {
            problem(
                format!("`{field} = \"{url}\"` is a placeholder ({why})"),
                format!(
                    "set `{field}` to where the project really is, or remove it, in {manifest} (or the root Cargo.toml's [workspace.package])"
                ),
            );
        }
    }
    match &m.docs_rs {
        None => problem(
            "no [package.metadata.docs.rs]".into(),
            format!(
                "add a [package.metadata.docs.rs] table to {manifest} (`targets = [\"x86_64-unknown-linux-gnu\"]`, and `all-features = true` when it has features)"
            ),
        ),
        Some(d) if !m.features.is_empty() => {
            let all = d["all-features"].as_bool() == Some(true);
            let listed = d["features"].as_array().is_some_and(|f| !f.is_empty());
            if !all && !listed {
                problem(
                    format!("docs.rs would document none of its features ({})", m.features.join(", ")),
                    format!(
                        "add `all-features = true` (or `features = [...]`) to [package.metadata.docs.rs] in {manifest}"
                    ),
                );
            }
        }
        Some(_) => {}
    }
    for dep in m.deps.iter().filter(|d| d.path.is_some()) {
        let target = members.iter().find(|o| o.name == dep.name);
        let unpublished = target.is_some_and(|t| !t.publishable);
        match dep.kind {
            Kind::Normal | Kind::Build if unpublished => problem(
                format!("depends on `{}`, which is `publish = false`", dep.name),
                format!(
                    "move what {} needs from `{}` into a published crate, or make it a dev-dependency",
                    m.name, dep.name
                ),
            ),
            Kind::Normal | Kind::Build if dep.versionless() => problem(
                format!("depends on `{}` by path without a version", dep.name),
                format!(
                    "add `version = \"{}\"` beside its `path` in the root Cargo.toml's [workspace.dependencies] (or in {manifest})",
                    target.map_or("…", |t| t.version.as_str())
                ),
            ),
            Kind::Dev if unpublished && !dep.versionless() => problem(
                format!(
                    "dev-depends on `{}`, which is `publish = false`, with a version: the package would keep it",
                    dep.name
                ),
                format!("declare `{}` by path only (no `version`), so the package drops it", dep.name),
            ),
            _ => {}
        }
    }
    out
}

/// What is wrong with a member's package: its file list (as `cargo package --list`
/// prints it) and its sources (`read` a path relative to the crate).
pub(super) fn package_problems(m: &Member, files: &[String], read: &dyn Fn(&str) -> Option<String>) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut problem = |what: String, fix: String| out.push(Problem { krate: m.name.clone(), what, fix });
    let manifest = &m.manifest;
    let shipped: BTreeSet<&str> = files.iter().map(String::as_str).collect();

    let licensed = files.iter().any(|f| !f.contains('/') && (f.starts_with("LICENSE") || f.starts_with("COPYING")));
    if !licensed {
        let dir = Path::new(manifest).parent().unwrap_or(Path::new(""));
        let up = "../".repeat(dir.components().count());
        problem(
            "ships no license file".into(),
            format!(
                "link the root's license files into the crate, from the root: `ln -s {up}LICENSE-MIT {up}LICENSE-APACHE {}/`",
                dir.display()
            ),
        );
    }

    // Every file the sources include is in the package.
    for source in files.iter().filter(|f| f.ends_with(".rs")) {
        let Some(text) = read(source) else { continue };
        for included in includes(&text) {
            let at = Path::new(source).parent().unwrap_or(Path::new(""));
            match normalize(&at.join(&included)) {
                Some(path) if shipped.contains(path.as_str()) => {}
                Some(path) => problem(
                    format!("{} includes `{included}`, which the package does not contain ({path})", m.at(source)),
                    format!("keep `{path}` out of `exclude` (or add it to `include`) in {manifest}"),
                ),
                None => problem(
                    format!("{} includes `{included}`, outside the crate's directory", m.at(source)),
                    "move the file into the crate (a package holds only its own directory)".into(),
                ),
            }
        }
    }

    // A dev-dependency without a version is dropped, and the targets that need it
    // cannot build from the package.
    let dropped: Vec<&str> = m
        .deps
        .iter()
        .filter(|d| d.kind == Kind::Dev && d.path.is_some() && d.versionless())
        .map(|d| d.name.as_str())
        .collect();
    if !dropped.is_empty() {
        let dirs: BTreeSet<&str> =
            files.iter().filter_map(|f| ["tests/", "benches/"].into_iter().find(|d| f.starts_with(d))).collect();
        if !dirs.is_empty() {
            let dirs: Vec<&str> = dirs.into_iter().collect();
            problem(
                format!(
                    "ships {} although the package drops the dev-dependencies {} (a path without a version): they cannot build from it",
                    dirs.join(" and "),
                    dropped.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", ")
                ),
                format!(
                    "add `exclude = [{}]` to [package] in {manifest}",
                    dirs.iter().map(|d| format!("\"{d}\"")).collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }

    // The readme: an example, a link to the docs, absolute links only.
    let readme = m.readme.as_deref().and_then(|r| read(r).map(|text| (r, text)));
    if let Some((name, text)) = &readme {
        let name = m.at(name);
        let blocks = code_blocks(text);
        if blocks.is_empty() {
            problem(
                format!("{name} shows no example"),
                format!("add a minimal example (a fenced code block) to {name}"),
            );
        }
        if !text.contains("https://") && !text.contains("http://") {
            problem(
                format!("{name} links to no documentation"),
                format!("link to https://docs.rs/{} in {name}", m.name),
            );
        }
        for link in relative_links(text) {
            problem(
                format!("{name} links to `{link}`, a relative link crates.io cannot follow"),
                format!("make the link absolute (https://…) or drop it, in {name}"),
            );
        }
    }

    // The crate docs open with an example that runs.
    match &m.lib {
        Some(lib) => match read(lib).map(|text| crate_docs(&text, lib, read)) {
            Some(docs) => {
                if let Some(why) = opening_example(&docs) {
                    let lib = m.at(lib);
                    problem(
                        format!("its crate docs ({lib}) {why}"),
                        format!(
                            "open {lib}'s docs with an example rustdoc runs (no `no_run`/`ignore`: show the in-memory path first, the one that needs a server second); `#![doc = include_str!(\"../README.md\")]` opens them with the README"
                        ),
                    );
                }
            }
            None => {
                problem(format!("cannot read its library source {lib}"), format!("check `[lib] path` in {manifest}"))
            }
        },
        None => {
            let shows =
                readme.as_ref().is_some_and(|(_, text)| code_blocks(text).iter().any(|(info, _)| info == "console"));
            let tested = files
                .iter()
                .filter(|f| f.starts_with("tests/") && f.ends_with(".rs"))
                .any(|f| read(f).is_some_and(|t| t.contains("README.md")));
            if !shows || !tested {
                problem(
                    "is a binary whose README example is not run by a test".into(),
                    "show the commands in a ```console block of its README and run them from a test under tests/ that reads ../README.md".into(),
                );
            }
        }
    }
    out
}

/// Why `url` is a placeholder, if it is one.
fn placeholder(url: &str) -> Option<&'static str> {
    let host = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = host.split(['/', ':', '?', '#']).next().unwrap_or_default().to_ascii_lowercase();
    if let Some(h) = PLACEHOLDER_HOSTS.iter().find(|h| host == **h || host.ends_with(&format!(".{h}"))) {
        return Some(if *h == "localhost" { "a local address" } else { "a domain reserved for examples" });
    }
    PLACEHOLDER_TLDS.iter().any(|t| host.ends_with(t)).then_some("a top-level domain reserved for examples and tests")
}

/// The string literals of `include_str!("…")` and `include_bytes!("…")` in `text`.
fn includes(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for mac in ["include_str!(", "include_bytes!("] {
        let mut rest = text;
        while let Some(at) = rest.find(mac) {
            rest = &rest[at + mac.len()..];
            let arg = rest.trim_start();
            if let Some(lit) = arg.strip_prefix('"').and_then(|a| a.split_once('"')).map(|(lit, _)| lit) {
                out.push(lit.to_owned());
            }
        }
    }
    out
}

/// `path` with `.` and `..` resolved, `None` when it leaves its root.
fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// The fenced code blocks of a markdown text, as (info string, first line number).
fn code_blocks(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut open: Option<&str> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open {
            None => {
                for fence in ["```", "~~~"] {
                    if let Some(info) = trimmed.strip_prefix(fence) {
                        out.push((info.trim().to_owned(), n + 1));
                        open = Some(fence);
                        break;
                    }
                }
            }
            Some(fence) if trimmed.starts_with(fence) => open = None,
            Some(_) => {}
        }
    }
    out
}

/// The markdown links of `text` outside code blocks that are neither absolute nor
/// anchors: `[x](y)` and `[x]: y`.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut targets = Vec::new();
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            targets.push(rest.split(')').next().unwrap_or_default());
        }
        if trimmed.starts_with('[')
            && let Some((_, target)) = trimmed.split_once("]: ")
        {
            targets.push(target.trim());
        }
        for t in targets {
            let absolute =
                t.starts_with("https://") || t.starts_with("http://") || t.starts_with('#') || t.starts_with("mailto:");
            if !absolute {
                out.push(t.to_owned());
            }
        }
    }
    out
}

/// The crate-level docs at the top of a library's root file: its `//!` lines and
/// `#![doc = include_str!("…")]` attributes (read relative to that file), in order.
fn crate_docs(text: &str, lib: &str, read: &dyn Fn(&str) -> Option<String>) -> String {
    let at = Path::new(lib).parent().unwrap_or(Path::new(""));
    let mut docs = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(doc) = trimmed.strip_prefix("//!") {
            docs.push_str(doc.strip_prefix(' ').unwrap_or(doc));
            docs.push('\n');
        } else if trimmed.starts_with("#![doc") {
            if let Some(included) = includes(trimmed).first() {
                let text = normalize(&at.join(included)).and_then(|p| read(&p)).unwrap_or_default();
                docs.push_str(&text);
                docs.push('\n');
            }
        } else if trimmed.is_empty() || trimmed.starts_with("#![") || trimmed.starts_with("//") {
            continue;
        } else {
            break;
        }
    }
    docs
}

/// Why `docs` do not open with a runnable example; `None` when they do. The first
/// code block must be a Rust example rustdoc runs, before any section other than
/// an "Example(s)" one.
fn opening_example(docs: &str) -> Option<String> {
    let blocks = code_blocks(docs);
    let Some((info, line)) = blocks.first() else { return Some("show no example".to_owned()) };
    let attrs: Vec<&str> = info.split([',', ' ']).map(str::trim).filter(|a| !a.is_empty()).collect();
    if let Some(not_run) = attrs.iter().find(|a| NOT_RUN.contains(a)) {
        return Some(format!("open with a `{not_run}` example, which rustdoc does not run"));
    }
    if attrs.iter().any(|a| *a != "rust" && !a.starts_with("edition") && *a != "should_panic") {
        return Some(format!("open with a `{info}` block, not a Rust example"));
    }
    let heading = docs.lines().take(line - 1).find(|l| {
        let l = l.trim_start();
        l.starts_with("##") && !l.trim_start_matches('#').trim().to_ascii_lowercase().starts_with("example")
    });
    heading.map(|h| format!("show their first example only after the section `{}`", h.trim()))
}

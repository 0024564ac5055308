//! `cargo metadata --format-version 1`, read into the few shapes the gates need, and
//! the normal-dependency closure of one package with its default features.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use serde_json::Value;

use crate::util::{Failure, cargo};

/// A dependency's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DepKind {
    /// `[dependencies]`.
    Normal,
    /// `[dev-dependencies]`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

impl DepKind {
    fn parse(v: &Value) -> DepKind {
        match v.as_str() {
            Some("dev") => DepKind::Dev,
            Some("build") => DepKind::Build,
            _ => DepKind::Normal,
        }
    }
}

/// A dependency as declared in a manifest.
#[derive(Debug, Clone)]
pub(crate) struct Declared {
    /// The package name.
    pub(crate) name: String,
    /// `package = …` renames: the name the manifest uses.
    pub(crate) rename: Option<String>,
    /// Its kind.
    pub(crate) kind: DepKind,
    /// `optional = true`.
    pub(crate) optional: bool,
    /// `default-features` left on.
    pub(crate) default_features: bool,
    /// Features it asks for.
    pub(crate) features: Vec<String>,
}

impl Declared {
    /// The name features refer to it by (`dep:<name>`, `<name>/feature`).
    fn toml_name(&self) -> &str {
        self.rename.as_deref().unwrap_or(&self.name)
    }
}

/// One package.
#[derive(Debug, Clone)]
pub(crate) struct Package {
    /// Package name.
    pub(crate) name: String,
    /// Path of its Cargo.toml.
    pub(crate) manifest_path: PathBuf,
    /// Its declared dependencies.
    pub(crate) deps: Vec<Declared>,
    /// Its feature table (cargo lists implicit `dep:` features too).
    pub(crate) features: BTreeMap<String, Vec<String>>,
    /// Its targets as (name, kinds: `lib`, `bin`, `bench`, …).
    pub(crate) targets: Vec<(String, Vec<String>)>,
}

/// One resolved edge.
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    /// The dependency's extern crate name as the dependent sees it.
    pub(crate) extern_name: String,
    /// The package id it resolved to.
    pub(crate) pkg: String,
    /// Under which kinds.
    pub(crate) kinds: Vec<DepKind>,
}

/// The parts of `cargo metadata` the gates use.
#[derive(Debug, Clone)]
pub(crate) struct Metadata {
    /// Every package by id.
    pub(crate) packages: HashMap<String, Package>,
    /// Ids of the workspace members.
    pub(crate) members: Vec<String>,
    /// The resolve graph: package id -> edges (workspace-unified features, all
    /// platforms, all kinds).
    pub(crate) edges: HashMap<String, Vec<Edge>>,
    /// `target/` (respects `CARGO_TARGET_DIR` and config).
    pub(crate) target_directory: PathBuf,
}

impl Metadata {
    /// Run `cargo metadata --format-version 1` in the project root.
    pub(crate) fn load() -> Result<Metadata, Failure> {
        let output = cargo()
            .args(["metadata", "--format-version", "1"])
            .output()
            .map_err(|e| Failure::new(format!("could not run `cargo metadata`: {e}")))?;
        if !output.status.success() {
            return Err(Failure::new(format!(
                "`cargo metadata --format-version 1` failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let json: Value = serde_json::from_slice(&output.stdout)
            .map_err(|e| Failure::new(format!("`cargo metadata` printed invalid JSON: {e}")))?;
        Metadata::parse(&json)
    }

    /// Read the JSON of `cargo metadata --format-version 1`.
    pub(crate) fn parse(json: &Value) -> Result<Metadata, Failure> {
        let bad = |what: &str| Failure::new(format!("unexpected `cargo metadata` output: {what}"));
        let str_of = |v: &Value, key: &str| v[key].as_str().map(str::to_owned);
        let list = |v: &Value| v.as_array().cloned().unwrap_or_default();

        let mut packages = HashMap::new();
        for p in list(&json["packages"]) {
            let id = str_of(&p, "id").ok_or_else(|| bad("package without id"))?;
            let deps = list(&p["dependencies"])
                .iter()
                .map(|d| Declared {
                    name: str_of(d, "name").unwrap_or_default(),
                    rename: str_of(d, "rename"),
                    kind: DepKind::parse(&d["kind"]),
                    optional: d["optional"].as_bool().unwrap_or(false),
                    default_features: d["uses_default_features"].as_bool().unwrap_or(true),
                    features: strings(&d["features"]),
                })
                .collect();
            let features = p["features"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default();
            let targets = list(&p["targets"])
                .iter()
                .map(|t| (str_of(t, "name").unwrap_or_default(), strings(&t["kind"])))
                .collect();
            let package = Package {
                name: str_of(&p, "name").ok_or_else(|| bad("package without name"))?,
                manifest_path: PathBuf::from(str_of(&p, "manifest_path").unwrap_or_default()),
                deps,
                features,
                targets,
            };
            packages.insert(id, package);
        }

        let mut edges = HashMap::new();
        let nodes = json["resolve"]["nodes"].as_array().ok_or_else(|| bad("no resolve graph"))?;
        for node in nodes {
            let id = str_of(node, "id").ok_or_else(|| bad("node without id"))?;
            let out = list(&node["deps"])
                .iter()
                .map(|d| Edge {
                    extern_name: str_of(d, "name").unwrap_or_default(),
                    pkg: str_of(d, "pkg").unwrap_or_default(),
                    kinds: list(&d["dep_kinds"]).iter().map(|k| DepKind::parse(&k["kind"])).collect(),
                })
                .collect();
            edges.insert(id, out);
        }

        Ok(Metadata {
            packages,
            members: strings(&json["workspace_members"]),
            edges,
            target_directory: PathBuf::from(str_of(json, "target_directory").unwrap_or_default()),
        })
    }

    /// The name of a package id (the id itself when unknown).
    pub(crate) fn name<'a>(&'a self, id: &'a str) -> &'a str {
        self.packages.get(id).map_or(id, |p| p.name.as_str())
    }

    /// The id of the workspace member called `name`.
    pub(crate) fn member(&self, name: &str) -> Option<&str> {
        self.members.iter().map(String::as_str).find(|id| self.name(id) == name)
    }

    /// The packages reachable from `root` over normal dependencies only, with
    /// `root`'s default features and the features each edge asks for, on every
    /// platform: what `cargo tree -p <root> -e normal --target all` shows. Each entry
    /// maps to the package that first pulled it in (`None` for the root).
    pub(crate) fn normal_closure(&self, root: &str) -> BTreeMap<String, Option<String>> {
        let mut r = Resolver {
            meta: self,
            active: BTreeMap::new(),
            features: HashSet::new(),
            deps: HashSet::new(),
            pending: HashMap::new(),
            queue: VecDeque::new(),
        };
        r.queue.push_back((root.to_owned(), Some("default".to_owned()), None));
        while let Some((pkg, feature, parent)) = r.queue.pop_front() {
            r.visit(&pkg, feature.as_deref(), parent);
        }
        r.active
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// Work item: activate `pkg` (pulled in by `parent`) and, if given, one feature
/// value of it.
type Item = (String, Option<String>, Option<String>);

/// Cargo's feature rules, for normal edges from one root: `feat`, `dep:name`,
/// `name/feat`, `name?/feat`, default features, and optional dependencies.
struct Resolver<'m> {
    meta: &'m Metadata,
    /// Activated packages and who pulled each in.
    active: BTreeMap<String, Option<String>>,
    /// Activated (package, feature).
    features: HashSet<(String, String)>,
    /// Activated (package, dependency name as the manifest spells it).
    deps: HashSet<(String, String)>,
    /// Features asked of a dependency, applied when (if) it is activated.
    pending: HashMap<(String, String), Vec<String>>,
    queue: VecDeque<Item>,
}

impl<'m> Resolver<'m> {
    fn meta(&self) -> &'m Metadata {
        self.meta
    }

    fn visit(&mut self, pkg: &str, feature: Option<&str>, parent: Option<String>) {
        if !self.active.contains_key(pkg) {
            self.active.insert(pkg.to_owned(), parent);
            let always: Vec<String> = self
                .meta()
                .packages
                .get(pkg)
                .map(|p| {
                    p.deps
                        .iter()
                        .filter(|d| d.kind == DepKind::Normal && !d.optional)
                        .map(|d| d.toml_name().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            for dep in always {
                self.activate_dep(pkg, &dep);
            }
        }
        if let Some(feature) = feature {
            self.apply(pkg, feature);
        }
    }

    fn apply(&mut self, pkg: &str, value: &str) {
        if let Some(dep) = value.strip_prefix("dep:") {
            self.activate_dep(pkg, dep);
        } else if let Some((dep, feat)) = value.split_once('/') {
            let weak = dep.ends_with('?');
            let dep = dep.trim_end_matches('?');
            if !weak {
                let has_feature = self.meta().packages.get(pkg).is_some_and(|p| p.features.contains_key(dep));
                if has_feature {
                    self.queue.push_back((pkg.to_owned(), Some(dep.to_owned()), None));
                }
                self.activate_dep(pkg, dep);
            }
            let key = (pkg.to_owned(), dep.to_owned());
            self.pending.entry(key.clone()).or_default().push(feat.to_owned());
            if self.deps.contains(&key) {
                for target in self.targets(pkg, dep) {
                    self.queue.push_back((target, Some(feat.to_owned()), Some(pkg.to_owned())));
                }
            }
        } else if self.features.insert((pkg.to_owned(), value.to_owned())) {
            let Some(package) = self.meta().packages.get(pkg) else {
                return;
            };
            if let Some(entries) = package.features.get(value) {
                for entry in entries.clone() {
                    self.queue.push_back((pkg.to_owned(), Some(entry), None));
                }
            } else if package.deps.iter().any(|d| d.optional && d.toml_name() == value) {
                self.activate_dep(pkg, value);
            }
        }
    }

    fn activate_dep(&mut self, pkg: &str, dep: &str) {
        if !self.deps.insert((pkg.to_owned(), dep.to_owned())) {
            return;
        }
        let Some(package) = self.meta().packages.get(pkg) else {
            return;
        };
        let declared: Vec<Declared> =
            package.deps.iter().filter(|d| d.kind == DepKind::Normal && d.toml_name() == dep).cloned().collect();
        let pending = self.pending.get(&(pkg.to_owned(), dep.to_owned())).cloned().unwrap_or_default();
        for decl in declared {
            for target in self.resolve(pkg, &decl) {
                let parent = Some(pkg.to_owned());
                self.queue.push_back((target.clone(), None, parent.clone()));
                if decl.default_features {
                    self.queue.push_back((target.clone(), Some("default".to_owned()), parent.clone()));
                }
                for f in decl.features.iter().chain(&pending) {
                    self.queue.push_back((target.clone(), Some(f.clone()), parent.clone()));
                }
            }
        }
    }

    /// The packages a normal dependency called `dep` (manifest spelling) resolved to.
    fn targets(&self, pkg: &str, dep: &str) -> Vec<String> {
        let Some(package) = self.meta().packages.get(pkg) else {
            return Vec::new();
        };
        package
            .deps
            .iter()
            .filter(|d| d.kind == DepKind::Normal && d.toml_name() == dep)
            .flat_map(|d| self.resolve(pkg, d))
            .collect()
    }

    /// Match a declared dependency to the resolve graph's edges. An edge the graph
    /// lacks was never resolved (a platform or feature nobody enables) and is skipped.
    fn resolve(&self, pkg: &str, decl: &Declared) -> Vec<String> {
        let meta = self.meta();
        let Some(edges) = meta.edges.get(pkg) else {
            return Vec::new();
        };
        let renames: Vec<String> =
            meta.packages[pkg].deps.iter().filter_map(|d| d.rename.as_ref().map(|r| r.replace('-', "_"))).collect();
        edges
            .iter()
            .filter(|e| e.kinds.contains(&DepKind::Normal) && meta.name(&e.pkg) == decl.name)
            .filter(|e| match &decl.rename {
                Some(r) => e.extern_name == r.replace('-', "_"),
                None => !renames.contains(&e.extern_name),
            })
            .map(|e| e.pkg.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A package: (name, features, deps as (name, kind, optional, default, features)).
    type Spec<'a> = (&'a str, Value, &'a [(&'a str, Option<&'a str>, bool, bool, &'a [&'a str])]);

    fn metadata(specs: &[Spec<'_>]) -> Metadata {
        let packages: Vec<Value> = specs
            .iter()
            .map(|(name, features, deps)| {
                let deps: Vec<Value> = deps
                    .iter()
                    .map(|(dep, kind, optional, default, feats)| {
                        json!({"name": dep, "rename": null, "kind": kind, "optional": optional,
                               "uses_default_features": default, "features": feats})
                    })
                    .collect();
                json!({"id": name, "name": name, "manifest_path": "", "features": features,
                       "dependencies": deps, "targets": []})
            })
            .collect();
        // Like cargo's workspace-unified resolve: every declared edge is present.
        let nodes: Vec<Value> = specs
            .iter()
            .map(|(name, _, deps)| {
                let deps: Vec<Value> = deps
                    .iter()
                    .map(|(dep, kind, ..)| {
                        json!({"name": dep.replace('-', "_"), "pkg": dep,
                               "dep_kinds": [{"kind": kind, "target": null}]})
                    })
                    .collect();
                json!({"id": name, "deps": deps})
            })
            .collect();
        let json = json!({"packages": packages, "workspace_members": ["core"],
                          "resolve": {"nodes": nodes}, "target_directory": "/t"});
        Metadata::parse(&json).expect("valid metadata")
    }

    #[track_caller]
    fn check(specs: &[Spec<'_>], expected: &[&str]) {
        let meta = metadata(specs);
        let got: Vec<String> = meta.normal_closure("core").into_keys().collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn closure_follows_cargo_feature_rules() {
        let none = json!({});
        // Normal edges only; dev and build dependencies are not part of it.
        check(
            &[
                ("core", none.clone(), &[("a", None, false, true, &[]), ("d", Some("dev"), false, true, &[])]),
                ("a", none.clone(), &[("b", Some("build"), false, true, &[])]),
                ("b", none.clone(), &[]),
                ("d", none.clone(), &[]),
            ],
            &["a", "core"],
        );
        // An optional dependency behind a feature nobody enables stays out, one behind
        // a default feature comes in (`dep:` and `name/feat` forms).
        check(
            &[
                ("core", none.clone(), &[("a", None, false, true, &[]), ("x", None, false, false, &[])]),
                (
                    "a",
                    json!({"default": ["fast"], "fast": ["dep:f"], "rt": ["dep:tokio"]}),
                    &[("f", None, true, true, &[]), ("tokio", None, true, true, &[])],
                ),
                (
                    "x",
                    json!({"default": ["dep:mio"], "io": ["g/io"]}),
                    &[("mio", None, true, true, &[]), ("g", None, true, true, &[])],
                ),
                ("f", none.clone(), &[]),
                ("tokio", none.clone(), &[]),
                ("mio", none.clone(), &[]),
                ("g", none.clone(), &[]),
            ],
            &["a", "core", "f", "x"],
        );
        // A feature asked for on an edge, `name/feat` enabling an optional dependency,
        // and a weak `name?/feat` that does not.
        check(
            &[
                ("core", none.clone(), &[("a", None, false, false, &["net"])]),
                (
                    "a",
                    json!({"net": ["h/client", "w?/std"]}),
                    &[("h", None, true, true, &[]), ("w", None, true, true, &[])],
                ),
                ("h", json!({"client": ["dep:hyper"]}), &[("hyper", None, true, true, &[])]),
                ("hyper", none.clone(), &[]),
                ("w", none.clone(), &[]),
            ],
            &["a", "core", "h", "hyper"],
        );
    }

    #[test]
    fn closure_remembers_who_pulled_what() {
        let none = json!({});
        let meta = metadata(&[
            ("core", none.clone(), &[("a", None, false, true, &[])]),
            ("a", none.clone(), &[("tokio", None, false, true, &[])]),
            ("tokio", none.clone(), &[]),
        ]);
        let closure = meta.normal_closure("core");
        assert_eq!(closure["tokio"].as_deref(), Some("a"));
        assert_eq!(closure["a"].as_deref(), Some("core"));
        assert_eq!(closure["core"], None);
    }
}

//! `cargo xtask deploy`: the files under deploy/ are what their tools accept.
//!
//! * deploy/prometheus/drain-rules.yml: `promtool check rules`, and `promtool test
//!   rules` with drain-rules.test.yml (every alert fires on its synthetic series
//!   and stays quiet on the others);
//! * deploy/grafana/drain.json: valid JSON whose every panel queries only metrics
//!   of the keep-list (crates/adapter-metrics/src/keep.rs); tests/prometheus.rs
//!   runs each query against a real Prometheus;
//! * deploy/systemd/drain.service: `systemd-analyze verify` prints nothing (it
//!   exits 0 on unknown keys and bad values, so any output fails the gate), on a
//!   copy whose `ExecStart` names a program that exists here.
//!
//! promtool comes with Debian's `prometheus` package: as root the gate installs it
//! with .ci/setup-services.sh; otherwise it prints the command. Without
//! `systemd-analyze` the unit check is skipped with the reason.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::services::{self, Need};
use crate::util::{Failure, GateResult, Outcome, project_root, run};

const RULES: &str = "deploy/prometheus/drain-rules.yml";
const RULE_TESTS: &str = "deploy/prometheus/drain-rules.test.yml";
const DASHBOARD: &str = "deploy/grafana/drain.json";
const UNIT: &str = "deploy/systemd/drain.service";
const INSTALLED_AT: &str = "/usr/local/bin/drain";

/// Run the gate.
pub(crate) fn run_gate() -> GateResult {
    let root = project_root();
    let mut skipped = Vec::new();
    match services::ensure(&["promtool"])? {
        Need::Present => {
            run(Command::new("promtool").current_dir(&root).args(["check", "rules", RULES]))?;
            run(Command::new("promtool").current_dir(&root).args(["test", "rules", RULE_TESTS]))?;
        }
        Need::Missing(why) => skipped.push(why),
    }
    check_dashboard(&root)?;
    println!("xtask deploy: {DASHBOARD} queries only keep-list metrics");
    match find_systemd_analyze() {
        Some(tool) => check_unit(&root, &tool)?,
        None => {
            let why = "systemd-analyze is not installed: the systemd unit is not verified".to_owned();
            println!("xtask deploy: {why}");
            skipped.push(why);
        }
    }
    if skipped.is_empty() { Ok(Outcome::Passed) } else { Ok(Outcome::Skipped(skipped.join("; "))) }
}

/// The metric names of the keep-list, read from its source.
fn keep_list(root: &Path) -> Result<Vec<String>, Failure> {
    let path = root.join("crates/adapter-metrics/src/keep.rs");
    let text = fs::read_to_string(&path).map_err(|e| Failure::new(format!("cannot read {}: {e}", path.display())))?;
    let names: Vec<String> = text
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("drain_") && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .map(str::to_owned)
        .collect();
    if names.is_empty() {
        return Err(Failure::new("no keep-list found in crates/adapter-metrics/src/keep.rs"));
    }
    Ok(names)
}

/// Every `drain_…` identifier in a PromQL expression, without the histogram suffixes.
pub(crate) fn metric_names(expr: &str) -> Vec<String> {
    // Label values are quoted: blank them out first (`job="drain_x"` names no metric).
    let mut quoted = false;
    let expr: String = expr
        .chars()
        .map(|c| {
            if c == '"' {
                quoted = !quoted;
                ' '
            } else if quoted {
                ' '
            } else {
                c
            }
        })
        .collect();
    let expr = expr.as_str();
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("drain_").map(|p| p + i) {
        let starts_word = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let end = expr[at..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(expr.len(), |e| at + e);
        if starts_word {
            let name = &expr[at..end];
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            out.push(base.to_owned());
        }
        i = end;
    }
    out
}

fn check_dashboard(root: &Path) -> Result<(), Failure> {
    let text =
        fs::read_to_string(root.join(DASHBOARD)).map_err(|e| Failure::new(format!("cannot read {DASHBOARD}: {e}")))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Failure::new(format!("{DASHBOARD} is not JSON: {e}")))?;
    let keep = keep_list(root)?;
    let panels = json["panels"].as_array().ok_or_else(|| Failure::new(format!("{DASHBOARD} has no panels")))?;
    let mut queried = Vec::new();
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.ok_or_else(|| Failure::new(format!("{DASHBOARD}: panel `{title}` has no query")))?;
        for t in targets {
            let expr = t["expr"]
                .as_str()
                .ok_or_else(|| Failure::new(format!("{DASHBOARD}: panel `{title}`: a target without expr")))?;
            let names = metric_names(expr);
            if names.is_empty() {
                return Err(Failure::new(format!("{DASHBOARD}: panel `{title}` queries no drain metric: {expr}")));
            }
            for n in names {
                if !keep.contains(&n) {
                    return Err(Failure::new(format!(
                        "{DASHBOARD}: panel `{title}` queries `{n}`, which is not on the keep-list"
                    )));
                }
                queried.push(n);
            }
        }
    }
    let missing: Vec<&String> = keep.iter().filter(|k| !queried.contains(k)).collect();
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "{DASHBOARD} shows no panel for {missing:?}: the dashboard covers the keep-list"
        )));
    }
    Ok(())
}

fn find_systemd_analyze() -> Option<String> {
    let ok = Command::new("systemd-analyze").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    ok.is_ok_and(|s| s.success()).then(|| "systemd-analyze".to_owned())
}

fn check_unit(root: &Path, tool: &str) -> Result<(), Failure> {
    let text = fs::read_to_string(root.join(UNIT)).map_err(|e| Failure::new(format!("cannot read {UNIT}: {e}")))?;
    if !text.contains(&format!("ExecStart={INSTALLED_AT} ")) {
        return Err(Failure::new(format!("{UNIT}: ExecStart does not run {INSTALLED_AT}")));
    }
    // The unit names the installed binary; verify a copy naming one that exists here.
    let here = std::env::current_exe().map_err(|e| Failure::new(format!("cannot find the xtask binary: {e}")))?;
    let dir = root.join("target").join("xtask-deploy");
    fs::create_dir_all(&dir).map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    let copy = dir.join("drain.service");
    fs::write(&copy, text.replace(INSTALLED_AT, &here.display().to_string()))
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", copy.display())))?;
    println!("$ {tool} verify {UNIT} (a copy in target/xtask-deploy/ with ExecStart={})", here.display());
    let out = Command::new(tool)
        .arg("verify")
        .arg(&copy)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Failure::new(format!("could not run {tool}: {e}")))?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() || !said.trim().is_empty() {
        return Err(Failure::new(format!("`{tool} verify {UNIT}` complained:\n{}", said.trim()))
            .fix(format!("fix {UNIT} until `{tool} verify` prints nothing")));
    }
    println!("xtask deploy: {UNIT} verified");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(expr: &str, expected: &[&str]) {
        assert_eq!(metric_names(expr), expected, "{expr}");
    }

    #[test]
    fn metric_names_finds_every_drain_metric_without_histogram_suffixes() {
        check("sum(rate(drain_ticks_total[5m]))", &["drain_ticks_total"]);
        check(
            "histogram_quantile(0.99, sum by (le) (rate(drain_tick_duration_seconds_bucket[5m])))",
            &["drain_tick_duration_seconds"],
        );
        check("drain_a_total + on(x) drain_b_count", &["drain_a_total", "drain_b"]);
        check(r#"up{job="drain_x"} or my_drain_total"#, &[]);
        check("up", &[]);
    }
}

//! The README's example, run: the crate is a binary, so rustdoc runs no example of
//! its; this test runs every `$ drain …` line of the README's `console` blocks with
//! the built binary, on the embedded defaults (no `DRAIN_*` variables; metrics off, so
//! parallel tests do not compete for the default port), and checks that it exits 0
//! and prints the output lines shown under it (a line ending in `…` is a prefix).
#![allow(clippy::disallowed_methods, reason = "a test harness reads its DRAIN_TEST_* and CI variables")]

use std::process::Command;

const README: &str = include_str!("../README.md");

/// One command of the README and the output it shows.
#[derive(Debug, PartialEq, Eq)]
struct Step {
    args: Vec<String>,
    shown: Vec<String>,
}

/// The `$ drain …` commands of the README's `console` blocks, with the lines shown
/// under each; other commands (`cargo install`) are not run.
fn steps(markdown: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let (mut console, mut collecting) = (false, false);
    for line in markdown.lines() {
        if line.starts_with("```") {
            console = !console && line.trim() == "```console";
            collecting = false;
            continue;
        }
        if !console {
            continue;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            let mut words = command.split_whitespace().map(str::to_owned);
            collecting = words.next().as_deref() == Some("drain");
            if collecting {
                steps.push(Step { args: words.collect(), shown: Vec::new() });
            }
        } else if collecting && let Some(step) = steps.last_mut() {
            step.shown.push(line.to_owned());
        }
    }
    steps
}

/// Whether `output` has the line the README shows.
fn shows(output: &str, shown: &str) -> bool {
    match shown.strip_suffix('…') {
        Some(prefix) => output.lines().any(|l| l.starts_with(prefix)),
        None => output.lines().any(|l| l == shown),
    }
}

#[test]
fn the_readme_commands_run_and_print_what_it_shows() {
    let steps = steps(README);
    assert!(steps.len() >= 3, "the README shows drain's commands: {steps:?}");
    for step in &steps {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_drain"));
        for (k, _) in std::env::vars() {
            if k.starts_with("DRAIN_") || k.starts_with("SERVICEBUS_") || k.starts_with("PROJECTION_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd.env("DRAIN_METRICS_ADDR", "off").args(&step.args).output().expect("run drain");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = format!("drain {}", step.args.join(" "));
        assert!(out.status.success(), "`{line}` failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        for shown in &step.shown {
            assert!(shows(&stdout, shown), "`{line}` did not print the README's `{shown}`:\n{stdout}");
        }
    }
}

#[test]
fn steps_are_read_from_console_blocks_only() {
    let md = "```console\n$ cargo install x\nignored\n$ drain run --once\n{\"a\":1…\n$ drain config\n```\n\n```sh\n$ drain simulate\n```\n";
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        steps(md),
        [
            Step { args: args(&["run", "--once"]), shown: args(&["{\"a\":1…"]) },
            Step { args: args(&["config"]), shown: Vec::new() },
        ]
    );
    assert!(shows("x\n{\"a\":1,\"b\":2}\n", "{\"a\":1…"));
    assert!(!shows("{\"a\":1}", "{\"a\":1}x"));
    assert!(!shows("  SWITCH on", "SWITCH on"), "a whole line, not a part of one");
}

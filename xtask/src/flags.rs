//! `cargo xtask flags [--write]`: docs/flags.md is exactly what
//! `drain config --flags-markdown` renders from the switch registry.

use std::fs;
use std::process::Command;

use crate::util::{Failure, GateResult, Outcome, display, project_root, test_build};

const DOC: &str = "docs/flags.md";
const FIX: &str = "run `cargo xtask flags --write`";

/// What the binary said.
enum Rendered {
    /// The registry as Markdown.
    Markdown(String),
    /// The subcommand does not exist yet (failed, or printed nothing).
    NotImplemented(String),
}

/// Run the gate; with `write`, regenerate the file instead of checking it.
pub(crate) fn run_gate(write: bool) -> GateResult {
    let path = project_root().join(DOC);
    let existing = fs::read_to_string(&path).ok();
    let rendered = render()?;
    match (rendered, write) {
        (Rendered::Markdown(md), true) => {
            let written = path.parent().map_or(Ok(()), fs::create_dir_all).and_then(|()| fs::write(&path, md));
            written.map_err(|e| Failure::new(format!("cannot write {DOC}: {e}")))?;
            println!("xtask flags: wrote {DOC}");
            Ok(Outcome::Passed)
        }
        (Rendered::NotImplemented(why), true) => Err(Failure::new(format!(
            "cannot write {DOC}: `drain config --flags-markdown` is not implemented yet ({why})"
        ))),
        (Rendered::NotImplemented(why), false) => {
            match existing {
                None => Ok(Outcome::Skipped("drain config --flags-markdown not implemented yet".to_owned())),
                Some(_) => Err(Failure::new(format!(
                    "{DOC} exists but `drain config --flags-markdown` renders nothing ({why})"
                ))
                .fix("make `drain config --flags-markdown` print the registry, then run `cargo xtask flags --write`")),
            }
        }
        (Rendered::Markdown(md), false) => match existing {
            None => Err(Failure::new(format!("{DOC} is missing")).fix(FIX)),
            Some(current) if current == md => Ok(Outcome::Passed),
            Some(current) => Err(Failure::new(format!(
                "{DOC} is out of date with the registry: {}",
                first_difference(&current, &md)
            ))
            .fix(FIX)),
        },
    }
}

/// Build the binary with the test build (a build failure fails the gate), then ask it
/// for the Markdown.
fn render() -> Result<Rendered, Failure> {
    let debug = test_build().map_err(|f| Failure::new(format!("drain does not build: {}", f.what)))?;
    let mut cmd = Command::new(debug.join(format!("drain{}", std::env::consts::EXE_SUFFIX)));
    cmd.args(["config", "--flags-markdown"]);
    println!("$ {}", display(&cmd));
    let output = cmd.output().map_err(|e| Failure::new(format!("could not run `{}`: {e}", display(&cmd))))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        return Ok(Rendered::NotImplemented(format!("{}: {}", output.status, last.trim())));
    }
    if stdout.trim().is_empty() {
        return Ok(Rendered::NotImplemented("it printed nothing".to_owned()));
    }
    Ok(Rendered::Markdown(stdout))
}

/// "line N: `old` vs `new`", for the message.
fn first_difference(current: &str, wanted: &str) -> String {
    let mut a = current.lines();
    let mut b = wanted.lines();
    let mut n = 1;
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => n += 1,
            (None, None) => {
                return "they differ only in line endings or a final newline".to_owned();
            }
            (x, y) => {
                return format!(
                    "line {n}: file has `{}`, registry renders `{}`",
                    x.unwrap_or("<end of file>"),
                    y.unwrap_or("<end of file>")
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_names_the_line() {
        assert_eq!(first_difference("a\nb\nc\n", "a\nB\nc\n"), "line 2: file has `b`, registry renders `B`");
        assert_eq!(first_difference("a\n", "a\nb\n"), "line 2: file has `<end of file>`, registry renders `b`");
        assert_eq!(first_difference("a\n", "a"), "they differ only in line endings or a final newline");
    }
}

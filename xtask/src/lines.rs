//! `cargo xtask lines`: no source file over [`LIMIT`] lines without a reason in
//! `xtask/line-exceptions.txt`, and no exception that is no longer needed.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::files::{project_files, slashed};
use crate::util::{Failure, GateResult, Outcome, project_root};

/// The most lines a source file may have.
pub(crate) const LIMIT: usize = 800;
/// Which files count as source.
const EXTENSIONS: &[&str] = &["rs", "lua", "toml", "sh"];
/// Where exceptions live, relative to the root.
const EXCEPTIONS: &str = "xtask/line-exceptions.txt";

/// Run the gate.
pub(crate) fn run() -> GateResult {
    let root = project_root();
    let text = fs::read_to_string(root.join(EXCEPTIONS)).unwrap_or_default();
    let mut counts = BTreeMap::new();
    for file in project_files(&root) {
        if file.extension().is_some_and(|e| EXTENSIONS.iter().any(|x| e == *x)) {
            let bytes =
                fs::read(root.join(&file)).map_err(|e| Failure::new(format!("cannot read {}: {e}", file.display())))?;
            counts.insert(slashed(&file), count_lines(&bytes));
        }
    }
    let problems = check(&counts, &text);
    if problems.is_empty() {
        return Ok(Outcome::Passed);
    }
    for p in &problems {
        println!("  {p}");
    }
    Err(Failure::new(format!("{} problem(s) with file length, listed above", problems.len()))
        .fix(format!("split the file, or add `path | reason` to {EXCEPTIONS}; delete exceptions marked stale")))
}

fn count_lines(bytes: &[u8]) -> usize {
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
    newlines + usize::from(bytes.last().is_some_and(|&b| b != b'\n'))
}

/// Compare line counts (path -> lines) with the exceptions file's text.
fn check(counts: &BTreeMap<String, usize>, exceptions: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut excepted = BTreeMap::new();
    for (n, raw) in exceptions.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("{EXCEPTIONS}:{}", n + 1);
        match line.split_once('|').map(|(p, r)| (p.trim(), r.trim())) {
            Some((path, reason)) if !path.is_empty() && !reason.is_empty() => {
                if excepted.insert(path.to_owned(), at.clone()).is_some() {
                    problems.push(format!("{at}: `{path}` is listed twice"));
                }
            }
            _ => problems.push(format!("{at}: expected `path | reason`, found `{line}`")),
        }
    }
    for (path, &lines) in counts {
        if lines > LIMIT && !excepted.contains_key(path) {
            problems.push(format!("{path}: {lines} lines (limit {LIMIT})"));
        }
    }
    for (path, at) in &excepted {
        match counts.get(path) {
            None if !Path::new(path).extension().is_some_and(|e| EXTENSIONS.iter().any(|x| e == *x)) => {
                problems.push(format!("{at}: `{path}` is not a source file this gate checks"));
            }
            None => problems.push(format!("{at}: stale, `{path}` does not exist")),
            Some(&lines) if lines <= LIMIT => {
                problems.push(format!("{at}: stale, `{path}` has {lines} lines, within the limit of {LIMIT}"))
            }
            Some(_) => {}
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_gate(files: &[(&str, usize)], exceptions: &str, expected: &[&str]) {
        let counts = files.iter().map(|&(p, n)| (p.to_owned(), n)).collect();
        assert_eq!(check(&counts, exceptions), expected);
    }

    #[test]
    fn long_files_need_a_reason() {
        check_gate(&[("a.rs", 800), ("b.rs", 12)], "", &[]);
        check_gate(&[("a.rs", 801)], "", &["a.rs: 801 lines (limit 800)"]);
        check_gate(&[("a.rs", 801)], "# why\n\na.rs | generated table\n", &[]);
        check_gate(
            &[("a.rs", 801)],
            "a.rs |\nb.rs\n",
            &[
                "xtask/line-exceptions.txt:1: expected `path | reason`, found `a.rs |`",
                "xtask/line-exceptions.txt:2: expected `path | reason`, found `b.rs`",
                "a.rs: 801 lines (limit 800)",
            ],
        );
    }

    #[test]
    fn stale_exceptions_fail() {
        check_gate(
            &[("a.rs", 300)],
            "a.rs | was long\ngone.rs | deleted\nREADME.md | prose\n",
            &[
                "xtask/line-exceptions.txt:3: `README.md` is not a source file this gate checks",
                "xtask/line-exceptions.txt:1: stale, `a.rs` has 300 lines, within the limit of 800",
                "xtask/line-exceptions.txt:2: stale, `gone.rs` does not exist",
            ],
        );
        check_gate(&[("a.rs", 900)], "a.rs | x\na.rs | y\n", &["xtask/line-exceptions.txt:2: `a.rs` is listed twice"]);
    }

    #[test]
    fn counts_lines_like_wc_plus_an_unterminated_last_line() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"a\nb\n"), 2);
        assert_eq!(count_lines(b"a\nb"), 2);
    }
}

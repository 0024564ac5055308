//! Which files the source gates look at.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file git tracks or would track (untracked but not ignored), as paths
/// relative to `root`, sorted. Untracked files count so that a gate fails before the
/// commit, not after. Without git (or outside a repository) the tree is walked,
/// skipping `target/` and hidden directories.
pub(crate) fn project_files(root: &Path) -> Vec<PathBuf> {
    let mut files = git_files(root).unwrap_or_else(|| {
        let mut out = Vec::new();
        walk(root, root, true, &mut out);
        out
    });
    files.retain(|f| root.join(f).is_file());
    files.sort();
    files.dedup();
    files
}

fn git_files(root: &Path) -> Option<Vec<PathBuf>> {
    let output = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Some(text.split('\0').filter(|s| !s.is_empty()).map(PathBuf::from).collect())
}

/// Collect the files below `dir` as paths relative to `root`, skipping hidden entries
/// and, when asked, `root/target`.
fn walk(root: &Path, dir: &Path, skip_target: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || (skip_target && dir == root && name == "target") {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, skip_target, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            out.push(relative.to_path_buf());
        }
    }
}

/// Every `*.rs` file below `dir`, sorted (absolute paths).
pub(crate) fn rust_files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(dir, dir, false, &mut out);
    let mut files: Vec<PathBuf> =
        out.into_iter().filter(|p| p.extension().is_some_and(|e| e == "rs")).map(|p| dir.join(p)).collect();
    files.sort();
    files
}

/// `path` with `/` separators, for matching and messages.
pub(crate) fn slashed(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}

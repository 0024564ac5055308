//! What every gate shares: the project root, running commands, and the two ways a
//! gate ends.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// How a gate that did not fail ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The gate ran and everything it checks holds.
    Passed,
    /// The gate had nothing to check yet; the reason says why.
    Skipped(String),
}

/// A failed gate: what went wrong and, when there is one, the command that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// One sentence: what is wrong.
    pub(crate) what: String,
    /// The command (or step) that fixes it.
    pub(crate) fix: Option<String>,
}

impl Failure {
    /// A failure without a known fix.
    pub(crate) fn new(what: impl Into<String>) -> Self {
        Failure { what: what.into(), fix: None }
    }

    /// Attach the command that fixes it.
    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.what)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n  fix: {fix}")?;
        }
        Ok(())
    }
}

/// What a gate returns.
pub(crate) type GateResult = Result<Outcome, Failure>;

/// The one argument of a gate that runs for a while: nothing (`default`), or
/// `<flag> N`, N a whole number of `unit` and at least `min`.
pub(crate) fn length_arg(
    gate: &str,
    args: &[&str],
    (flag, unit): (&str, &str),
    min: u64,
    default: u64,
) -> Result<u64, String> {
    match args {
        [] => Ok(default),
        [f, n] if *f == flag => match n.parse::<u64>() {
            Ok(v) if v >= min => Ok(v),
            _ => Err(format!("{flag} takes a whole number of {unit}, at least {min}, not `{n}`")),
        },
        _ => Err(format!("unexpected arguments to `{gate}`: `{}` (expected `{flag} N`)", args.join(" "))),
    }
}

/// Print a gate's closing line (`xtask <name>: ok`, `… skipped (why)`, `… FAILED: …`)
/// and hand its result on.
pub(crate) fn report(name: &str, result: GateResult) -> GateResult {
    match &result {
        Ok(Outcome::Passed) => println!("xtask {name}: ok"),
        Ok(Outcome::Skipped(why)) => println!("xtask {name}: skipped ({why})"),
        Err(failure) => println!("xtask {name}: FAILED: {failure}"),
    }
    result
}

/// The workspace root: the parent of this crate's manifest directory.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// Set by `ci`: see [`not_incremental`].
static NOT_INCREMENTAL: AtomicBool = AtomicBool::new(false);

/// From now on the cargo commands this process starts, and the xtask processes it
/// starts, build without incremental compilation (unless `CARGO_INCREMENTAL` is set):
/// `ci` builds each crate once, and writing the incremental caches only costs (the
/// workspace's crates built in 115 s instead of 155 s on two cores).
pub(crate) fn not_incremental() {
    NOT_INCREMENTAL.store(true, Ordering::Relaxed);
}

/// Give `cmd` the environment [`not_incremental`] asks for.
pub(crate) fn build_env(cmd: &mut Command) {
    if NOT_INCREMENTAL.load(Ordering::Relaxed) && std::env::var_os("CARGO_INCREMENTAL").is_none() {
        cmd.env("CARGO_INCREMENTAL", "0");
    }
}

/// `cargo`, the same binary that runs xtask when there is one, in the project root.
pub(crate) fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(program);
    cmd.current_dir(project_root());
    build_env(&mut cmd);
    cmd
}

/// Build what `cargo xtask test` builds (a no-op after it) and return the debug
/// directory holding its binaries: the gates that run `drain` or the load program
/// use those, instead of a `cargo build -p` whose other features rebuild dependencies.
pub(crate) fn test_build() -> Result<PathBuf, Failure> {
    run(cargo().args(["test", "--workspace", "--all-features", "--no-run", "--quiet"]))
        .map_err(|f| f.fix("fix the build errors above"))?;
    Ok(crate::metadata::Metadata::load()?.target_directory.join("debug"))
}

/// Whether we run under CI (`CI=true`, as CI services set it).
pub(crate) fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim();
        !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false")
    })
}

/// The command line as a person would type it: environment assignments first, and
/// `cargo` instead of the full path of the toolchain's cargo.
pub(crate) fn display(cmd: &Command) -> String {
    let mut parts = Vec::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            let value = redact(&value.to_string_lossy());
            parts.push(format!("{}={}", key.to_string_lossy(), quote(&value)));
        }
    }
    let program = Path::new(cmd.get_program());
    let name = program
        .file_name()
        .map_or_else(|| program.to_string_lossy().into_owned(), |n| n.to_string_lossy().into_owned());
    parts.push(name);
    parts.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    parts.join(" ")
}

/// Hide the credentials of a URL (`scheme://user:pass@host` -> `scheme://***@host`).
fn redact(value: &str) -> String {
    match (value.find("://"), value.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme + 3 => {
            format!("{}***{}", &value[..scheme + 3], &value[at..])
        }
        _ => value.to_owned(),
    }
}

fn quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+".contains(c));
    if plain { s.to_owned() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

/// Run `cmd` with inherited stdio; a non-zero exit becomes a [`Failure`] naming the
/// command.
pub(crate) fn run(cmd: &mut Command) -> Result<(), Failure> {
    let line = display(cmd);
    println!("$ {line}");
    let status = cmd.status().map_err(|e| Failure::new(format!("could not start `{line}`: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        let how = status.code().map_or_else(|| "was killed by a signal".to_owned(), |c| format!("exited with {c}"));
        Err(Failure::new(format!("`{line}` {how}")))
    }
}

/// `path` relative to the project root, with `/` separators, for messages.
pub(crate) fn rel(path: &Path) -> String {
    let root = project_root();
    let shown = path.strip_prefix(&root).unwrap_or(path);
    shown.to_string_lossy().replace('\\', "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_what_needs_it() {
        let mut cmd = Command::new("/opt/rust/bin/cargo");
        cmd.args(["doc", "--workspace", "--", "-D warnings", ""]);
        cmd.env("RUSTDOCFLAGS", "-D warnings");
        assert_eq!(display(&cmd), "RUSTDOCFLAGS='-D warnings' cargo doc --workspace -- '-D warnings' ''");
    }

    #[test]
    fn urls_are_shown_without_credentials() {
        let mut cmd = Command::new("cargo");
        cmd.env("DRAIN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672");
        cmd.env("DRAIN_TEST_SERVICEBUS", "Endpoint=sb://x/;SharedAccessKey=abc");
        cmd.arg("test");
        let shown = display(&cmd);
        assert!(shown.starts_with("DRAIN_TEST_AMQP_URL='amqp://***@127.0.0.1:5672'"), "{shown}");
        assert!(!shown.contains("guest:guest"), "{shown}");
    }

    #[test]
    fn failure_shows_its_fix_on_a_second_line() {
        let f = Failure::new("unformatted files").fix("run `cargo fmt --all`");
        assert_eq!(f.to_string(), "unformatted files\n  fix: run `cargo fmt --all`");
    }
}

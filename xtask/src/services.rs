//! The programs the gates need (Debian packages), installed by
//! .ci/setup-services.sh: run by the gate itself as root, named as the one command
//! to run otherwise.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{Failure, run};

/// What [`ensure`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Every program is installed (now).
    Present,
    /// Some are missing and this is not root (outside CI): why, with the command.
    Missing(String),
}

/// The setup script, relative to the project root.
const SETUP_SCRIPT: &str = ".ci/setup-services.sh";

/// What to do about missing programs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Nothing is missing.
    Nothing,
    /// Root: run the setup script, then look again.
    RunSetup,
    /// Not root: fail (under CI) or warn, with the one command to run.
    Ask { why: String, fail: bool },
}

fn decide(absent: &[&str], root: bool, ci: bool) -> Step {
    if absent.is_empty() {
        return Step::Nothing;
    }
    if root {
        return Step::RunSetup;
    }
    let why = format!(
        "{} not installed; run `sudo bash {SETUP_SCRIPT}` (installs every package the tests need)",
        absent.join(", ")
    );
    Step::Ask { why, fail: ci }
}

/// Make sure `programs` are installed. As root a missing one is installed by running
/// the setup script (the same one CI runs); otherwise the gate prints the one
/// command to run, and under CI fails with it.
pub(crate) fn ensure(programs: &[&str]) -> Result<Need, Failure> {
    let absent = missing(programs);
    match decide(&absent, is_root(), crate::util::is_ci()) {
        Step::Nothing => Ok(Need::Present),
        Step::RunSetup => {
            println!("xtask: {} not installed; running `bash {SETUP_SCRIPT}` (as root)", absent.join(", "));
            let mut cmd = Command::new("bash");
            cmd.arg(SETUP_SCRIPT).current_dir(crate::util::project_root()).stdin(Stdio::null());
            run(&mut cmd)?;
            let still = missing(programs);
            if still.is_empty() {
                return Ok(Need::Present);
            }
            Err(Failure::new(format!("{} still not installed after {SETUP_SCRIPT}", still.join(", "))))
        }
        Step::Ask { why, fail: true } => Err(Failure::new(why)),
        Step::Ask { why, fail: false } => {
            println!("xtask: warning: {why}");
            Ok(Need::Missing(why))
        }
    }
}

fn missing<'a>(programs: &[&'a str]) -> Vec<&'a str> {
    programs.iter().copied().filter(|p| find_program(p).is_none()).collect()
}

/// Whether this process runs as root (uid 0), read from /proc on Linux.
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").ok().is_some_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            .is_some_and(|effective| effective == "0")
    })
}

/// `name` on `PATH`, in the sbin directories Debian puts RabbitMQ's tools in, or
/// in Debian's PostgreSQL server directories (`/usr/lib/postgresql/<major>/bin`).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let postgres = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|major| major.path().join("bin"));
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .chain(postgres)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(absent: &[&str], root: bool, ci: bool, expected: &Step) {
        assert_eq!(&decide(absent, root, ci), expected, "absent {absent:?}, root {root}, ci {ci}");
    }

    #[test]
    fn a_missing_package_is_installed_as_root_and_asked_for_otherwise() {
        let why =
            "promtool not installed; run `sudo bash .ci/setup-services.sh` (installs every package the tests need)";
        for (root, ci) in [(true, true), (true, false), (false, true), (false, false)] {
            check(&[], root, ci, &Step::Nothing);
        }
        check(&["promtool"], true, true, &Step::RunSetup);
        check(&["promtool"], true, false, &Step::RunSetup);
        check(&["promtool"], false, true, &Step::Ask { why: why.to_owned(), fail: true });
        check(&["promtool"], false, false, &Step::Ask { why: why.to_owned(), fail: false });
    }

    /// As root, a program the setup script cannot provide is named after it ran
    /// (here the script finds every real package installed and changes nothing).
    #[test]
    fn as_root_the_setup_script_runs_and_what_is_still_missing_is_named() {
        if !is_root() || !missing(&crate::test_gate::PROGRAMS).is_empty() {
            // Not root, or packages missing: running the script would install them.
            eprintln!("SKIP: needs root with every package installed");
            return;
        }
        let failure = ensure(&["drain-no-such-program"]).expect_err("still missing");
        assert!(failure.what.contains("drain-no-such-program still not installed after"), "{failure}");
    }
}

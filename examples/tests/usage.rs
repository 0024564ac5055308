//! The programs on bad input: missing or malformed arguments print the usage and exit
//! 2; a store that cannot be reached is a message and exit 1; never a panic.

mod support;

use std::time::Duration;

use support::Program;

const JOB: &str = env!("CARGO_BIN_EXE_nightly-job");
const TENANTS: &str = env!("CARGO_BIN_EXE_tenant-drains");
const SPOOL: &str = env!("CARGO_BIN_EXE_spool-beat");

/// Run `bin` with `args` to its end: its exit code and what it printed on stderr.
fn run(bin: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut p = Program::start(bin, args);
    let status = p.wait_exit(Duration::from_secs(20)).unwrap_or_else(|| panic!("{bin} {args:?} still runs"));
    let said = p.stderr().join("\n");
    assert!(!said.contains("panicked"), "{bin} {args:?}:\n{said}");
    (status.code(), said)
}

#[test]
fn bad_arguments_print_the_usage_and_exit_2() {
    let spool = std::env::temp_dir().display().to_string();
    for (bin, args) in [
        (JOB, &[][..]),
        (JOB, &["redis://127.0.0.1:1", "a", "1000", "3"]),
        (JOB, &["redis://127.0.0.1:1", "a", "soon", "3", "100"]),
        (JOB, &["redis://127.0.0.1:1", "a", "1000", "3", "100", "extra"]),
        (TENANTS, &[]),
        (TENANTS, &["postgres://127.0.0.1:1/postgres"]),
        (SPOOL, &[]),
        (SPOOL, &["redis://127.0.0.1:1", &spool, &spool]),
    ] {
        let (code, said) = run(bin, args);
        assert_eq!(code, Some(2), "{bin} {args:?}:\n{said}");
        assert!(said.starts_with("usage: "), "{bin} {args:?}:\n{said}");
    }
}

#[test]
fn a_store_that_cannot_be_reached_is_reported_with_exit_1() {
    // Port 1 on loopback refuses at once.
    let dir = std::env::temp_dir().join(format!("drain-examples-{}-usage", std::process::id()));
    let dir = dir.display().to_string();
    for (bin, args, says) in [
        (JOB, vec!["redis://127.0.0.1:1", "a", "1000", "3", "100"], "no Redis"),
        (TENANTS, vec!["postgres://postgres@127.0.0.1:1/postgres", "a"], "tenant-drains: "),
        (SPOOL, vec!["redis://127.0.0.1:1", &dir, &dir, "a"], "no Redis"),
    ] {
        let (code, said) = run(bin, &args);
        assert_eq!(code, Some(1), "{bin} {args:?}:\n{said}");
        assert!(said.contains(says), "{bin} {args:?}:\n{said}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! The gates that are one cargo command each: `fmt`, `clippy`, `doc`.
//!
//! `clippy`, `test` and `doc` all pass `--workspace --all-features` and set no
//! `RUSTFLAGS`, so cargo resolves the same features for each and reuses build
//! scripts, proc-macros and dependency metadata between them.

use std::ffi::OsString;

use crate::util::{GateResult, Outcome, cargo, run};

/// `cargo fmt --all -- --check`.
pub(crate) fn fmt() -> GateResult {
    run(cargo().args(["fmt", "--all", "--", "--check"])).map_err(|f| f.fix("run `cargo fmt --all`"))?;
    Ok(Outcome::Passed)
}

/// `cargo clippy` on every target with warnings denied.
pub(crate) fn clippy() -> GateResult {
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--all-features", "--", "-D", "warnings"]))
        .map_err(|f| {
            f.fix("fix the lints above; many are fixed by `cargo clippy --fix --workspace --all-targets --all-features --allow-dirty`")
        })?;
    // The fuzz targets are their own workspace and only `cargo xtask fuzz` (nightly,
    // not in `ci`) builds them: lint them here on stable, so a change to the code they
    // cover cannot leave them broken unnoticed.
    // Without the default `link` feature libfuzzer-sys skips compiling libFuzzer's C++.
    // In the main target directory, with the main dev profile, the dependencies the
    // lint above checked are reused.
    let target = crate::metadata::Metadata::load()?.target_directory;
    run(cargo().args(["clippy", "--manifest-path", "fuzz/Cargo.toml", "--bins", "--no-default-features"]).args([
        OsString::from("--target-dir"),
        target.into_os_string(),
        OsString::from("--"),
        OsString::from("-D"),
        OsString::from("warnings"),
    ]))
    .map_err(|f| f.fix("fix the fuzz targets in fuzz/fuzz_targets/ (they build against the workspace's crates)"))?;
    Ok(Outcome::Passed)
}

/// `cargo doc` with rustdoc warnings denied (broken intra-doc links, bad code blocks).
pub(crate) fn doc() -> GateResult {
    let mut flags = std::env::var_os("RUSTDOCFLAGS").unwrap_or_default();
    if !flags.is_empty() {
        flags.push(" ");
    }
    flags.push(OsString::from("-D warnings"));
    run(cargo().env("RUSTDOCFLAGS", flags).args(["doc", "--workspace", "--no-deps", "--all-features"]))
        .map_err(|f| f.fix("fix the rustdoc warnings above, then run `cargo xtask doc`"))?;
    Ok(Outcome::Passed)
}

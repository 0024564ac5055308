//! `drain simulate`: the fleet simulator (issue 7). Not built yet.

use std::process::ExitCode;

use clap::Args;

/// Arguments of `drain simulate`.
#[derive(Debug, Args)]
pub(crate) struct SimulateArgs {
    /// RNG seed; the same seed gives byte-identical output.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

/// `drain simulate`.
pub(crate) fn main(args: &SimulateArgs) -> ExitCode {
    eprintln!("drain simulate (seed {}): the simulator is not built yet", args.seed);
    ExitCode::from(2)
}

//! The `drain` binary: configuration, composition, beat, CLI.
//!
//! `main` only parses the command line, loads the configuration and dispatches;
//! each piece lives in a module of its own (see docs/architecture.md).

mod cli;
mod commands;
mod compose;
mod config;
mod demo;
mod logging;
mod observe;
mod out;
mod panic_hook;
mod report;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    panic_hook::install();
    let cli = cli::Cli::parse();
    let Some(command) = cli.command else {
        // A bare `drain` says what `drain --help` says (on stdout, exit 0).
        print!("{}", cli::long_help());
        return ExitCode::SUCCESS;
    };
    let loaded = match config::load(cli.config.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("drain: {e}");
            return ExitCode::from(2);
        }
    };
    panic_hook::set_secrets(loaded.config.secret_parts());
    // `config` and `doctor` print the configuration warnings as part of their output.
    let warnings_in_output = matches!(command, cli::Command::Config(_) | cli::Command::Doctor(_));
    logging::start(&loaded, !warnings_in_output);
    match command {
        cli::Command::Config(args) => commands::config::main(&args, &loaded),
        cli::Command::Simulate(args) => commands::simulate::main(&args),
        cli::Command::Run(args) => block_on(commands::run::main(&args, loaded)),
        cli::Command::Leases(args) => block_on(commands::leases::main(&args, loaded)),
        cli::Command::Doctor(args) => block_on(commands::doctor::main(&args, loaded)),
        cli::Command::Owners(args) => block_on(commands::owners::main(&args, loaded)),
    }
}

/// Run `fut` on a fresh multi-threaded tokio runtime.
fn block_on(fut: impl Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(fut),
        Err(e) => {
            eprintln!("drain: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

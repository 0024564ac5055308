//! `drain config`: the effective configuration, its sources and warnings, or the registry.

use std::process::ExitCode;

use clap::Args;

use crate::config::{self, Loaded};

/// `drain config` arguments.
#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// One JSON object instead of a table.
    #[arg(long, conflicts_with = "flags_markdown")]
    pub(crate) json: bool,
    /// Print the registry as Markdown (the source of docs/flags.md).
    #[arg(long)]
    pub(crate) flags_markdown: bool,
}

/// `drain config`.
pub(crate) fn main(args: &ConfigArgs, loaded: &Loaded) -> ExitCode {
    if args.flags_markdown {
        crate::out::out!("{}", config::flags_markdown());
    } else if args.json {
        let v = serde_json::json!({ "settings": loaded.effective, "warnings": loaded.warnings });
        crate::out::outln!("{v}");
    } else {
        crate::out::out!("{}", config::effective_table(&loaded.effective, &loaded.warnings));
    }
    ExitCode::SUCCESS
}

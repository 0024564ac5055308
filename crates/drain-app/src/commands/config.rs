use std::process::ExitCode;

use crate::cli::ConfigArgs;
use crate::config::{self, Loaded};

/// `drain config`.
pub(crate) fn main(args: &ConfigArgs, loaded: &Loaded) -> ExitCode {
    if args.flags_markdown {
        print!("{}", config::flags_markdown());
    } else if args.json {
        let v = serde_json::json!({ "settings": loaded.effective, "warnings": loaded.warnings });
        println!("{v}");
    } else {
        print!("{}", config::effective_table(&loaded.effective, &loaded.warnings));
    }
    ExitCode::SUCCESS
}

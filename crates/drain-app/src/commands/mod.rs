//! One module per subcommand.

pub(crate) mod config;
pub(crate) mod run;
pub(crate) mod simulate;

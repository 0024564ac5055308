//! One module per subcommand.

pub(crate) mod config;
pub(crate) mod doctor;
pub(crate) mod leases;
pub(crate) mod owners;
pub(crate) mod run;
pub(crate) mod simulate;

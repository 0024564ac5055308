//! Structured logs with tracing: `DRAIN_LOG` filter, `DRAIN_LOG_FORMAT=json` for JSON lines.

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Install the global subscriber. Returns a warning when the filter did not parse
/// (the default `info` is used then).
pub(crate) fn init(config: &Config) -> Option<String> {
    let (filter, warning) = match EnvFilter::try_new(&config.log_filter) {
        Ok(f) => (f, None),
        Err(e) => (
            EnvFilter::new("info"),
            Some(format!("DRAIN_LOG={:?}: not a tracing filter ({e}); using `info`", config.log_filter)),
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match config.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    warning
}

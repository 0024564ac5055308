//! Structured logs with tracing: `DRAIN_LOG` filter, `DRAIN_LOG_FORMAT=json` for JSON lines.

use tracing_subscriber::EnvFilter;

use crate::config::{Config, Loaded, LogFormat};

/// Install the global subscriber for any subcommand; a filter that did not parse is
/// reported on stderr, and with `log_warnings` every configuration warning is logged.
pub(crate) fn start(loaded: &Loaded, log_warnings: bool) {
    if let Some(w) = init(&loaded.config) {
        eprintln!("drain: {w}");
    }
    if log_warnings {
        for w in &loaded.warnings {
            tracing::warn!("config: {w}");
        }
    }
}

/// Install the global subscriber. Returns a warning when the filter did not parse
/// (the default `info` is used then).
fn init(config: &Config) -> Option<String> {
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

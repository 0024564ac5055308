#![doc = include_str!("../README.md")]
//!
//! ## The parts
//!
//! [`install`] serves `/metrics` (content type [`CONTENT_TYPE_TEXT`]) and installs
//! the keep-list recorder ([`KeepList`] over [`KEEP_LIST`]) globally;
//! [`MetricsObserver`] turns each drain-core [`Event`](drain_core::Event) into the
//! metric docs/metrics.md names, with `mode="shadow"` on decisions taken in shadow
//! mode; [`export_known`] exports every counter at 0 for the label sets ([`Known`])
//! a process can produce.
#![forbid(unsafe_code)]

mod keep;
mod known;
mod observer;
mod serve;

use std::net::SocketAddr;

pub use keep::{KEEP_LIST, KeepList};
pub use known::{Known, KnownTicks, export_known};
pub use observer::MetricsObserver;
pub use serve::CONTENT_TYPE_TEXT;

use metrics_exporter_prometheus::PrometheusBuilder;

/// Installing the exporter failed.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listener or recorder could not be built (e.g. the address is taken).
    #[error("cannot start the Prometheus endpoint on {addr}: {reason}")]
    Build {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// Another recorder is already installed in this process.
    #[error("a metrics recorder is already installed in this process")]
    AlreadyInstalled,
}

/// Histogram buckets for durations in seconds, from 0.5 ms to 5 minutes.
pub const DURATION_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// Serve `/metrics` on `addr` (content type [`CONTENT_TYPE_TEXT`]) and install the
/// keep-list recorder globally. Returns the address bound (port 0 picks a free one).
///
/// Must be called inside a tokio runtime (the listener is spawned on it).
///
/// # Errors
/// [`MetricsError::Build`] when the listener cannot bind; [`MetricsError::AlreadyInstalled`]
/// when a recorder is already installed.
pub fn install(addr: SocketAddr) -> Result<SocketAddr, MetricsError> {
    let build = |e: &dyn std::fmt::Display| MetricsError::Build { addr, reason: e.to_string() };
    let listener = std::net::TcpListener::bind(addr).map_err(|e| build(&e))?;
    let bound = listener.local_addr().map_err(|e| build(&e))?;
    listener.set_nonblocking(true).map_err(|e| build(&e))?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| build(&e))?;
    let recorder = PrometheusBuilder::new().set_buckets(DURATION_BUCKETS).map_err(|e| build(&e))?.build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(KeepList::new(recorder)).map_err(|_| MetricsError::AlreadyInstalled)?;
    tokio::spawn(serve::serve(listener, handle));
    observer::describe();
    Ok(bound)
}

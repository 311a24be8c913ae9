//! The one error type of the brisk-bench library.

use std::io;

use thiserror::Error;

/// Everything that can stop a benchmark run before it produces a report.
///
/// Per-request failures (refused connections, timeouts, bad statuses) are
/// not errors of this kind: they are counted in the report instead.
#[derive(Debug, Error)]
pub enum BenchError {
    /// The target URL could not be understood; the message is one sentence.
    #[error("{0}")]
    InvalidUrl(String),
    /// A command-line value (duration, address range, size) is not valid.
    #[error("{0}")]
    InvalidArgument(String),
    /// The host name of the target did not resolve to any address.
    #[error("could not resolve host {host}: {source}")]
    Resolve {
        /// The host that failed to resolve.
        host: String,
        /// The underlying resolver error.
        source: io::Error,
    },
    /// Building a runtime or spawning a worker thread failed.
    #[error("could not start the load generator: {0}")]
    Runtime(#[source] io::Error),
    /// A worker thread panicked.
    #[error("a load generator thread panicked")]
    WorkerPanicked,
}

impl BenchError {
    /// True when the error is the user's input (exit code 2), false when it
    /// is an environment failure (exit code 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BenchError::InvalidUrl(_) | BenchError::InvalidArgument(_)
        )
    }
}

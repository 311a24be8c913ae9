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
    /// The suite configuration is not valid; the message names the problem.
    #[error("{0}")]
    Config(String),
    /// A suite target could not be started or did not answer; one sentence
    /// naming the target.
    #[error("{0}")]
    TargetFailed(String),
    /// Reading or writing a file of the suite failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the path.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl BenchError {
    /// True when the error is the user's input (exit code 2), false when it
    /// is an environment failure (exit code 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BenchError::InvalidUrl(_) | BenchError::InvalidArgument(_) | BenchError::Config(_)
        )
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }
}

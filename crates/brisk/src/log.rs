//! Logging with `tracing`: to stdout in the foreground; a daemon's stdout is its log file.
//!
//! The level comes from `BRISK_LOG` (same syntax as `RUST_LOG`), default `info`. Worker lines
//! carry the worker id and server as span fields; connection events carry `conn`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber once; later calls do nothing.
pub(crate) fn init() {
    let filter = EnvFilter::try_from_env("BRISK_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .with_target(false)
        .with_writer(std::io::stdout)
        .try_init();
}

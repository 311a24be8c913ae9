//! Logging with `tracing`: to stdout in the foreground; a daemon's stdout is its log file.
//!
//! The level comes from `BRISK_LOG` (same syntax as `RUST_LOG`), default `info`. Worker lines
//! carry the worker id and server as span fields; connection events carry `conn`. Records of
//! the `log` crate (rustls writes through it) reach the same subscriber.
//!
//! The subscriber is the application's choice: Brisk installs this one only when the program
//! has not installed a global one of its own (and not at all with `App::logging(false)`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs Brisk's subscriber, and the `log` bridge, unless a global subscriber is already
/// set; later calls do nothing.
pub(crate) fn init() {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let filter = EnvFilter::try_from_env("BRISK_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // With the `tracing-log` feature, `try_init` also routes `log` records here.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .with_target(false)
        .with_writer(std::io::stdout)
        .try_init();
}

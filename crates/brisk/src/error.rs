//! The one error type of the `brisk` crate.
//!
//! Every message is a plain sentence a user can act on: the CLI prints it as is.

use std::io;

/// Everything that can go wrong while configuring, starting or controlling a Brisk app.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An address string that is not `scheme://host:port` (or `unix://path`).
    #[error("cannot parse address \"{address}\": {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A listener could not be opened.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address as given.
        address: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// A configuration value that makes no sense.
    #[error("{0}")]
    Config(String),
    /// `start` while the app already runs.
    #[error("{name} is already running ({}); stop it first", master_pid(*.pid))]
    AlreadyRunning {
        /// The app name.
        name: String,
        /// The running master's pid (0 while that master is starting and has not written it).
        pid: i32,
    },
    /// A control command while nothing runs.
    #[error("{name} is not running (no live master for pid file {pid_file})")]
    NotRunning {
        /// The app name.
        name: String,
        /// Where the pid file was looked for.
        pid_file: String,
    },
    /// The run directory (pid file, control socket, log) cannot be used.
    #[error("cannot use run directory {path}: {reason}")]
    RunDir {
        /// The directory.
        path: String,
        /// Why not.
        reason: String,
    },
    /// A start-up hook (`App::before_start`, `App::migrate`) failed: the app did not start.
    #[error("the app did not start: {0}")]
    Startup(String),
    /// Talking to the master or a worker failed.
    #[error("control channel: {0}")]
    Control(String),
    /// Any other I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What Brisk was doing.
        context: String,
        /// The operating system's error.
        source: io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with a short description of what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error and its sources, joined by `: ` (a source whose text the error already holds is not
/// repeated): what the HTTP client and the mailer report, as their libraries' own text leaves
/// out the cause.
#[cfg_attr(not(any(feature = "client", feature = "mail")), allow(dead_code))]
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// How [`Error::AlreadyRunning`] names the running master.
fn master_pid(pid: i32) -> String {
    if pid > 0 {
        format!("pid {pid}")
    } else {
        "its master is starting".into()
    }
}

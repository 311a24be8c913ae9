//! Why the supervisor could not do what it was asked: a worker that did not become ready, a
//! start, a reload or an upgrade that stopped. Each says, in its message, what the operator
//! reads on the control socket and in the log.

use std::io;

use crate::master::upgrade::UpgradeError;

/// Why a worker did not become ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotReady {
    /// It said why (its own words, sent over its control channel).
    #[error("{0}")]
    Failed(String),
    /// It exited first.
    #[error("worker pid {0} exited before it was ready")]
    Exited(i32),
    /// It was still starting after the ready timeout.
    #[error("worker pid {pid} was not ready after {secs} s")]
    TimedOut {
        /// Its pid.
        pid: i32,
        /// The timeout, in seconds.
        secs: u64,
    },
}

/// Why the master's first workers did not all start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// A worker process could not be started.
    #[error("cannot start a worker: {0}")]
    Spawn(#[source] io::Error),
    /// One started but did not become ready.
    #[error(transparent)]
    NotReady(#[from] NotReady),
}

/// Why a reload stopped before every worker was replaced (those not replaced serve on).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReloadError {
    /// Another reload is running.
    #[error("a reload is already running")]
    AlreadyRunning,
    /// The master began to stop.
    #[error("the master is stopping")]
    Stopping,
    /// A new worker process could not be started.
    #[error("cannot start a new {worker}: {error}")]
    Spawn {
        /// Which worker (`worker 0 of http`).
        worker: String,
        /// The error.
        #[source]
        error: io::Error,
    },
    /// A new worker did not become ready.
    #[error("new {worker} failed: {why}; old workers kept")]
    NotReady {
        /// Which worker.
        worker: String,
        /// Why.
        #[source]
        why: NotReady,
    },
    /// The master stopped before it answered.
    #[error("the master stopped during the reload")]
    MasterGone,
}

/// Why an upgrade did not happen; the running master goes on serving.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeRefused {
    /// A reload is running.
    #[error("a reload is under way: upgrade once it ends")]
    ReloadUnderWay,
    /// This master was replaced a moment ago.
    #[error(
        "an upgrade has just replaced this master with pid {0}: run upgrade again for a \
         newer build"
    )]
    JustUpgraded(u32),
    /// The master stopped before it answered.
    #[error("the master stopped before the upgrade")]
    MasterGone,
    /// It was tried and failed.
    #[error("{0}; the running master goes on serving")]
    Failed(#[source] UpgradeError),
}

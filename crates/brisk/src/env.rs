//! The environment variables through which a master tells the processes it starts who they
//! are: the same binary runs as CLI, master, background master and worker.

/// Names the worker to run: `SERVICE:INDEX`.
pub(crate) const ENV_WORKER: &str = "BRISK_WORKER";
/// The descriptor of the worker's end of the control socketpair.
pub(crate) const ENV_IPC_FD: &str = "BRISK_IPC_FD";
/// The descriptor of the listener the master bound, if it did.
pub(crate) const ENV_LISTEN_FD: &str = "BRISK_LISTEN_FD";
/// The cluster's Redis URL, in a worker's environment when the app spans machines
/// (`App::cluster`): the worker then tells the master which broadcast groups it holds members
/// of, and keeps its counts for presence.
pub(crate) const ENV_CLUSTER: &str = "BRISK_CLUSTER";
/// [`ENV_CLUSTER`]'s value when the app spans machines through a Redis Cluster's sharded
/// pub/sub (`App::cluster_sharded`), which presence cannot use.
pub(crate) const SHARDED: &str = "sharded";
/// Set in the environment of a background master started by `start -d`.
pub(crate) const ENV_DAEMON: &str = "BRISK_DAEMON";
/// Set in the environment of the process the master starts to run the app's start-up hooks
/// (`App::before_start`, `App::migrate`) before any worker.
pub(crate) const ENV_STARTUP: &str = "BRISK_STARTUP";

/// This process's worker spec (`SERVICE:INDEX`), if the master started it as a worker.
pub(crate) fn worker_spec() -> Option<String> {
    std::env::var_os(ENV_WORKER).map(|v| v.to_string_lossy().into_owned())
}

/// The descriptor number in variable `name`, if set.
pub(crate) fn fd(name: &str) -> Option<i32> {
    std::env::var(name).ok()?.parse().ok()
}

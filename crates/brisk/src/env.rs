//! The environment variables through which a master tells the processes it starts who they
//! are: the same binary runs as CLI, master, background master and worker.

/// Names the worker to run: `SERVICE:INDEX`.
pub(crate) const ENV_WORKER: &str = "BRISK_WORKER";
/// The descriptor of the worker's end of the control socketpair.
pub(crate) const ENV_IPC_FD: &str = "BRISK_IPC_FD";
/// The version of the master-worker messages the master speaks
/// ([`IPC_VERSION`](crate::ipc::IPC_VERSION)).
pub(crate) const ENV_IPC_VERSION: &str = "BRISK_IPC_VERSION";
/// The descriptor of the listener the master bound, if it did.
pub(crate) const ENV_LISTEN_FD: &str = "BRISK_LISTEN_FD";
/// The descriptor of the worker's end of its handover socket (`SOCK_SEQPACKET`): WebSocket
/// connections that survive a reload go out and come in on it.
pub(crate) const ENV_HANDOVER_FD: &str = "BRISK_HANDOVER_FD";
/// The number the handover socket gets in a worker (3: control, 4: listener, 5: secrets).
pub(crate) const HANDOVER_FD: i32 = 6;
/// Set in the environment of a background master started by `start -d`.
pub(crate) const ENV_DAEMON: &str = "BRISK_DAEMON";
/// The descriptor of the socket an old master hands its sockets over on, in the environment
/// of the new master it starts for `upgrade`.
pub(crate) const ENV_UPGRADE_FD: &str = "BRISK_UPGRADE_FD";
/// Set in the environment of the process the master starts to run the app's start-up hooks
/// (`App::before_start`, `App::migrate`) before any worker.
pub(crate) const ENV_STARTUP: &str = "BRISK_STARTUP";

/// The pid of the `dev` loop that started this master (or the master it replaced): the master
/// stops when that process is gone, so an app whose loop was killed does not run on alone.
pub(crate) const ENV_DEV_LOOP_PID: &str = "BRISK_DEV_LOOP_PID";

/// Whether an old master started this process to take over from it (`upgrade`): whatever
/// command its arguments name (`restart`, `dev`), it runs as `start`.
pub(crate) fn is_upgrading() -> bool {
    std::env::var_os(ENV_UPGRADE_FD).is_some()
}

/// This process's worker spec (`SERVICE:INDEX`), if the master started it as a worker.
pub(crate) fn worker_spec() -> Option<String> {
    std::env::var_os(ENV_WORKER).map(|v| v.to_string_lossy().into_owned())
}

/// The descriptor number in variable `name`, if set.
pub(crate) fn fd(name: &str) -> Option<i32> {
    std::env::var(name).ok()?.parse().ok()
}

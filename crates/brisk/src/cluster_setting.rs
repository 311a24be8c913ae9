//! What a worker knows of the cluster bus (`App::cluster`, `App::cluster_sharded`): whether
//! the app spans machines, and which Redis server presence counts go to.
//!
//! Each worker builds the same `App` as its master, so it takes this from its own app rather
//! than from the master: a Redis URL, password and all, is never put into a worker's
//! environment.

use std::sync::OnceLock;

/// How the app spans machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClusterSetting {
    /// Through one Redis server (or a primary), at `url`; `rediss://` trusting the CAs of
    /// `tls_ca` when given.
    Single {
        url: String,
        tls_ca: Option<std::path::PathBuf>,
    },
    /// Through a Redis Cluster's sharded pub/sub, which presence cannot use.
    Sharded,
}

static SETTING: OnceLock<Option<ClusterSetting>> = OnceLock::new();

/// Records this worker's setting; the first call wins (one app per process).
pub(crate) fn set(setting: Option<ClusterSetting>) {
    let _ = SETTING.set(setting);
}

/// This process's setting; `None` when the app does not span machines (or in a process that
/// is not a worker).
pub(crate) fn get() -> Option<&'static ClusterSetting> {
    SETTING.get().and_then(Option::as_ref)
}

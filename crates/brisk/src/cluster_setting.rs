//! How an app spans machines: [`ClusterConfig`], what `App::cluster`, `App::cluster_sharded`,
//! `App::cluster_secret` and `App::cluster_tls_ca` set, one value from the app to its master
//! (which holds the bus); and [`ClusterSetting`], what a worker knows of it: whether the app
//! spans machines, and which Redis server presence counts go to.
//!
//! Each worker builds the same `App` as its master, so it takes this from its own app rather
//! than from the master: a Redis URL, password and all, is never put into a worker's
//! environment.

use std::path::PathBuf;
use std::sync::OnceLock;

/// How an app spans machines, as the app says it.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterConfig {
    /// The Redis server of the cluster bus (or, `sharded`, the Redis Cluster's nodes,
    /// separated by commas); `None`: the app runs on one machine.
    pub url: Option<String>,
    /// The bus uses a Redis Cluster's sharded pub/sub.
    pub sharded: bool,
    /// The secret that authenticates the bus's messages.
    pub secret: Option<Vec<u8>>,
    /// The CAs (a PEM file) the bus trusts for `rediss://`, when not the system's.
    pub tls_ca: Option<PathBuf>,
}

impl ClusterConfig {
    /// What a worker of this app knows of it.
    pub(crate) fn worker_setting(&self) -> Option<ClusterSetting> {
        let url = self.url.clone()?;
        Some(match self.sharded {
            true => ClusterSetting::Sharded,
            false => ClusterSetting::Single {
                url,
                tls_ca: self.tls_ca.clone(),
            },
        })
    }
}

/// How the app spans machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClusterSetting {
    /// Through one Redis server (or a primary), at `url`; `rediss://` trusting the CAs of
    /// `tls_ca` when given.
    Single {
        url: String,
        tls_ca: Option<PathBuf>,
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

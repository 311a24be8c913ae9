//! The chat's settings, loaded once by the master with `brisk::config` (defaults, then
//! `team-chat.toml` if it exists, then `CHAT_*` variables, then flags) and handed to every
//! worker as they were. The session secret never reaches a worker's argv or environment.

use std::path::PathBuf;

use brisk::config::Invalid;
use serde::{Deserialize, Serialize};

/// The shortest session secret, in bytes ([`brisk::http::session::MIN_SECRET_LEN`]).
const MIN_SECRET: usize = brisk::http::session::MIN_SECRET_LEN;

/// Everything the chat can be told; every key has a default but `session_secret`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Settings {
    /// Where the chat listens (`http://HOST:PORT`).
    pub(crate) listen: String,
    /// HTTP worker processes.
    pub(crate) workers: usize,
    /// `sqlite:PATH` (the default, a file in the run directory) or `postgres://…`.
    pub(crate) database_url: String,
    /// Redis, for the mention job's queue and for live messages across machines. Without
    /// it, mentions are not looked for.
    pub(crate) redis_url: Option<String>,
    /// Signs the session cookies: at least 32 bytes, the same on every machine.
    pub(crate) session_secret: String,
    /// Authenticates the messages between machines on Redis: at least 16 bytes, the same on
    /// every machine; needed with `redis_url`.
    pub(crate) cluster_secret: String,
    /// Where `/metrics`, `/healthz` and `/readyz` listen (`127.0.0.1:9070`), if anywhere.
    pub(crate) metrics_listen: Option<String>,
    /// The pid file, control socket and logs.
    pub(crate) run_dir: PathBuf,
    /// The longest message, in bytes.
    pub(crate) max_message_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: "http://127.0.0.1:8070".into(),
            workers: 2,
            database_url: "sqlite:run/team-chat.sqlite".into(),
            redis_url: None,
            session_secret: String::new(),
            cluster_secret: String::new(),
            metrics_listen: None,
            run_dir: "run".into(),
            max_message_bytes: 4000,
        }
    }
}

impl Settings {
    /// What `start` refuses: a secret too short to sign with, a database of no known kind.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        if self.session_secret.len() < MIN_SECRET {
            return Err(Invalid::new(
                "session_secret",
                format!(
                    "{} bytes; it needs at least {MIN_SECRET} (set CHAT_SESSION_SECRET)",
                    self.session_secret.len()
                ),
            ));
        }
        let known = ["sqlite:", "postgres://", "postgresql://"];
        if !known.iter().any(|p| self.database_url.starts_with(p)) {
            return Err(Invalid::new(
                "database_url",
                "neither sqlite:PATH nor postgres://…",
            ));
        }
        if self.redis_url.is_some() && self.cluster_secret.len() < 16 {
            return Err(Invalid::new(
                "cluster_secret",
                format!(
                    "{} bytes; with redis_url it needs at least 16 (set CHAT_CLUSTER_SECRET)",
                    self.cluster_secret.len()
                ),
            ));
        }
        if self.workers == 0 {
            return Err(Invalid::new("workers", "at least 1"));
        }
        if self.max_message_bytes == 0 {
            return Err(Invalid::new("max_message_bytes", "at least 1"));
        }
        Ok(())
    }
}

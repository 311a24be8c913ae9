//! App settings: a typed struct loaded from defaults, a file, the environment and flags,
//! once, by the master, and handed to every process it starts as they were (feature `config`,
//! on figment).
//!
//! The same program runs as master, as each worker and as each CLI command, and builds its
//! [`App`](crate::App) from its settings in each. [`Config::load`] therefore behaves by role:
//!
//! - **In the master** (and a CLI command): it merges, lowest first, `T::default()`, the TOML
//!   file if it exists, the environment variables with the prefix (`CHAT_DATABASE_URL` sets
//!   `database_url`; `__` separates nested keys: `CHAT_DB__POOL=8` sets `db.pool`), and the
//!   values [`set`](Config::set) from the app's own flags. The result is what every process
//!   gets: the variables it read leave the environment of the processes the master starts, and
//!   the settings reach them through a private descriptor (as [`secret_env`](crate::secret_env)
//!   values do), not argv or the environment.
//! - **In a worker** (or another process the master started): it returns the master's
//!   settings, never reading the file or the environment again, so every worker runs with
//!   the same ones even if the file changed since (`reload` re-reads nothing either: restart
//!   the app to apply new settings). A process that cannot read them (a new binary whose
//!   settings type changed, under the old master) exits with status 78 rather than run on
//!   defaults.
//! - **When the settings are wrong** (a value of the wrong type, a key the struct does not
//!   have, a file that is not TOML), it returns `T::default()` and keeps the error: `start`
//!   (and `restart`) then fail with the key and the reason, while `status`, `stop`, `reload`
//!   and the other commands, which need no settings, still work.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Default, Serialize, Deserialize)]
//! #[serde(default, deny_unknown_fields)]
//! struct Settings {
//!     listen: String,
//!     workers: usize,
//!     database_url: String,
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     let settings: Settings = brisk::config::Config::new()
//!         .file("chat.toml")
//!         .env_prefix("CHAT_")
//!         .load();
//!     let server = brisk::Server::new(&settings.listen).unwrap().workers(settings.workers);
//!     brisk::App::new("chat").server(server).run()
//! }
//! ```

use std::path::PathBuf;
use std::sync::Mutex;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Where a master keeps the settings for the processes it starts.
const PASSED_AS: &str = "brisk.config";

/// Why the settings could not be loaded, kept for `start` to fail with.
static PROBLEM: Mutex<Option<String>> = Mutex::new(None);

/// Where an app's settings come from (see the module docs).
#[derive(Debug, Default)]
pub struct Config {
    file: Option<PathBuf>,
    env_prefix: Option<String>,
    set: Vec<(String, serde_json::Value)>,
}

/// A setting that has the right type but a wrong value, found by the app's own check
/// ([`Config::load_checked`]): which key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The key, as it is written in the file (`database_url`, `db.pool`).
    pub key: String,
    /// What is wrong with its value, and what would be right.
    pub reason: String,
}

impl Invalid {
    /// `key`'s value is wrong because of `reason`.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

impl Config {
    /// Settings from `T::default()` only, until sources are added.
    pub fn new() -> Self {
        Config::default()
    }

    /// A TOML file of settings (skipped if it does not exist).
    pub fn file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Environment variables that start with `prefix` (`CHAT_`): the rest of the name, in
    /// lower case, is the key (`__` between nested keys). Values are read as TOML values
    /// would be (`8` a number, `true` a boolean), else as text.
    pub fn env_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.env_prefix = Some(prefix.into());
        self
    }

    /// Sets `key` (dotted for nested keys: `db.pool`) to `value`, over the file and the
    /// environment: for the app's own command-line flags. A value that cannot be represented
    /// (a map with non-text keys) fails `start` like any wrong setting.
    pub fn set(mut self, key: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.set.push((key.to_string(), value));
        self
    }

    /// The settings: the master's in a process it started, else merged from the sources (see
    /// the module docs); `T::default()` when they are wrong, with the error kept for `start`.
    pub fn load<T: Serialize + DeserializeOwned + Default>(self) -> T {
        self.load_checked(|_: &T| Ok(()))
    }

    /// As [`load`](Self::load), with the app's own `check` of the values (a secret long
    /// enough, a URL of a known scheme): in the master, an [`Invalid`] it returns fails
    /// `start` with its key and reason, as a value of the wrong type does, while the other
    /// commands still work. A process the master started gets settings already checked.
    ///
    /// ```no_run
    /// use brisk::config::{Config, Invalid};
    /// # #[derive(Default, serde::Serialize, serde::Deserialize)]
    /// # struct Settings { session_secret: String }
    /// let settings: Settings = Config::new().env_prefix("CHAT_").load_checked(|s: &Settings| {
    ///     if s.session_secret.len() < 32 {
    ///         return Err(Invalid::new("session_secret", "at least 32 bytes (CHAT_SESSION_SECRET)"));
    ///     }
    ///     Ok(())
    /// });
    /// ```
    pub fn load_checked<T, F>(self, check: F) -> T
    where
        T: Serialize + DeserializeOwned + Default,
        F: FnOnce(&T) -> Result<(), Invalid>,
    {
        if let Some(passed) = crate::secret_env::passed_value(PASSED_AS) {
            let loaded = passed
                .ok_or_else(|| "the master passed no settings".to_string())
                .and_then(|json| serde_json::from_str(&json).map_err(|e| e.to_string()));
            // Running on defaults (an empty secret, another database) would be worse than not
            // running: the process exits, the master restarts it and the log says why (a
            // binary whose settings type changed under a running master: restart the app).
            return loaded.unwrap_or_else(|e| {
                let why = format!(
                    "settings: the master passed settings this process cannot read ({e}); exiting"
                );
                tracing::error!("{why}");
                eprintln!("{why}");
                std::process::exit(78)
            });
        }
        match self.merge::<T>() {
            Ok(settings) => {
                if let Err(Invalid { key, reason }) = check(&settings) {
                    keep_problem(format!("{key}: {reason}"));
                }
                match serde_json::to_string(&settings) {
                    Ok(json) => crate::secret_env::keep(PASSED_AS, json),
                    Err(e) => keep_problem(format!("settings cannot be passed on: {e}")),
                }
                settings
            }
            Err(why) => {
                keep_problem(why.to_string());
                T::default()
            }
        }
    }

    /// The sources merged and checked against `T`.
    fn merge<T: Serialize + DeserializeOwned + Default>(&self) -> Result<T, Unmerged> {
        let mut figment = Figment::from(Serialized::defaults(T::default()));
        if let Some(path) = &self.file {
            if path.exists() {
                figment = figment.merge(Toml::file(path));
            }
        }
        if let Some(prefix) = &self.env_prefix {
            // Read here, kept from the processes the master starts (they get the result).
            for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with(prefix.as_str())) {
                let _ = crate::secret_env(&name);
            }
            figment = figment.merge(Env::prefixed(prefix).split("__"));
        }
        for (key, value) in &self.set {
            figment = figment.merge(Serialized::default(key, value));
        }
        figment.extract::<T>().map_err(|e| Unmerged(Box::new(e)))
    }
}

/// Why the sources do not make the settings: every error figment found, joined by `; `.
#[derive(Debug)]
struct Unmerged(Box<figment::Error>);

impl std::fmt::Display for Unmerged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.0.clone().into_iter().map(|e| e.to_string()).collect();
        f.write_str(&all.join("; "))
    }
}

fn keep_problem(why: String) {
    *PROBLEM.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("settings: {why}"));
}

/// Why the app's settings could not be loaded, if they could not.
pub(crate) fn problem() -> Option<String> {
    PROBLEM.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Settings {
        name: String,
        workers: usize,
        db: Db,
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Db {
        pool: u32,
    }

    #[test]
    fn sources_merge_in_order_and_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("app.toml");
        std::fs::write(&file, "name = \"from file\"\nworkers = 2\n[db]\npool = 4\n").unwrap();
        // SAFETY (set_var): this test alone uses these variables.
        std::env::set_var("BRISKCFGTEST_DB__POOL", "8");
        let merged: Settings = Config::new()
            .file(&file)
            .env_prefix("BRISKCFGTEST_")
            .set("workers", 3)
            .merge()
            .unwrap();
        assert_eq!(
            merged,
            Settings {
                name: "from file".into(),
                workers: 3,
                db: Db { pool: 8 }
            }
        );
        std::fs::write(&file, "workers = \"many\"\n").unwrap();
        let err = Config::new()
            .file(&file)
            .merge::<Settings>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("workers"), "{err}");
        assert!(err.contains("many"), "{err}");
        std::fs::write(&file, "wrokers = 2\n").unwrap();
        let err = Config::new()
            .file(&file)
            .merge::<Settings>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("wrokers"), "{err}");
        std::env::remove_var("BRISKCFGTEST_DB__POOL");
    }
}

//! [`RunPaths`]: where a running app keeps its pid file, control socket and daemon log. The
//! CLI, the master and the daemon starter all find each other through it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The run directory of an app called `name`, and the files in it.
#[derive(Debug, Clone)]
pub(crate) struct RunPaths {
    pub name: String,
    pub run_dir: PathBuf,
}

impl RunPaths {
    /// The pid file: `RUN_DIR/NAME.pid`.
    pub(crate) fn pid_file(&self) -> PathBuf {
        self.run_dir.join(format!("{}.pid", self.name))
    }

    /// The control socket the CLI talks to: `RUN_DIR/NAME.sock`.
    pub(crate) fn control_socket(&self) -> PathBuf {
        self.run_dir.join(format!("{}.sock", self.name))
    }

    /// The daemon's log file: `RUN_DIR/NAME.log`.
    pub(crate) fn log_file(&self) -> PathBuf {
        self.run_dir.join(format!("{}.log", self.name))
    }

    /// Creates the run directory if needed; its parent must exist.
    pub(crate) fn prepare(&self) -> Result<()> {
        let dir = &self.run_dir;
        let fail = |reason: String| Error::RunDir {
            path: dir.display().to_string(),
            reason,
        };
        if dir.is_dir() {
            return Ok(());
        }
        if dir.exists() {
            return Err(fail("it exists and is not a directory".into()));
        }
        let parent = dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(fail(format!(
                "its parent directory {} does not exist",
                parent.display()
            )));
        }
        std::fs::create_dir(dir).map_err(|e| fail(e.to_string()))
    }
}

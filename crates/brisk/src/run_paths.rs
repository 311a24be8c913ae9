//! [`RunPaths`]: where a running app keeps its pid file, control socket and daemon log. The
//! CLI, the master and the daemon starter all find each other through it.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
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

    /// Creates the run directory if needed (mode 0700; its parent must exist), or checks the
    /// one there: it must belong to this user and be writable by no one else, since whoever
    /// can write to it can swap the pid file or the control socket for their own.
    pub(crate) fn prepare(&self) -> Result<()> {
        let dir = &self.run_dir;
        let fail = |reason: String| Error::RunDir {
            path: dir.display().to_string(),
            reason,
        };
        if dir.is_dir() {
            return check_owner_and_mode(dir).map_err(|why| fail(why.to_string()));
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
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail(e.to_string()))
    }
}

/// Why a run directory is not safe to keep the pid file and control socket in.
#[derive(Debug, thiserror::Error)]
enum UnsafeDir {
    /// It cannot be looked at.
    #[error("{0}")]
    Unreadable(#[from] std::io::Error),
    /// Another user owns it.
    #[error("it belongs to uid {owner}, not to this user (uid {me}); use a directory of your own")]
    NotOurs { owner: u32, me: u32 },
    /// Others may write to it.
    #[error("others can write to it (mode {0:o}); make it private (chmod 700) or use another")]
    Writable(u32),
}

/// Why `dir` is not safe to keep the pid file and control socket in, if it is not.
fn check_owner_and_mode(dir: &Path) -> std::result::Result<(), UnsafeDir> {
    let meta = std::fs::metadata(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(UnsafeDir::NotOurs {
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(UnsafeDir::Writable(mode));
    }
    Ok(())
}

//! The pid file: who the running master is, and whether it is still alive.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Whether `pid` is a live process (a zombie counts as dead).
pub(crate) fn alive(pid: i32) -> bool {
    // Signal 0 only checks that the process exists (EPERM: it does, and is not ours).
    let exists = matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Ok(()) | Err(nix::errno::Errno::EPERM)
    );
    if !exists {
        return false;
    }
    // "pid (comm) S ..." — the state follows the last ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// The pid in `path`, if the file exists and that process is alive and runs this program.
/// After a crash the file stays behind, and its pid may since belong to anything else: that
/// neither blocks a start nor gets a `stop`'s signal.
pub(crate) fn running_pid(path: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    // (A master started from another release than this CLI's, behind a switched symbolic
    // link, holds the file's lock.)
    (alive(pid) && (runs_this_program(pid) || locked(path))).then_some(pid)
}

/// Whether a process holds the lock on the pid file at `path`, as a running master does.
fn locked(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    // SAFETY: flock on a descriptor this function owns; a shared lock it gets is released
    // as the file closes.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        return false;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// Whether process `pid` runs the same executable as this process (compared by path; a
/// binary replaced on disk since either started still counts as the same).
fn runs_this_program(pid: i32) -> bool {
    let exe = |p: &str| {
        std::fs::read_link(format!("/proc/{p}/exe")).map(|path| {
            let path = path.to_string_lossy().into_owned();
            path.strip_suffix(" (deleted)")
                .map(str::to_owned)
                .unwrap_or(path)
        })
    };
    match (exe("self"), exe(&pid.to_string())) {
        (Ok(ours), Ok(theirs)) => ours == theirs,
        // Not ours to inspect (another user's process): assume it may be the app.
        _ => true,
    }
}

/// The pid file, open and locked (`flock`) for as long as the master runs: a second master
/// cannot take the lock, however close together the two start. Dropping it removes the file
/// (if it still names us) and releases the lock.
pub(crate) struct PidLock {
    file: File,
    path: PathBuf,
    /// Whether dropping it removes the file: not once another master (the one an `upgrade`
    /// started, or the one it replaces) holds the same lock.
    remove_on_drop: bool,
}

/// Why [`PidLock::acquire`] failed.
pub(crate) enum LockError {
    /// Another process holds the lock; the pid its file names, if it names one yet.
    Held(Option<i32>),
    /// The file cannot be opened or locked; the reason.
    Unusable(String),
}

impl PidLock {
    /// Opens (creating, never following a symbolic link) and locks the pid file at `path`.
    /// The file stays empty until [`write_pid`](Self::write_pid).
    pub(crate) fn acquire(path: &Path) -> Result<PidLock, LockError> {
        let unusable = |e: io::Error| {
            LockError::Unusable(if e.raw_os_error() == Some(libc::ELOOP) {
                "it is a symbolic link, which a pid file must not be".into()
            } else {
                e.to_string()
            })
        };
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
                .map_err(unusable)?;
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                    let pid = std::fs::read_to_string(path)
                        .ok()
                        .and_then(|s| s.trim().parse().ok());
                    return Err(LockError::Held(pid));
                }
                return Err(unusable(e));
            }
            // A master that stopped meanwhile removed the file we opened: lock the new one.
            let same = match (file.metadata(), std::fs::symlink_metadata(path)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
            if same {
                return Ok(PidLock {
                    file,
                    path: path.to_path_buf(),
                    remove_on_drop: true,
                });
            }
        }
    }

    /// The pid file an old master handed over for `upgrade`, open and locked: the lock
    /// belongs to the open file, which both masters now share. Dropped, it leaves the file
    /// (the old master's still) until [`own_file`](Self::own_file).
    pub(crate) fn adopt(file: File, path: &Path) -> PidLock {
        PidLock {
            file,
            path: path.to_path_buf(),
            remove_on_drop: false,
        }
    }

    /// Removes the file when dropped: this master has taken over.
    pub(crate) fn own_file(&mut self) {
        self.remove_on_drop = true;
    }

    /// Another handle on the same open (and locked) file.
    pub(crate) fn share(&self) -> io::Result<File> {
        self.file.try_clone()
    }

    /// Writes our pid into the locked file.
    pub(crate) fn write_pid(&mut self) -> io::Result<()> {
        write_pid(&self.file)
    }

    /// Leaves the file in place when dropped: another master holds the lock too.
    pub(crate) fn keep_file(&mut self) {
        self.remove_on_drop = false;
    }
}

/// Writes this process's pid into `file` (a locked pid file, or a handle on one) in one
/// write, never truncating it first: a CLI reading the file as an upgrade's new master
/// takes over finds the old pid or the new one, never an empty file. A pid shorter than
/// what the file holds is padded with spaces (which readers trim).
pub(crate) fn write_pid(mut file: &File) -> io::Result<()> {
    let held = file.metadata()?.len() as usize;
    let pid = std::process::id().to_string();
    let text = format!("{pid:<width$}\n", width = held.saturating_sub(1));
    file.seek(io::SeekFrom::Start(0))?;
    file.write_all(text.as_bytes())?;
    file.set_len(text.len() as u64)
}

impl Drop for PidLock {
    fn drop(&mut self) {
        // While the lock is held, the file is ours whatever it says.
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_written_over_a_longer_one_reads_as_ours() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.pid");
        std::fs::write(&path, "123456789012\n").unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        write_pid(&file).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim().parse::<u32>().unwrap(), std::process::id());
        assert!(text.ends_with('\n'));
        // Over a shorter one (or none), no padding.
        std::fs::write(&path, "").unwrap();
        write_pid(&file).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
    }
}

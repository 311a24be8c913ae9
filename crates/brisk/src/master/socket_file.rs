//! The file of a Unix-socket listener the master bound, removed once, and only while it is
//! still that socket's.

use std::cell::Cell;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A Unix listener's path, and which file it was just after the master bound it.
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    /// (device, inode) of the file the bind made; `None` if it could not be read.
    id: Option<(u64, u64)>,
    /// Whether [`SocketFile::remove_if_ours`] ran: after it, the inode may be reused by
    /// another server's socket at the same path, so it must not look again.
    done: Cell<bool>,
}

impl SocketFile {
    /// Notes which file `path` is now: call it just after binding the socket there.
    pub(crate) fn bound(path: PathBuf) -> Self {
        let id = file_id(&path);
        SocketFile {
            path,
            id,
            done: Cell::new(false),
        }
    }

    /// Removes the file, the first time only, if it is still the one bound (or could not be
    /// told apart): from then on a client's `connect` fails at once, so nothing new is
    /// queued on the socket, which keeps serving what was. Leaves alone a file a later
    /// server bound at the same path.
    pub(crate) fn remove_if_ours(&self) {
        if self.done.replace(true) {
            return;
        }
        if self.id.is_none() || file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::{UnixListener, UnixStream};

    use super::SocketFile;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("brisk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn removes_its_own_file_once() {
        let dir = temp_dir("socket-file-own");
        let path = dir.join("s.sock");
        let ours = UnixListener::bind(&path).unwrap();
        let file = SocketFile::bound(path.clone());
        file.remove_if_ours();
        assert!(!path.exists(), "our own file was not removed");
        assert!(UnixStream::connect(&path).is_err());
        // A later server binds the path again (its inode may even be ours, reused): a second
        // call leaves it.
        let later = UnixListener::bind(&path).unwrap();
        file.remove_if_ours();
        assert!(path.exists(), "a later server's file was removed");
        drop((ours, later));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn leaves_a_file_another_server_bound_after_ours_was_replaced() {
        let dir = temp_dir("socket-file-other");
        let path = dir.join("s.sock");
        let ours = UnixListener::bind(&path).unwrap();
        let file = SocketFile::bound(path.clone());
        // Someone removes our file and binds the path (a later server after a crash). Our
        // socket still holds its inode, so the new file has another.
        std::fs::remove_file(&path).unwrap();
        let later = UnixListener::bind(&path).unwrap();
        file.remove_if_ours();
        assert!(path.exists(), "a later server's file was removed");
        drop((ours, later));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Whether the program file an `upgrade` would start can be trusted: only root or the
//! master's own user may be able to change what runs as the new master.
//!
//! An `upgrade` runs whatever is at the program's path then. If someone else can write that
//! file, or any directory on the way to it (the path as given, a `current` link included,
//! and the file it resolves to), they choose the code the next master runs, with every
//! socket, secret and privilege of this one. So each of them must be owned by root or the
//! master's effective user, and writable by neither others (a directory with the sticky bit,
//! as `/tmp`, aside: there only an entry's owner may replace it) nor a group other than the
//! master's own.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Write for others, write for the group, the sticky bit.
const OTHERS_WRITE: u32 = 0o002;
const GROUP_WRITE: u32 = 0o020;
const STICKY: u32 = 0o1000;

/// Why a program file is not trusted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Untrusted {
    /// A path on the way cannot be looked at.
    #[error("{}: {error}", path.display())]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// Someone else could change it.
    #[error(
        "{} is not safe to start as the new master: {who} (mode {mode:o}); only root or uid \
         {euid} may be able to change the program or a directory on its way",
        path.display()
    )]
    Changeable {
        /// The file or directory.
        path: PathBuf,
        /// Who could change it.
        who: String,
        /// Its permission bits.
        mode: u32,
        /// This process's effective user.
        euid: u32,
    },
}

/// `Ok` when only root or this process's user can change `exe` or a directory on its way,
/// else what and who could.
pub(crate) fn check(exe: &Path) -> Result<(), Untrusted> {
    let unreadable = |path: &Path| {
        let path = path.to_path_buf();
        move |error| Untrusted::Unreadable { path, error }
    };
    let (euid, egid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let resolved = std::fs::canonicalize(exe).map_err(unreadable(exe))?;
    let mut paths: Vec<PathBuf> = vec![resolved.clone(), exe.to_path_buf()];
    for path in [exe, resolved.as_path()] {
        paths.extend(
            path.ancestors()
                .skip(1)
                .filter(|p| !p.as_os_str().is_empty())
                .map(Path::to_path_buf),
        );
    }
    paths.dedup();
    for path in &paths {
        // The link itself (not its target) for the path as given: whoever can replace it
        // chooses the target.
        let meta = std::fs::symlink_metadata(path).map_err(unreadable(path))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.mode();
        let sticky_dir = meta.is_dir() && mode & STICKY != 0;
        let who = if meta.uid() != 0 && meta.uid() != euid {
            Some(format!("it is owned by uid {}", meta.uid()))
        } else if mode & OTHERS_WRITE != 0 && !sticky_dir {
            Some("others can write it".to_owned())
        } else if mode & GROUP_WRITE != 0 && !sticky_dir && meta.gid() != egid && meta.gid() != 0 {
            Some(format!("group {} can write it", meta.gid()))
        } else {
            None
        };
        if let Some(who) = who {
            return Err(Untrusted::Changeable {
                path: path.clone(),
                who,
                mode: mode & 0o7777,
                euid,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_program_others_can_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("app");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check(&exe).is_ok());
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o757)).unwrap();
        let why = check(&exe).unwrap_err().to_string();
        assert!(why.contains("others can write it"), "{why}");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A directory on the way, and a link's directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = check(&exe).unwrap_err().to_string();
        assert!(why.contains(&dir.path().display().to_string()), "{why}");
        let links = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = links.path().join("current");
        std::os::unix::fs::symlink(&exe, &link).unwrap();
        assert!(check(&link).is_ok());
        std::fs::set_permissions(links.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check(&link).is_err());
        // The sticky bit (as /tmp has) lets only an entry's owner replace it.
        std::fs::set_permissions(links.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check(&link).is_ok());
    }
}

//! Looking a request's path up on disk (on the blocking pool): symlinks resolved and kept
//! inside the root, directories answered with their `index.html` or a redirect, anything but
//! a regular file not found, and the file opened without a FIFO ever blocking the thread.

use std::fs::Metadata;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::validators::FileInfo;

pub(super) enum Lookup {
    File {
        /// The real file, for the cache and for opening.
        canonical: PathBuf,
        /// The name the client asked for (or its `index.html`), for the MIME type.
        name: PathBuf,
        info: FileInfo,
    },
    Redirect,
    NotFound,
}

/// Runs `f` on the blocking pool; a failed or cancelled task is an I/O error.
pub(super) async fn blocking<T, F>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) => Err(io::Error::other(e)),
    }
}

/// Resolves `relative` under `root`: symlinks, directories, index files.
pub(super) fn lookup(
    root: &Path,
    relative: &Path,
    trailing_slash: bool,
    allow_outside: bool,
) -> io::Result<Lookup> {
    let name = root.join(relative);
    let Some((canonical, meta)) = resolve(root, &name, allow_outside)? else {
        return Ok(Lookup::NotFound);
    };
    if meta.is_file() {
        return Ok(Lookup::File {
            canonical,
            name,
            info: FileInfo::from_metadata(&meta),
        });
    }
    if !meta.is_dir() {
        return Ok(Lookup::NotFound);
    }
    let index = name.join("index.html");
    match resolve(root, &index, allow_outside)? {
        Some((canonical, meta)) if meta.is_file() => {
            if trailing_slash {
                Ok(Lookup::File {
                    canonical,
                    name: index,
                    info: FileInfo::from_metadata(&meta),
                })
            } else {
                Ok(Lookup::Redirect)
            }
        }
        _ => Ok(Lookup::NotFound),
    }
}

/// Canonical path and metadata of `path`, or `None` when it does not exist or
/// (unless allowed) lies outside `root`.
pub(super) fn resolve(
    root: &Path,
    path: &Path,
    allow_outside: bool,
) -> io::Result<Option<(PathBuf, Metadata)>> {
    let canonical = match std::fs::canonicalize(path) {
        Ok(canonical) => canonical,
        Err(e) if is_not_found(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    if !allow_outside && !canonical.starts_with(root) {
        tracing::debug!(path = %path.display(), target = %canonical.display(), "static file outside the root");
        return Ok(None);
    }
    match std::fs::metadata(&canonical) {
        Ok(meta) => Ok(Some((canonical, meta))),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Errors that mean "there is no such file" as far as a client is concerned.
pub(super) fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::ENOTDIR | libc::ENAMETOOLONG | libc::ELOOP)
        )
}

/// Opens a regular file (non-blocking, so a FIFO swapped in cannot hang the
/// thread) and returns it with its metadata. With `beneath`, `path` lies under
/// that root and is opened so that nothing swapped in since it was looked up (a
/// directory replaced by a symlink) can lead outside it.
pub(super) fn open_regular(
    path: &Path,
    beneath: Option<&Path>,
) -> io::Result<(std::fs::File, Metadata)> {
    let file = match beneath {
        Some(root) => open_beneath(root, path)?,
        None => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?,
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::from(io::ErrorKind::NotFound));
    }
    // A regular file after all: blocking mode again, so that `sendfile`
    // cannot mistake it for the socket being full.
    // SAFETY: fcntl on an open descriptor with valid flags.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok((file, meta))
}

/// Opens `path` (under `root`) read-only and non-blocking such that no component resolves
/// outside `root`, whatever was swapped in since the path was checked: `openat2` with
/// `RESOLVE_BENEATH` from the root's descriptor (symlinks that stay inside are followed).
/// Without `openat2` (Linux before 5.6): opened, then where the descriptor really points
/// (`/proc/self/fd`) is checked. Outside is "not found".
fn open_beneath(root: &Path, path: &Path) -> io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let outside = || {
        tracing::debug!(path = %path.display(), "static file outside the root when opened");
        io::Error::from(io::ErrorKind::NotFound)
    };
    let relative = path.strip_prefix(root).map_err(|_| outside())?;
    let relative = std::ffi::CString::new(relative.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::NotFound))?;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(root)?;
    // SAFETY: `open_how` is plain integers; all zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // The kernel may ask for a retry when a rename raced the walk.
    for _ in 0..4 {
        // SAFETY: openat2 with a live directory descriptor, a NUL-terminated path and an
        // `open_how` of the size passed; a descriptor it returns is ours to own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                relative.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor from openat2, owned by nothing else.
            return Ok(unsafe { std::fs::File::from_raw_fd(fd as i32) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => continue,
            Some(libc::EXDEV) => return Err(outside()),
            Some(libc::ENOSYS) => break,
            _ => return Err(e),
        }
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    if !real.starts_with(root) {
        return Err(outside());
    }
    Ok(file)
}

/// Reads a whole small file, at most `limit + 1` bytes (a file that grew is
/// still bounded); `beneath` as for [`open_regular`].
pub(super) fn read_small(
    path: &Path,
    limit: u64,
    beneath: Option<&Path>,
) -> io::Result<(Metadata, Bytes)> {
    use std::io::Read;
    let (file, meta) = open_regular(path, beneath)?;
    let capacity = usize::try_from(meta.len().min(limit)).unwrap_or(0);
    let mut buf = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    Ok((meta, Bytes::from(buf)))
}

#[cfg(test)]
mod tests {
    use crate::http::static_files::testing::*;

    #[test]
    fn symlinks_outside_the_root() {
        let dir = TempDir::new();
        dir.write("inside.txt", b"inside");
        std::os::unix::fs::symlink(dir.base.join("secret.txt"), dir.root().join("out.txt"))
            .unwrap();
        std::os::unix::fs::symlink(dir.root().join("inside.txt"), dir.root().join("in.txt"))
            .unwrap();
        std::os::unix::fs::symlink(&dir.base, dir.root().join("up")).unwrap();
        run(async {
            let files = dir.files();
            assert_eq!(
                fetch(&files, "/out.txt").await,
                (StatusCode::NOT_FOUND, vec![])
            );
            assert_eq!(
                fetch(&files, "/up/x").await,
                (StatusCode::NOT_FOUND, vec![])
            );
            assert_eq!(
                fetch(&files, "/in.txt").await,
                (StatusCode::OK, b"inside".to_vec())
            );

            let files = dir.files().allow_symlinks_outside_root(true);
            assert_eq!(
                fetch(&files, "/out.txt").await,
                (StatusCode::OK, SECRET.to_vec())
            );
            assert_eq!(
                fetch(&files, "/up/x").await,
                (StatusCode::OK, SECRET.to_vec())
            );
            // Still no `..` in URLs.
            assert_eq!(fetch(&files, "/../x").await.0, StatusCode::NOT_FOUND);
        });
    }

    /// The race the open closes: a path checked inside the root, then a directory on it
    /// swapped for a symlink to outside before the open. A plain open follows the swap;
    /// the open beneath the root finds nothing.
    #[test]
    fn a_directory_swapped_for_a_symlink_after_the_check_leads_nowhere() {
        use super::super::lookup::{open_regular, resolve};
        use std::io::Read;
        let dir = TempDir::new();
        dir.write("sub/x", b"inside");
        let root = dir.root();
        let (checked, _) = resolve(&root, &root.join("sub/x"), false).unwrap().unwrap();
        std::fs::rename(root.join("sub"), root.join("sub.old")).unwrap();
        std::os::unix::fs::symlink(&dir.base, root.join("sub")).unwrap();
        let mut leaked = Vec::new();
        let (mut plain, _) = open_regular(&checked, None).unwrap();
        plain.read_to_end(&mut leaked).unwrap();
        assert_eq!(
            leaked, SECRET,
            "the plain open follows the swapped-in symlink"
        );
        let err = open_regular(&checked, Some(&root)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        // A (relative) symlink that stays inside the root is still followed. (Lookups open
        // the resolved path, so only a symlink swapped in since is met at all.)
        std::fs::remove_file(root.join("sub")).unwrap();
        std::os::unix::fs::symlink("sub.old", root.join("sub")).unwrap();
        let (mut file, _) = open_regular(&checked, Some(&root)).unwrap();
        let mut inside = Vec::new();
        file.read_to_end(&mut inside).unwrap();
        assert_eq!(inside, b"inside");
    }

    /// Requests while another thread keeps swapping a directory of the root for a symlink to
    /// outside and back: every answer is the inside file or 404, never the secret.
    #[test]
    fn a_symlink_swapped_in_during_requests_serves_nothing_outside() {
        use std::os::unix::ffi::OsStrExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let dir = TempDir::new();
        dir.write("sub/x", b"inside");
        let root = dir.root();
        std::os::unix::fs::symlink(&dir.base, root.join("link")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            let c = |name: &str| std::ffi::CString::new(root.join(name).as_os_str().as_bytes());
            let (sub, link) = (c("sub").unwrap(), c("link").unwrap());
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // `sub` is the real directory, then the symlink to outside, in turn:
                    // a path checked as `root/sub/x` may meet the symlink when opened.
                    // SAFETY: renameat2 with two NUL-terminated paths.
                    let done = unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            sub.as_ptr(),
                            libc::AT_FDCWD,
                            link.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
                    swaps += 1;
                }
                swaps
            })
        };
        // No cache and no revalidation interval: every request looks up and opens.
        let files = dir
            .files()
            .cache_max_file_size(0)
            .revalidate_after(std::time::Duration::ZERO);
        let (mut served, mut missing) = (0, 0);
        run(async {
            let began = std::time::Instant::now();
            while began.elapsed() < std::time::Duration::from_millis(1000) {
                let (status, bytes) = fetch(&files, "/sub/x").await;
                assert_ne!(bytes, SECRET, "the secret outside the root was served");
                match status {
                    StatusCode::OK => {
                        assert_eq!(bytes, b"inside");
                        served += 1;
                    }
                    StatusCode::NOT_FOUND => missing += 1,
                    other => panic!("{other}"),
                }
            }
        });
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(
            served > 0 && missing > 0 && swaps > 100,
            "{served} {missing} {swaps}"
        );
    }

    #[test]
    fn directories() {
        let dir = TempDir::new();
        dir.write("docs/index.html", b"<h1>docs</h1>");
        dir.write("empty/nothing.txt", b"");
        std::fs::remove_file(dir.root().join("empty/nothing.txt")).unwrap();
        run(async {
            let files = dir.files();
            let resp = files.serve(&get(&[]), "/docs/").await;
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(header(&resp, "content-type"), "text/html; charset=utf-8");
            assert_eq!(body(resp).await, b"<h1>docs</h1>");

            let req = Request::get("//static/docs?x=1").body(()).unwrap();
            let resp = files.serve(&req, "/docs").await;
            assert_eq!(resp.status(), StatusCode::MOVED_PERMANENTLY);
            assert_eq!(header(&resp, "location"), "/static/docs/?x=1");

            assert_eq!(fetch(&files, "/empty/").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/empty").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/missing.txt").await.0, StatusCode::NOT_FOUND);
            assert_eq!(
                fetch(&files, "/docs/index.html/x").await.0,
                StatusCode::NOT_FOUND
            );
        });
    }

    #[test]
    fn unreadable_file_is_403() {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        // Root reads any file: as root (CI), this test runs again in a child as `nobody`.
        if nix::unistd::geteuid().is_root() {
            let name = "http::static_files::lookup::tests::unreadable_file_is_403";
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--test-threads", "1"])
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "as nobody: {said}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                said.contains("1 passed"),
                "as nobody, it did not run: {said}"
            );
            return;
        }
        let dir = TempDir::new();
        let path = dir.write("locked.txt", b"locked");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert!(std::fs::read(&path).is_err(), "mode 000 keeps a user out");
        run(async {
            assert_eq!(
                fetch(&dir.files(), "/locked.txt").await.0,
                StatusCode::FORBIDDEN
            );
        });
    }
}

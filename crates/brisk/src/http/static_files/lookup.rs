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
/// thread) and returns it with its metadata.
pub(super) fn open_regular(path: &Path) -> io::Result<(std::fs::File, Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
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

/// Reads a whole small file, at most `limit + 1` bytes (a file that grew is
/// still bounded).
pub(super) fn read_small(path: &Path, limit: u64) -> io::Result<(Metadata, Bytes)> {
    use std::io::Read;
    let (file, meta) = open_regular(path)?;
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
        let dir = TempDir::new();
        let path = dir.write("locked.txt", b"locked");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        // Root can read anything; then there is nothing to test.
        if std::fs::read(&path).is_ok() {
            return;
        }
        run(async {
            assert_eq!(
                fetch(&dir.files(), "/locked.txt").await.0,
                StatusCode::FORBIDDEN
            );
        });
    }
}

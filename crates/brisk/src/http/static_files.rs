//! Static files under a root directory: [`StaticFiles`].
//!
//! Every web application ends up serving a directory of assets (CSS, scripts,
//! images, downloads). Doing that correctly is fiddly and security-sensitive:
//! the URL path must never escape the root, browsers expect validators
//! (`ETag`, `Last-Modified`) and conditional requests (`304`), media players and
//! download managers expect byte ranges (`206`), and a large file must not be
//! loaded into memory. This module does all of that once, for Brisk's worker
//! model: a [`StaticFiles`] is cheap to clone (an `Rc` inside) and lives on one
//! worker thread, so its in-memory cache needs no locks.
//!
//! # Behaviour, and the choices made
//!
//! * **Methods**: `GET` and `HEAD` (same headers, no body). Anything else is
//!   `405 Method Not Allowed` with `Allow: GET, HEAD`.
//! * **Bad URL paths**: invalid percent-encoding (`%zz`, a truncated `%4`) is
//!   `400 Bad Request`. Everything that could escape the root or name
//!   something odd is **`404 Not Found`** (never 403, so probing learns
//!   nothing): `..` segments in any encoding (`%2e%2e`, `.%2E`, ...),
//!   encoded slashes or backslashes inside a segment (`%2f`, `%5c`, and raw
//!   `\`), NUL bytes (`%00`).
//! * **Hidden files**: any segment starting with `.` (`.git`, `.env`,
//!   `.htpasswd`, and therefore `.` and `..` too) is `404`.
//! * **Symlinks**: followed, but a file whose canonical path lies outside the
//!   root is `404` unless [`StaticFiles::allow_symlinks_outside_root`] is set
//!   (for a cached path, checked again every
//!   [`StaticFiles::revalidate_after`]; see *Freshness*).
//! * **Directories**: a request for a directory whose path ends with `/` serves
//!   the `index.html` inside it if there is one; a directory without the
//!   trailing slash (and with an `index.html`) is redirected (`301`) to the
//!   same URL with the slash, so relative links in the page work. A directory
//!   without `index.html` is `404` (no listings).
//! * **Other file types** (FIFOs, devices, sockets) are `404`.
//! * **Errors**: permission denied is `403 Forbidden` (logged at debug level),
//!   any other I/O error `500` (logged as a warning).
//! * **Headers**: `Content-Type` from the file extension (`mime_guess`; `text/*`
//!   types get `; charset=utf-8`; unknown extensions are
//!   `application/octet-stream`), `Content-Length`, a strong `ETag` built from
//!   inode, size and modification time in nanoseconds, `Last-Modified`, and
//!   `Accept-Ranges: bytes`. `Cache-Control` is left to the caller.
//! * **Conditional requests**: `If-None-Match` (a list or `*`, weak comparison)
//!   answers `304 Not Modified` when it matches; only when it is absent is
//!   `If-Modified-Since` consulted (`304` when the file is not newer).
//! * **Ranges**: one range (`bytes=a-b`, `bytes=a-`, `bytes=-n`) is
//!   `206 Partial Content` with `Content-Range`; an unsatisfiable one is `416`
//!   with `Content-Range: bytes */len`. **Several ranges are ignored** (the full
//!   file is sent with `200`, which RFC 9110 allows, and which avoids
//!   `multipart/byteranges`), and so is a malformed `Range` header. `If-Range`
//!   honours the range only when it names the current strong `ETag` or exactly
//!   the current `Last-Modified` date; otherwise the full file is sent.
//! * **Memory**: files up to [`StaticFiles::cache_max_file_size`] are kept in
//!   a cache (bounded in total by [`StaticFiles::cache_max_total_size`],
//!   oldest entries evicted first). Files under
//!   [`StaticFiles::sendfile_min_size`] (default 32 KiB) are kept as their
//!   bytes, and ranges of them are slices of the cached buffer (no copy).
//!   Files from that size on are kept as the **open file** (with their
//!   validators and headers), costing the budget only their bookkeeping; at
//!   most [`StaticFiles::cache_max_open_files`] (default 128) entries per
//!   cache hold one, oldest evicted first. Larger files are opened per
//!   request. Either way the body of such a file (whole or a range) is a
//!   *file range*, sent from the page cache:
//!   * On Brisk's own HTTP/1.1 path (plaintext `http://`), the head is sent
//!     and then the range, in chunks of [`StaticFiles::sendfile_chunk_size`], with
//!     `sendfile(2)` straight from the file to the socket (no copy through
//!     user space). Before each chunk, `cachestat(2)` (Linux 6.5) checks
//!     that all its pages are in the page cache, so the send cannot wait for
//!     the disk; a chunk that is not (or where `cachestat` is missing or
//!     forbidden) is read as below and written. The connection yields to the
//!     worker's other connections between chunks. A file that turns out
//!     shorter than its `Content-Length` (truncated since it was looked at)
//!     closes the connection after what it had, so the client sees a short
//!     response rather than the start of another one.
//!   * Everywhere else (HTTPS, HTTP/2, a connection handed to hyper), the
//!     range is read and sent in chunks of [`StaticFiles::chunk_size`], one
//!     chunk at a time, so a download holds about one chunk whatever the
//!     file's size; dropping the response body (the client went away) stops
//!     the reads. A chunk whose pages are in the page cache is read on the
//!     worker thread itself (`preadv2` with `RWF_NOWAIT`: a memory copy, no
//!     thread hop); only a chunk that would wait for the disk is read on the
//!     blocking pool. Where `RWF_NOWAIT` is refused (an old kernel, a file
//!     system without it), every chunk is read on the blocking pool.
//!
//!   A cached open file is the inode that was opened: a file **replaced**
//!   (written elsewhere and renamed over it, as deployments do) keeps being
//!   served whole and consistent, old bytes with old validators, until the
//!   next check (see *Freshness*). A file **rewritten in place** is read as
//!   it is when sent: shrunk, the connection closes as above; rewritten with
//!   the same length within the interval, the new bytes may go out under the
//!   old validators (as with any server that streams from an open file).
//! * **Freshness**: the cache is keyed by the request's (decoded, normalized)
//!   path and remembers when that path was last checked against the disk.
//!   For [`StaticFiles::revalidate_after`] (default 1 s) after a check,
//!   requests for it are answered from the cache (its bytes, or its open
//!   file) without any system call but those that send the body; the
//!   first request after that resolves the path again (symlinks, the
//!   root check) and `stat`s the file, and reloads (or reopens) it when its
//!   size, modification time or inode changed. So a file that is edited, deleted,
//!   or replaced by a symlink pointing outside the root is noticed at most
//!   that long after the change; until then the previous version is served.
//!   `Duration::ZERO` checks on every request.
//!
//! Everything else (a path that is not cached or is due for a check, large
//! files, `404`s and redirects) resolves the path and `stat`s the file on
//! every request. File system calls run on tokio's blocking thread pool
//! (`spawn_blocking`), so a slow disk never stalls the worker's event loop;
//! the exceptions are the `RWF_NOWAIT` read, which returns at once instead
//! of waiting for the disk, and `sendfile`, sent only for pages `cachestat`
//! just found in memory (pages evicted between the two would be read from
//! the disk by the worker: a narrow window, not a wait per request).
//!
//! This module is Unix-only, like the rest of Brisk.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::Metadata;
use std::future::Future;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::file_body::{Chunks, FileBody};
use crate::http::Body;

/// Default for [`StaticFiles::cache_max_file_size`]: 2 MiB.
pub const DEFAULT_CACHE_MAX_FILE_SIZE: u64 = 2 * 1024 * 1024;
/// Default for [`StaticFiles::cache_max_total_size`]: 64 MiB.
pub const DEFAULT_CACHE_MAX_TOTAL_SIZE: u64 = 64 * 1024 * 1024;
/// Default for [`StaticFiles::chunk_size`]: 128 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 128 * 1024;
/// Default for [`StaticFiles::sendfile_chunk_size`]: 2 MiB.
pub const DEFAULT_SENDFILE_CHUNK_SIZE: usize = 2 * 1024 * 1024;
/// Default for [`StaticFiles::revalidate_after`]: 1 second.
pub const DEFAULT_REVALIDATE_AFTER: Duration = Duration::from_secs(1);
/// Default for [`StaticFiles::sendfile_min_size`]: 32 KiB.
pub const DEFAULT_SENDFILE_MIN_SIZE: u64 = 32 * 1024;
/// Default for [`StaticFiles::cache_max_open_files`]: 128.
pub const DEFAULT_CACHE_MAX_OPEN_FILES: usize = 128;

/// Bytes charged to the cache budget per entry on top of the file's size and
/// the lengths of its two paths: roughly the entry's own bookkeeping (its
/// cached header values and its slot in the map), so that many empty files
/// cannot grow the cache without limit.
const ENTRY_OVERHEAD: u64 = 512;

/// Serves files under a root directory.
///
/// Cheap to clone (the cache is shared through an `Rc`); used from one worker
/// thread. See the [module documentation](self) for exactly what it answers.
///
/// ```no_run
/// use brisk::http::static_files::StaticFiles;
///
/// # async fn handler(req: http::Request<()>) -> http::Response<brisk::http::Body> {
/// let files = StaticFiles::new("./public")
///     .expect("./public is a readable directory")
///     .cache_max_file_size(512 * 1024)
///     .chunk_size(64 * 1024);
/// // A request for "/static/css/site.css", mounted at "/static":
/// let below = req.uri().path().strip_prefix("/static").unwrap_or("/");
/// files.serve(&req, below).await
/// # }
/// ```
#[derive(Clone)]
pub struct StaticFiles {
    root: Rc<Path>,
    cache_max_file_size: u64,
    sendfile_min_size: u64,
    chunks: Chunks,
    allow_symlinks_outside_root: bool,
    revalidate_after: Duration,
    cache: Rc<RefCell<Cache>>,
}

impl std::fmt::Debug for StaticFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticFiles")
            .field("root", &self.root)
            .field("cache_max_file_size", &self.cache_max_file_size)
            .field("sendfile_min_size", &self.sendfile_min_size)
            .field("chunk_size", &self.chunks.read)
            .field("sendfile_chunk_size", &self.chunks.sendfile)
            .field(
                "allow_symlinks_outside_root",
                &self.allow_symlinks_outside_root,
            )
            .field("revalidate_after", &self.revalidate_after)
            .finish_non_exhaustive()
    }
}

impl StaticFiles {
    /// Serves the files under `root`.
    ///
    /// Fails if `root` does not exist, is not a directory or cannot be read.
    /// The root is canonicalized (symlinks resolved) once, here.
    ///
    /// ```
    /// use brisk::http::static_files::StaticFiles;
    /// assert!(StaticFiles::new("/definitely/not/here").is_err());
    /// ```
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = std::fs::canonicalize(root.into())?;
        if !std::fs::metadata(&root)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", root.display()),
            ));
        }
        // Fails with PermissionDenied if the directory cannot be listed.
        std::fs::read_dir(&root)?;
        Ok(StaticFiles {
            root: root.into(),
            cache_max_file_size: DEFAULT_CACHE_MAX_FILE_SIZE,
            sendfile_min_size: DEFAULT_SENDFILE_MIN_SIZE,
            chunks: Chunks {
                read: DEFAULT_CHUNK_SIZE,
                sendfile: DEFAULT_SENDFILE_CHUNK_SIZE,
            },
            allow_symlinks_outside_root: false,
            revalidate_after: DEFAULT_REVALIDATE_AFTER,
            cache: Rc::new(RefCell::new(Cache::new(DEFAULT_CACHE_MAX_TOTAL_SIZE))),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Files up to this size are served from a cache that notices changes
    /// (default 2 MiB; see [`revalidate_after`](Self::revalidate_after) for
    /// how soon): in memory, or as an open file from
    /// [`sendfile_min_size`](Self::sendfile_min_size) on. `0` caches only
    /// empty files.
    pub fn cache_max_file_size(mut self, bytes: u64) -> Self {
        self.cache_max_file_size = bytes;
        self
    }

    /// Bound on the cache's total size (default 64 MiB); when a new file would
    /// exceed it, the oldest entries are evicted. A small file that does not
    /// fit at all is still served from memory, just not kept. An entry
    /// holding an open file is charged its bookkeeping only (see
    /// [`cache_max_open_files`](Self::cache_max_open_files) for its bound).
    ///
    /// The cache is shared by clones, so this affects them too.
    pub fn cache_max_total_size(self, bytes: u64) -> Self {
        self.cache.borrow_mut().set_capacity(bytes);
        self
    }

    /// Cached files of at least this size (default 32 KiB) are kept as an
    /// open file rather than as their bytes, and sent from the page cache:
    /// with `sendfile(2)` on Brisk's own HTTP/1.1 path (plaintext), read in
    /// chunks elsewhere (HTTPS, HTTP/2, connections handed to hyper). Smaller
    /// files are kept in memory, where one `writev` sends them with their
    /// head. `u64::MAX` keeps every cached file in memory.
    ///
    /// Such an entry costs the cache's memory budget only its bookkeeping,
    /// and counts against [`cache_max_open_files`](Self::cache_max_open_files).
    pub fn sendfile_min_size(mut self, bytes: u64) -> Self {
        self.sendfile_min_size = bytes;
        self
    }

    /// Bound on the open files the cache holds (default 128; see
    /// [`sendfile_min_size`](Self::sendfile_min_size)): when another would
    /// exceed it, the oldest entry holding an open file is evicted. `0`
    /// keeps no file open (such files are then opened per request, as files
    /// over [`cache_max_file_size`](Self::cache_max_file_size) are).
    ///
    /// The cache is per worker (and shared by clones, so this affects them
    /// too): a server holds up to this many open files per worker, on top of
    /// the downloads in progress.
    pub fn cache_max_open_files(self, files: usize) -> Self {
        self.cache.borrow_mut().set_max_open_files(files);
        self
    }

    /// Files sent from an open file (over
    /// [`sendfile_min_size`](Self::sendfile_min_size)) and read rather than
    /// sent with `sendfile` are read in chunks of this size (default
    /// 128 KiB): one chunk held in memory at a time, so memory stays flat.
    /// `0` is treated as `1`.
    ///
    /// Measured (for reads, before `sendfile`) on 2 cores (one worker), chunks from 32 KiB to 256 KiB cost
    /// the same CPU per byte when the file is in the page cache (the copies
    /// dominate), while memory grows with the chunk: 50 concurrent downloads
    /// raised the worker's RSS by about 5, 8 and 14 MiB with 64, 128 and
    /// 256 KiB chunks. From disk (the file evicted from the page cache), one
    /// download with 128 KiB chunks was as fast as with 64 KiB ones in one
    /// session and about 1.5 times as fast in another, never slower; 256 KiB
    /// was no faster than 128 KiB. Smaller chunks also make a download's
    /// turns on the worker shorter.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunks.read = bytes.max(1);
        self
    }

    /// The most one `sendfile(2)` call sends of a file (default 2 MiB, like
    /// nginx's `sendfile_max_chunk`): between two such chunks the download
    /// yields to the worker's other connections. `sendfile` copies nothing
    /// into user space, so the size costs no memory; each chunk costs a
    /// `cachestat(2)` and a `sendfile(2)`. `0` is treated as `1`.
    ///
    /// Measured on 2 cores (one worker pinned, 50 connections downloading a
    /// 1 MiB file, load on the other core): with 128 KiB chunks the worker
    /// spent 150–160 µs of CPU per download against nginx's 142–149; with
    /// 2 MiB chunks, 136–151 µs. A 100 KiB file (one chunk either way) cost
    /// the same.
    ///
    /// ```
    /// use brisk::http::static_files::StaticFiles;
    /// let files = StaticFiles::new(".").unwrap().sendfile_chunk_size(512 * 1024);
    /// ```
    pub fn sendfile_chunk_size(mut self, bytes: usize) -> Self {
        self.chunks.sendfile = bytes.max(1);
        self
    }

    /// Whether symlinks may point outside the root (default `false`: such
    /// files are `404`).
    pub fn allow_symlinks_outside_root(mut self, allow: bool) -> Self {
        self.allow_symlinks_outside_root = allow;
        self
    }

    /// How long a cached file is trusted without looking at the disk
    /// (default 1 s).
    ///
    /// For this long after a URL path was last checked, requests for it are
    /// answered from memory: no `stat`, no trip to the blocking pool. The
    /// first request after that resolves the path again (so a symlink
    /// re-pointed outside the root is `404` again) and `stat`s the file,
    /// reloading it when its size, modification time or inode changed. A
    /// change on disk is therefore served at most this long after it
    /// happened; in the meantime the previous version is served, even if the
    /// file was deleted. `Duration::ZERO` checks on every request.
    ///
    /// ```
    /// use std::time::Duration;
    /// use brisk::http::static_files::StaticFiles;
    /// # let dir = std::env::temp_dir();
    /// let files = StaticFiles::new(dir)?.revalidate_after(Duration::from_millis(200));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn revalidate_after(mut self, interval: Duration) -> Self {
        self.revalidate_after = interval;
        self
    }

    /// Answers `req` for `path`: the URL path below the mount point, still
    /// percent-encoded, e.g. `"/css/site.css"` for a request to
    /// `"/static/css/site.css"` mounted at `"/static"`.
    ///
    /// Never fails: every problem is a status code (see the
    /// [module documentation](self)).
    pub async fn serve<B>(&self, req: &Request<B>, path: &str) -> Response<Body> {
        let method = req.method();
        if method != Method::GET && method != Method::HEAD {
            let mut resp = status(StatusCode::METHOD_NOT_ALLOWED);
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return resp;
        }
        let head = method == Method::HEAD;

        // The hit path: a path already in normal form is its own cache key,
        // so a fresh entry is answered without decoding, allocating keys or
        // touching the disk.
        let normal = normal_key(path);
        if let Some(key) = normal {
            if let Some(resp) = self.serve_fresh(req, key.as_bytes(), head) {
                return resp;
            }
        }

        let (relative, trailing_slash) = match parse_path(path) {
            Ok(parsed) => parsed,
            Err(code) => return status(code),
        };
        let key = match normal {
            Some(key) => key.as_bytes().to_vec(),
            None => {
                // Another spelling (`%61.txt`, `//a.txt`, a query) of a path
                // that may be cached under its normal form.
                let key = cache_key(&relative, trailing_slash);
                if let Some(resp) = self.serve_fresh(req, &key, head) {
                    return resp;
                }
                key
            }
        };

        // Not cached, or due for a check. Resolving the path again (not just
        // a `stat` of the cached file) is what notices a symlink re-pointed
        // outside the root. That is several system calls (`realpath` walks
        // every component, then a `stat`), made at most once per interval
        // for a cached path, so it stays on the blocking pool with everything
        // else that touches the disk: a slow or hung file system then stalls
        // a pool thread, never the event loop, and the hop's cost is spread
        // over every hit in the interval. Concurrent requests for a path that
        // is due each make their own check (no single flight): on one thread,
        // only those arriving while a check is in flight can overlap.
        //
        // The time is taken before the check, so an entry is never trusted
        // for longer than `revalidate_after` after the disk was looked at.
        let checked = Instant::now();
        let root = self.root.to_path_buf();
        let allow = self.allow_symlinks_outside_root;
        let lookup = blocking(move || lookup(&root, &relative, trailing_slash, allow)).await;
        let (canonical, name, info) = match lookup {
            Ok(Lookup::File {
                canonical,
                name,
                info,
            }) => (canonical, name, info),
            other => {
                self.cache.borrow_mut().remove(&key);
                return match other {
                    Ok(Lookup::Redirect) => redirect_with_slash(req),
                    Err(e) => io_error(&e, path),
                    _ => status(StatusCode::NOT_FOUND),
                };
            }
        };
        let content_type = content_type(&name);

        if info.len <= self.cache_max_file_size {
            // Unchanged since it was cached: trusted for another interval.
            let mut cache = self.cache.borrow_mut();
            if let Some(entry) = cache.revalidated(&key, &canonical, &info, &content_type, checked)
            {
                return respond_from(entry, req, head, self.chunks);
            }
        } else {
            self.cache.borrow_mut().remove(&key);
        }

        // Choose the bytes to send before loading anything.
        let validators = Validators::new(info);
        let mut range = match decide(req.headers(), &validators) {
            ControlFlow::Continue(range) => range,
            ControlFlow::Break(resp) => return resp,
        };

        let (validators, body) = if head {
            (validators, Body::empty())
        } else {
            let loaded = if info.len <= self.cache_max_file_size {
                self.load(&key, canonical, &content_type, checked, info.len)
                    .await
            } else {
                blocking(move || open_regular(&canonical))
                    .await
                    .map(|(file, meta)| {
                        let file = Content::File(Arc::new(file));
                        (FileInfo::from_metadata(&meta), file)
                    })
            };
            match loaded {
                Ok((now, content)) => {
                    let validators = if now != info {
                        // Changed since the stat: the range and validators
                        // were for the old version, so send the new one whole.
                        range = None;
                        Validators::new(now)
                    } else {
                        validators
                    };
                    let body = content.body(range, now.len, self.chunks);
                    (validators, body)
                }
                Err(e) => return io_error(&e, path),
            }
        };
        finish(&validators, content_type, body, range, None)
    }

    /// The response from the cache when `key` is cached, was checked less
    /// than `revalidate_after` ago, and may be served by this `StaticFiles`
    /// (clones share the cache but not their settings).
    fn serve_fresh<B>(&self, req: &Request<B>, key: &[u8], head: bool) -> Option<Response<Body>> {
        if self.revalidate_after.is_zero() {
            return None;
        }
        let cache = self.cache.borrow();
        let entry = cache.entries.get(key)?;
        // `Instant::now()` reads the monotonic clock through the vDSO: no
        // system call.
        let fresh = entry.checked.elapsed() < self.revalidate_after;
        let allowed = entry.inside_root || self.allow_symlinks_outside_root;
        let small = entry.validators.info.len <= self.cache_max_file_size;
        (fresh && allowed && small).then(|| respond_from(entry, req, head, self.chunks))
    }

    /// Loads a file of (about) `len` bytes, at most `cache_max_file_size`:
    /// its bytes, or the open file from [`sendfile_min_size`](Self::sendfile_min_size)
    /// on; and caches it under `key`.
    async fn load(
        &self,
        key: &[u8],
        canonical: PathBuf,
        content_type: &HeaderValue,
        checked: Instant,
        len: u64,
    ) -> io::Result<(FileInfo, Content)> {
        let path = canonical.clone();
        let limit = self.cache_max_file_size;
        let (mut now, content) = if len >= self.sendfile_min_size {
            let (file, meta) = blocking(move || open_regular(&path)).await?;
            let now = FileInfo::from_metadata(&meta);
            (now, Content::File(Arc::new(file)))
        } else {
            let (meta, bytes) = blocking(move || read_small(&path, limit)).await?;
            (FileInfo::from_metadata(&meta), Content::Bytes(bytes))
        };
        let consistent = match &content {
            Content::Bytes(bytes) => now.len == bytes.len() as u64,
            Content::File(_) => now.len <= limit,
        };
        if consistent {
            let inside_root = canonical.starts_with(&self.root);
            let entry = Entry::new(
                canonical,
                inside_root,
                now,
                content_type.clone(),
                content.clone(),
                checked,
            );
            self.cache.borrow_mut().insert(key, entry);
        } else {
            // Written to while we read it (or grown past the limit): serve
            // what we have, keep nothing.
            if let Content::Bytes(bytes) = &content {
                now.len = bytes.len() as u64;
            }
            self.cache.borrow_mut().remove(key);
        }
        Ok((now, content))
    }
}

/// What a cache entry (or a response being prepared) holds of a file.
#[derive(Clone)]
enum Content {
    /// Its bytes.
    Bytes(Bytes),
    /// The open file, sent from the page cache.
    File(Arc<std::fs::File>),
}

impl Content {
    /// The body for `range` (`None`: all `len` bytes).
    fn body(&self, range: Option<(u64, u64)>, len: u64, chunks: Chunks) -> Body {
        let (start, count) = match range {
            Some((start, end)) => (start, end - start + 1),
            None => (0, len),
        };
        match self {
            Content::Bytes(bytes) => {
                Body::full(bytes.slice(start as usize..(start + count) as usize))
            }
            Content::File(file) => Body::file(FileBody::new(file.clone(), start, count, chunks)),
        }
    }

    /// Bytes of memory it holds.
    fn memory(&self) -> usize {
        match self {
            Content::Bytes(bytes) => bytes.len(),
            Content::File(_) => 0,
        }
    }
}

/// The response for a cached entry: the same status and headers as for the
/// file on disk, with the body sliced from the cached bytes or sent from the
/// cached open file.
fn respond_from<B>(entry: &Entry, req: &Request<B>, head: bool, chunks: Chunks) -> Response<Body> {
    let range = match decide(req.headers(), &entry.validators) {
        ControlFlow::Continue(range) => range,
        ControlFlow::Break(resp) => return resp,
    };
    let body = if head {
        Body::empty()
    } else {
        let len = entry.validators.info.len;
        entry.content.body(range, len, chunks)
    };
    finish(
        &entry.validators,
        entry.content_type.clone(),
        body,
        range,
        Some(&entry.content_length),
    )
}

/// A file's identity and validators, from its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileInfo {
    len: u64,
    dev: u64,
    ino: u64,
    mtime_sec: i64,
    mtime_nsec: i64,
}

impl FileInfo {
    fn from_metadata(meta: &Metadata) -> Self {
        FileInfo {
            len: meta.len(),
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_sec: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }

    /// Strong ETag: inode, size and mtime in nanoseconds, in hex.
    fn etag(&self) -> String {
        let nanos = i128::from(self.mtime_sec) * 1_000_000_000 + i128::from(self.mtime_nsec);
        format!("\"{:x}-{:x}-{:x}\"", self.ino, self.len, nanos)
    }

    /// Modification time truncated to whole seconds (HTTP dates' precision).
    fn modified(&self) -> SystemTime {
        if self.mtime_sec >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.mtime_sec as u64)
        } else {
            UNIX_EPOCH
                .checked_sub(Duration::from_secs(self.mtime_sec.unsigned_abs()))
                .unwrap_or(UNIX_EPOCH)
        }
    }

    fn last_modified(&self) -> String {
        httpdate::fmt_http_date(self.modified())
    }
}

/// A file's info with its `ETag` and `Last-Modified` header values, built
/// once (a cache entry keeps them, so a hit formats nothing).
#[derive(Clone, Debug)]
struct Validators {
    info: FileInfo,
    etag: HeaderValue,
    last_modified: HeaderValue,
}

impl Validators {
    fn new(info: FileInfo) -> Self {
        Validators {
            info,
            etag: header_value(info.etag()),
            last_modified: header_value(info.last_modified()),
        }
    }

    fn etag(&self) -> &str {
        self.etag.to_str().unwrap_or_default()
    }

    fn insert_into(&self, headers: &mut HeaderMap) {
        headers.insert(header::ETAG, self.etag.clone());
        headers.insert(header::LAST_MODIFIED, self.last_modified.clone());
    }
}

// ---------------------------------------------------------------------------
// URL path → relative file system path

/// Splits and decodes the URL path into a relative path that cannot leave the
/// root. Returns whether it ended with `/` (a directory request).
fn parse_path(path: &str) -> Result<(PathBuf, bool), StatusCode> {
    // A raw '?' or '#' cannot be part of a path; be lenient if a caller passed
    // the query along.
    let path = path.split(['?', '#']).next().unwrap_or("");
    let bytes = path.as_bytes();
    // Validate all percent-encoding first, so `%zz` is 400 wherever it is.
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let valid = bytes.len() > i + 2
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit();
            if !valid {
                return Err(StatusCode::BAD_REQUEST);
            }
            i += 3;
        } else {
            i += 1;
        }
    }

    let mut relative = PathBuf::new();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
        let hidden = decoded.first() == Some(&b'.');
        let smuggled = decoded.iter().any(|&b| b == b'/' || b == b'\\' || b == 0);
        if hidden || smuggled {
            return Err(StatusCode::NOT_FOUND);
        }
        relative.push(OsStr::from_bytes(&decoded));
    }
    Ok((relative, path.is_empty() || path.ends_with('/')))
}

// ---------------------------------------------------------------------------
// File system (run on the blocking pool)

enum Lookup {
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
async fn blocking<T, F>(f: F) -> io::Result<T>
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
fn lookup(
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
fn resolve(
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
fn is_not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::ENOTDIR | libc::ENAMETOOLONG | libc::ELOOP)
        )
}

/// Opens a regular file (non-blocking, so a FIFO swapped in cannot hang the
/// thread) and returns it with its metadata.
fn open_regular(path: &Path) -> io::Result<(std::fs::File, Metadata)> {
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
fn read_small(path: &Path, limit: u64) -> io::Result<(Metadata, Bytes)> {
    use std::io::Read;
    let (file, meta) = open_regular(path)?;
    let capacity = usize::try_from(meta.len().min(limit)).unwrap_or(0);
    let mut buf = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    Ok((meta, Bytes::from(buf)))
}

// ---------------------------------------------------------------------------
// Cache

/// The normal form of a URL path, as [`parse_path`] decodes it: `/`, the
/// decoded segments joined by `/`, and a trailing `/` for a directory
/// request. The cache's key, so that `/a.txt`, `//a.txt`, `/%61.txt` and
/// `/a.txt?v=2` share one entry.
fn cache_key(relative: &Path, trailing_slash: bool) -> Vec<u8> {
    let relative = relative.as_os_str().as_bytes();
    let mut key = Vec::with_capacity(relative.len() + 2);
    key.push(b'/');
    key.extend_from_slice(relative);
    if trailing_slash && !relative.is_empty() {
        key.push(b'/');
    }
    key
}

/// `path` itself when it is already its own [`cache_key`], so the cache can
/// be looked up without decoding or allocating: it starts with `/` and has no
/// `%`, `\`, NUL, `?` or `#`, no empty segment (`//`) and no segment starting
/// with `.`. Such a path always passes [`parse_path`]. Anything else takes the
/// slow way (which is also where it gets its `400` or `404`).
fn normal_key(path: &str) -> Option<&str> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return None;
    }
    let mut previous = 0;
    for &byte in bytes {
        match byte {
            b'%' | b'\\' | 0 | b'?' | b'#' => return None,
            b'/' | b'.' if previous == b'/' => return None,
            _ => previous = byte,
        }
    }
    Some(path)
}

/// Small files by request path ([`cache_key`]). Two paths naming the same
/// file (a symlink, `dir/` and `dir/index.html`) are two entries, each
/// charged to the budget in full (and each holding its own open file).
struct Cache {
    entries: HashMap<Rc<[u8]>, Entry>,
    /// Insertion order for eviction: (key, generation). Stale pairs (the
    /// entry was replaced or removed) are skipped.
    order: VecDeque<(Rc<[u8]>, u64)>,
    total: u64,
    capacity: u64,
    /// Entries holding an open file, and their bound.
    open_files: usize,
    max_open_files: usize,
    generation: u64,
}

struct Entry {
    /// The file the path resolved to. A check that resolves it elsewhere
    /// (a symlink changed) reloads.
    canonical: PathBuf,
    /// Whether `canonical` is under the root; if not, only a `StaticFiles`
    /// with `allow_symlinks_outside_root` may serve it from here (clones
    /// share the cache, not that setting).
    inside_root: bool,
    validators: Validators,
    content_type: HeaderValue,
    /// `Content-Length` of the whole file.
    content_length: HeaderValue,
    content: Content,
    /// When the disk was last looked at for this path (taken before the
    /// look).
    checked: Instant,
    generation: u64,
}

impl Entry {
    fn new(
        canonical: PathBuf,
        inside_root: bool,
        info: FileInfo,
        content_type: HeaderValue,
        content: Content,
        checked: Instant,
    ) -> Self {
        Entry {
            canonical,
            inside_root,
            content_length: HeaderValue::from(info.len),
            validators: Validators::new(info),
            content_type,
            content,
            checked,
            generation: 0,
        }
    }
}

impl Cache {
    fn new(capacity: u64) -> Self {
        Cache {
            entries: HashMap::new(),
            order: VecDeque::new(),
            total: 0,
            capacity,
            open_files: 0,
            max_open_files: DEFAULT_CACHE_MAX_OPEN_FILES,
            generation: 0,
        }
    }

    fn set_max_open_files(&mut self, max: usize) {
        self.max_open_files = max;
        self.evict_files_until(0);
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.evict_until(0);
    }

    /// The entry for `key` if a check that started at `checked` found the
    /// same file (`canonical`) with the same size, mtime and inode; it is
    /// then trusted for another interval. A mismatching entry is removed.
    fn revalidated(
        &mut self,
        key: &[u8],
        canonical: &Path,
        info: &FileInfo,
        content_type: &HeaderValue,
        checked: Instant,
    ) -> Option<&Entry> {
        let entry = self.entries.get(key)?;
        if entry.canonical != canonical || entry.validators.info != *info {
            self.remove(key);
            return None;
        }
        let entry = self.entries.get_mut(key)?;
        // A slower, older check may finish after a newer one.
        entry.checked = entry.checked.max(checked);
        if entry.content_type != *content_type {
            entry.content_type = content_type.clone();
        }
        Some(entry)
    }

    fn cost(key: &[u8], entry: &Entry) -> u64 {
        (key.len() + entry.canonical.as_os_str().len() + entry.content.memory()) as u64
            + ENTRY_OVERHEAD
    }

    fn insert(&mut self, key: &[u8], mut entry: Entry) {
        self.remove(key);
        let cost = Self::cost(key, &entry);
        let file = matches!(entry.content, Content::File(_));
        if cost > self.capacity || (file && self.max_open_files == 0) {
            return;
        }
        self.evict_until(cost);
        if file {
            self.evict_files_until(1);
            self.open_files += 1;
        }
        self.generation += 1;
        entry.generation = self.generation;
        self.total += cost;
        let key: Rc<[u8]> = Rc::from(key);
        self.order.push_back((key.clone(), self.generation));
        self.entries.insert(key, entry);
        // Keep the queue from filling up with stale pairs.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(k, g)| entries.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.entries.remove(key) {
            self.total -= Self::cost(key, &old);
            if matches!(old.content, Content::File(_)) {
                self.open_files -= 1;
            }
        }
    }

    /// Evicts the oldest entries holding an open file until `extra` more fit
    /// under the bound (entries holding bytes stay).
    fn evict_files_until(&mut self, extra: usize) {
        while self.open_files + extra > self.max_open_files {
            let entries = &self.entries;
            let oldest = self.order.iter().position(|(key, generation)| {
                entries.get(key).is_some_and(|e| {
                    e.generation == *generation && matches!(e.content, Content::File(_))
                })
            });
            let Some(i) = oldest else {
                break;
            };
            if let Some((key, _)) = self.order.remove(i) {
                self.remove(&key);
            }
        }
    }

    /// Evicts the oldest entries until `extra` more bytes fit.
    fn evict_until(&mut self, extra: u64) {
        while self.total + extra > self.capacity {
            let Some((key, generation)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&key)
                .is_some_and(|e| e.generation == generation)
            {
                self.remove(&key);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP semantics

/// `304` when the request's validators match the file, per RFC 9110 §13.2.2:
/// `If-None-Match` first, `If-Modified-Since` only without it.
fn check_not_modified(headers: &HeaderMap, validators: &Validators) -> Option<StatusCode> {
    if let Some(value) = headers.get(header::IF_NONE_MATCH) {
        let value = value.to_str().ok()?;
        let etag = validators.etag();
        let matched = value.trim() == "*" || value.split(',').any(|tag| weak_eq(tag.trim(), etag));
        return matched.then_some(StatusCode::NOT_MODIFIED);
    }
    let since = headers.get(header::IF_MODIFIED_SINCE)?.to_str().ok()?;
    let since = httpdate::parse_http_date(since).ok()?;
    (validators.info.modified() <= since).then_some(StatusCode::NOT_MODIFIED)
}

/// Weak comparison: equal opaque tags, ignoring `W/`.
fn weak_eq(a: &str, b: &str) -> bool {
    let a = a.strip_prefix("W/").unwrap_or(a);
    let b = b.strip_prefix("W/").unwrap_or(b);
    a.len() >= 2 && a.starts_with('"') && a.ends_with('"') && a == b
}

enum RangeDecision {
    Full,
    /// Inclusive byte positions, `start <= end < len`.
    Partial(u64, u64),
    Unsatisfiable,
}

/// What to send given `Range` and `If-Range`.
fn requested_range(headers: &HeaderMap, validators: &Validators) -> RangeDecision {
    let info = &validators.info;
    let Some(range) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return RangeDecision::Full;
    };
    if let Some(if_range) = headers.get(header::IF_RANGE) {
        let Ok(if_range) = if_range.to_str() else {
            return RangeDecision::Full;
        };
        let if_range = if_range.trim();
        let current = if if_range.starts_with('"') || if_range.starts_with("W/") {
            // Strong comparison: a weak tag never matches.
            if_range == validators.etag()
        } else {
            httpdate::parse_http_date(if_range).is_ok_and(|date| date == info.modified())
        };
        if !current {
            return RangeDecision::Full;
        }
    }
    parse_range(range, info.len)
}

/// Parses a `Range` header for a representation of `len` bytes. Malformed
/// headers and several ranges mean "send it all".
fn parse_range(value: &str, len: u64) -> RangeDecision {
    let value = value.trim();
    let Some((unit, specs)) = value.split_once('=') else {
        return RangeDecision::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeDecision::Full;
    }
    let mut specs = specs.split(',').map(str::trim).filter(|s| !s.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return RangeDecision::Full;
    };
    let Some((first, last)) = spec.split_once('-') else {
        return RangeDecision::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    match (number(first), number(last)) {
        // bytes=-n: the last n bytes.
        (None, Some(suffix)) if first.is_empty() => {
            if suffix == 0 || len == 0 {
                RangeDecision::Unsatisfiable
            } else {
                RangeDecision::Partial(len.saturating_sub(suffix), len - 1)
            }
        }
        // bytes=a-
        (Some(start), None) if last.is_empty() => {
            if start < len {
                RangeDecision::Partial(start, len - 1)
            } else {
                RangeDecision::Unsatisfiable
            }
        }
        // bytes=a-b
        (Some(start), Some(end)) if start <= end => {
            if start < len {
                RangeDecision::Partial(start, end.min(len - 1))
            } else {
                RangeDecision::Unsatisfiable
            }
        }
        _ => RangeDecision::Full,
    }
}

/// A non-empty run of ASCII digits (no sign, no overflow).
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `Content-Type` for a file name.
fn content_type(name: &Path) -> HeaderValue {
    let Some(mime) = mime_guess::from_path(name).first() else {
        return HeaderValue::from_static("application/octet-stream");
    };
    let value = if mime.type_() == mime_guess::mime::TEXT && mime.get_param("charset").is_none() {
        format!("{mime}; charset=utf-8")
    } else {
        mime.to_string()
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
}

/// What the validators and `Range` headers ask for: `Continue` with the
/// range to send (`None`: all of it), or `Break` with the finished `304` or
/// `416`.
fn decide(
    headers: &HeaderMap,
    validators: &Validators,
) -> ControlFlow<Response<Body>, Option<(u64, u64)>> {
    if let Some(code) = check_not_modified(headers, validators) {
        let mut resp = status(code);
        validators.insert_into(resp.headers_mut());
        return ControlFlow::Break(resp);
    }
    match requested_range(headers, validators) {
        RangeDecision::Full => ControlFlow::Continue(None),
        RangeDecision::Partial(start, end) => ControlFlow::Continue(Some((start, end))),
        RangeDecision::Unsatisfiable => {
            let mut resp = status(StatusCode::RANGE_NOT_SATISFIABLE);
            set(
                resp.headers_mut(),
                header::CONTENT_RANGE,
                format!("bytes */{}", validators.info.len),
            );
            resp.headers_mut()
                .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            ControlFlow::Break(resp)
        }
    }
}

/// The `200`, or `206` for `range`, around `body`. `full_length` is the
/// whole file's `Content-Length` when already at hand.
fn finish(
    validators: &Validators,
    content_type: HeaderValue,
    body: Body,
    range: Option<(u64, u64)>,
    full_length: Option<&HeaderValue>,
) -> Response<Body> {
    let len = validators.info.len;
    let Some((start, end)) = range else {
        let length = full_length
            .cloned()
            .unwrap_or_else(|| HeaderValue::from(len));
        return full_response(validators, content_type, body, length);
    };
    let length = HeaderValue::from(end - start + 1);
    let mut resp = full_response(validators, content_type, body, length);
    *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    set(
        resp.headers_mut(),
        header::CONTENT_RANGE,
        format!("bytes {start}-{end}/{len}"),
    );
    resp
}

/// A `200` (the caller may change the status) with all the file's headers.
fn full_response(
    validators: &Validators,
    content_type: HeaderValue,
    body: Body,
    content_length: HeaderValue,
) -> Response<Body> {
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, content_length);
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    validators.insert_into(headers);
    resp
}

/// `301` to the request's own path plus `/` (query kept).
fn redirect_with_slash<B>(req: &Request<B>) -> Response<Body> {
    // Collapse leading slashes: "//evil.example" must not become a
    // protocol-relative redirect to another host.
    let mut location = format!("/{}/", req.uri().path().trim_start_matches('/'));
    if let Some(query) = req.uri().query() {
        location.push('?');
        location.push_str(query);
    }
    let mut resp = status(StatusCode::MOVED_PERMANENTLY);
    set(resp.headers_mut(), header::LOCATION, location);
    resp
}

/// The status for an I/O error, logged.
fn io_error(e: &io::Error, path: &str) -> Response<Body> {
    if is_not_found(e) {
        return status(StatusCode::NOT_FOUND);
    }
    if e.kind() == io::ErrorKind::PermissionDenied {
        tracing::debug!(path, error = %e, "static file: permission denied");
        return status(StatusCode::FORBIDDEN);
    }
    tracing::warn!(path, error = %e, "static file: I/O error");
    status(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An empty response with `code`.
fn status(code: StatusCode) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = code;
    resp
}

/// Inserts a header built from a string; a value that is not a valid header
/// (cannot happen for the values built here) is left out rather than panicking.
fn set(headers: &mut HeaderMap, name: header::HeaderName, value: String) {
    if let Ok(value) = HeaderValue::try_from(value) {
        headers.insert(name, value);
    }
}

/// A header value built from a string; one that is not valid (cannot happen
/// for the ETags and dates built here: printable ASCII) is empty rather than
/// a panic.
fn header_value(value: String) -> HeaderValue {
    HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::http::testing::{digest, noise};
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SECRET: &[u8] = b"TOP-SECRET-OUTSIDE-THE-ROOT";

    /// A unique temporary directory, removed on drop, with `root/` inside and
    /// secret files next to it (outside the root).
    struct TempDir {
        base: PathBuf,
    }

    impl TempDir {
        fn new() -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let base = std::env::temp_dir().join(format!(
                "brisk-static-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(base.join("root")).unwrap();
            std::fs::write(base.join("x"), SECRET).unwrap();
            std::fs::write(base.join("secret.txt"), SECRET).unwrap();
            TempDir { base }
        }

        fn root(&self) -> PathBuf {
            self.base.join("root")
        }

        fn write(&self, rel: &str, contents: &[u8]) -> PathBuf {
            let path = self.root().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, contents).unwrap();
            path
        }

        fn files(&self) -> StaticFiles {
            StaticFiles::new(self.root()).unwrap()
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn run<F: Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f)
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri("/static/x");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    fn get(headers: &[(&str, &str)]) -> Request<()> {
        request(Method::GET, headers)
    }

    async fn body(resp: Response<Body>) -> Vec<u8> {
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    fn header<'a>(resp: &'a Response<Body>, name: &str) -> &'a str {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    async fn fetch(files: &StaticFiles, path: &str) -> (StatusCode, Vec<u8>) {
        let resp = files.serve(&get(&[]), path).await;
        let status = resp.status();
        (status, body(resp).await)
    }

    #[test]
    fn new_rejects_missing_root_and_files() {
        let dir = TempDir::new();
        assert!(StaticFiles::new(dir.base.join("missing")).is_err());
        assert!(StaticFiles::new(dir.base.join("x")).is_err());
        assert!(StaticFiles::new(dir.root()).is_ok());
    }

    #[test]
    fn serves_a_file() {
        let dir = TempDir::new();
        dir.write("css/site.css", b"body { color: red }");
        run(async {
            let files = dir.files();
            let resp = files.serve(&get(&[]), "/css/site.css").await;
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(header(&resp, "content-length"), "19");
            assert_eq!(header(&resp, "accept-ranges"), "bytes");
            assert!(header(&resp, "etag").starts_with('"'));
            assert!(header(&resp, "last-modified").ends_with("GMT"));
            assert_eq!(body(resp).await, b"body { color: red }");
            // Empty and repeated slashes are ignored.
            assert_eq!(fetch(&files, "//css///site.css").await.0, StatusCode::OK);
            // Percent-encoded names are decoded.
            dir.write("a b.txt", b"space");
            assert_eq!(
                fetch(&files, "/a%20b.txt").await,
                (StatusCode::OK, b"space".to_vec())
            );
        });
    }

    #[test]
    fn traversal_never_escapes_the_root() {
        let dir = TempDir::new();
        dir.write("a/inner.txt", b"inner");
        run(async {
            let files = dir.files();
            for path in [
                "/../etc/passwd",
                "/../x",
                "/../secret.txt",
                "../x",
                "/%2e%2e/x",
                "/%2E%2E/secret.txt",
                "/.%2e/x",
                "/a/%2E%2e/%2e%2E/x",
                "/a/../../x",
                "/a%2f..%2f..%2fx",
                "/a%2F..%2F..%2Fsecret.txt",
                "/%00",
                "/a/inner.txt%00",
                "/..%5c..%5cx",
                "/a\\..\\..\\x",
                "/%5c..%5cx",
                "/./a/inner.txt",
            ] {
                let (status, content) = fetch(&files, path).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
                assert_ne!(content, SECRET, "{path}");
            }
        });
    }

    #[test]
    fn invalid_percent_encoding_is_400() {
        let dir = TempDir::new();
        dir.write("a.txt", b"a");
        run(async {
            let files = dir.files();
            for path in ["/%zz", "/a%4", "/a.txt%", "/%g0/a.txt", "/..%2/x"] {
                assert_eq!(
                    fetch(&files, path).await.0,
                    StatusCode::BAD_REQUEST,
                    "{path}"
                );
            }
        });
    }

    #[test]
    fn dotfiles_are_hidden() {
        let dir = TempDir::new();
        dir.write(".env", b"PASSWORD=1");
        dir.write(".git/config", b"[core]");
        run(async {
            let files = dir.files();
            assert_eq!(fetch(&files, "/.env").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/%2eenv").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/.git/config").await.0, StatusCode::NOT_FOUND);
        });
    }

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
    fn mime_types() {
        let dir = TempDir::new();
        for name in [
            "a.html",
            "a.css",
            "a.js",
            "a.json",
            "a.png",
            "a.unknownext",
            "noext",
        ] {
            dir.write(name, b"x");
        }
        run(async {
            let files = dir.files();
            for (name, expected) in [
                ("/a.html", "text/html; charset=utf-8"),
                ("/a.css", "text/css; charset=utf-8"),
                ("/a.js", "text/javascript; charset=utf-8"),
                ("/a.json", "application/json"),
                ("/a.png", "image/png"),
                ("/a.unknownext", "application/octet-stream"),
                ("/noext", "application/octet-stream"),
            ] {
                let resp = files.serve(&get(&[]), name).await;
                assert_eq!(resp.status(), StatusCode::OK, "{name}");
                assert_eq!(header(&resp, "content-type"), expected, "{name}");
            }
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
    fn conditional_requests() {
        let dir = TempDir::new();
        dir.write("a.txt", b"hello");
        run(async {
            let files = dir.files();
            let resp = files.serve(&get(&[]), "/a.txt").await;
            let etag = header(&resp, "etag").to_owned();
            let last_modified = header(&resp, "last-modified").to_owned();

            for inm in [
                etag.clone(),
                format!("W/{etag}"),
                format!("\"other\", {etag}"),
                "*".to_owned(),
            ] {
                let resp = files
                    .serve(&get(&[("if-none-match", &inm)]), "/a.txt")
                    .await;
                assert_eq!(resp.status(), StatusCode::NOT_MODIFIED, "{inm}");
                assert_eq!(header(&resp, "etag"), etag);
                assert_eq!(body(resp).await, b"");
            }
            let resp = files
                .serve(&get(&[("if-none-match", "\"other\"")]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::OK);

            let resp = files
                .serve(&get(&[("if-modified-since", &last_modified)]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
            assert_eq!(body(resp).await, b"");
            let resp = files
                .serve(
                    &get(&[("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT")]),
                    "/a.txt",
                )
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
            // If-None-Match wins over If-Modified-Since.
            let resp = files
                .serve(
                    &get(&[
                        ("if-none-match", "\"other\""),
                        ("if-modified-since", &last_modified),
                    ]),
                    "/a.txt",
                )
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
            // A garbage date is ignored.
            let resp = files
                .serve(&get(&[("if-modified-since", "yesterday")]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
        });
    }

    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

    async fn range(
        files: &StaticFiles,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, String, Vec<u8>) {
        let resp = files.serve(&get(headers), path).await;
        let status = resp.status();
        let content_range = header(&resp, "content-range").to_owned();
        let length = header(&resp, "content-length").to_owned();
        let bytes = body(resp).await;
        if status == StatusCode::OK || status == StatusCode::PARTIAL_CONTENT {
            assert_eq!(length, bytes.len().to_string());
        }
        (status, content_range, bytes)
    }

    fn check_ranges(files: StaticFiles) {
        run(async {
            let r = |h: &'static str| [("range", h)];
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=0-9")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 0-9/36".into(),
                    DIGITS[..10].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=10-")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 10-35/36".into(),
                    DIGITS[10..].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=-5")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 31-35/36".into(),
                    DIGITS[31..].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=30-1000")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 30-35/36".into(),
                    DIGITS[30..].to_vec()
                )
            );
            assert_eq!(
                range(&files, "/d.txt", &r("bytes=-1000")).await,
                (
                    StatusCode::PARTIAL_CONTENT,
                    "bytes 0-35/36".into(),
                    DIGITS.to_vec()
                )
            );
            for unsatisfiable in ["bytes=1000-", "bytes=36-40", "bytes=-0"] {
                let (status, content_range, bytes) =
                    range(&files, "/d.txt", &r(unsatisfiable)).await;
                assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{unsatisfiable}");
                assert_eq!(content_range, "bytes */36");
                assert_eq!(bytes, b"");
            }
            for full in [
                "bytes=0-1,5-6",
                "bytes=0-1, -3",
                "bytes=5-1",
                "bytes=abc",
                "bytes=+1-2",
                "bytes=-",
                "items=0-1",
                "0-1",
                "bytes=99999999999999999999999-",
            ] {
                assert_eq!(
                    range(&files, "/d.txt", &r(full)).await,
                    (StatusCode::OK, String::new(), DIGITS.to_vec()),
                    "{full}"
                );
            }

            // If-Range.
            let resp = files.serve(&get(&[]), "/d.txt").await;
            let etag = header(&resp, "etag").to_owned();
            let date = header(&resp, "last-modified").to_owned();
            for (if_range, honoured) in [
                (etag.as_str(), true),
                (date.as_str(), true),
                ("\"stale\"", false),
                (&format!("W/{etag}"), false),
                ("Sun, 06 Nov 1994 08:49:37 GMT", false),
                ("garbage", false),
            ] {
                let (status, _, bytes) = range(
                    &files,
                    "/d.txt",
                    &[("range", "bytes=0-9"), ("if-range", if_range)],
                )
                .await;
                if honoured {
                    assert_eq!(
                        (status, bytes),
                        (StatusCode::PARTIAL_CONTENT, DIGITS[..10].to_vec()),
                        "{if_range}"
                    );
                } else {
                    assert_eq!(
                        (status, bytes),
                        (StatusCode::OK, DIGITS.to_vec()),
                        "{if_range}"
                    );
                }
            }
        });
    }

    #[test]
    fn ranges_cached() {
        let dir = TempDir::new();
        dir.write("d.txt", DIGITS);
        check_ranges(dir.files());
    }

    #[test]
    fn ranges_streamed() {
        let dir = TempDir::new();
        dir.write("d.txt", DIGITS);
        check_ranges(dir.files().cache_max_file_size(4).chunk_size(7));
    }

    #[test]
    fn head_has_headers_but_no_body() {
        let dir = TempDir::new();
        dir.write("a.txt", b"hello");
        dir.write("big.bin", &[7; 5000]);
        run(async {
            let files = dir.files().cache_max_file_size(1000);
            for (path, len) in [("/a.txt", "5"), ("/big.bin", "5000")] {
                let resp = files.serve(&request(Method::HEAD, &[]), path).await;
                assert_eq!(resp.status(), StatusCode::OK);
                assert_eq!(header(&resp, "content-length"), len);
                assert!(!header(&resp, "etag").is_empty());
                assert_eq!(body(resp).await, b"");
            }
            let resp = files
                .serve(&request(Method::HEAD, &[("range", "bytes=0-1")]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::PARTIAL_CONTENT);
            assert_eq!(header(&resp, "content-length"), "2");
            assert_eq!(body(resp).await, b"");
        });
    }

    #[test]
    fn other_methods_are_405() {
        let dir = TempDir::new();
        dir.write("a.txt", b"hello");
        run(async {
            let files = dir.files();
            for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
                let resp = files.serve(&request(method.clone(), &[]), "/a.txt").await;
                assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
                assert_eq!(header(&resp, "allow"), "GET, HEAD");
                assert_eq!(body(resp).await, b"");
            }
        });
    }

    #[test]
    fn cache_notices_changes() {
        let dir = TempDir::new();
        let path = dir.write("a.txt", b"first version");
        run(async {
            // Checked on every request.
            let files = dir.files().revalidate_after(Duration::ZERO);
            assert_eq!(fetch(&files, "/a.txt").await.1, b"first version");
            assert!(files.cache.borrow().entries.contains_key(&b"/a.txt"[..]));

            // Same length, same mtime, same inode: the cache is trusted (this
            // proves the content comes from memory).
            let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.write_all_at(b"FIRST", 0).unwrap();
            file.set_modified(mtime).unwrap();
            drop(file);
            assert_eq!(fetch(&files, "/a.txt").await.1, b"first version");

            // Different content and length.
            std::fs::write(&path, b"second, longer version").unwrap();
            assert_eq!(fetch(&files, "/a.txt").await.1, b"second, longer version");

            // Same length, new mtime.
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.write_all_at(b"SECOND", 0).unwrap();
            file.set_modified(mtime + Duration::from_secs(10)).unwrap();
            drop(file);
            assert_eq!(fetch(&files, "/a.txt").await.1, b"SECOND, longer version");

            // Deleted.
            std::fs::remove_file(&path).unwrap();
            assert_eq!(fetch(&files, "/a.txt").await.0, StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn cache_total_size_is_bounded() {
        let dir = TempDir::new();
        for i in 0..10 {
            dir.write(&format!("{i}.bin"), &[i; 1000]);
        }
        // Each entry costs its size, its key ("/0.bin"), its canonical path
        // and the overhead: room for exactly three.
        let canonical = std::fs::canonicalize(dir.root().join("0.bin")).unwrap();
        let cost = 1000 + 6 + canonical.as_os_str().len() as u64 + ENTRY_OVERHEAD;
        run(async {
            let files = dir.files().cache_max_total_size(3 * cost);
            for round in 0..2 {
                for i in 0..10u8 {
                    let (status, bytes) = fetch(&files, &format!("/{i}.bin")).await;
                    assert_eq!((status, bytes), (StatusCode::OK, vec![i; 1000]), "{round}");
                    // Other spellings of the path share its entry.
                    for alias in [format!("//{i}.bin"), format!("/%3{i}.bin?x")] {
                        assert_eq!(fetch(&files, &alias).await.1, vec![i; 1000]);
                    }
                    let cache = files.cache.borrow();
                    assert!(cache.total <= cache.capacity);
                    let expected = if round == 0 { usize::from(i) + 1 } else { 3 };
                    assert_eq!(cache.entries.len(), expected.min(3));
                    assert!(cache.order.len() <= 2 * cache.entries.len() + 64);
                }
            }
            // Too big for the whole cache: served, not kept.
            let files = dir.files().cache_max_total_size(10);
            assert_eq!(fetch(&files, "/1.bin").await.1, vec![1; 1000]);
            assert!(files.cache.borrow().entries.is_empty());
        });
    }

    /// Whether the cache holds `key` as an open file (`Some(true)`) or as
    /// bytes (`Some(false)`).
    fn cached_as_file(files: &StaticFiles, key: &str) -> Option<bool> {
        let cache = files.cache.borrow();
        let entry = cache.entries.get(key.as_bytes())?;
        Some(matches!(entry.content, Content::File(_)))
    }

    #[test]
    fn a_file_body_takes_sendfile_chunks_and_read_chunks_of_the_set_sizes() {
        let dir = TempDir::new();
        let big = noise(100_000);
        let path = dir.write("big.bin", &big);
        run(async {
            // Read into the page cache, so that cachestat finds it resident.
            std::fs::read(&path).unwrap();
            for (sendfile, read) in [(DEFAULT_SENDFILE_CHUNK_SIZE, 1000), (30_000, 7000)] {
                let files = dir.files().sendfile_chunk_size(sendfile).chunk_size(read);
                let mut resp = files.serve(&get(&[]), "/big.bin").await;
                let file = resp.body_mut().as_file_mut().expect("a file body");
                if crate::http::sys::cachestat_works() {
                    assert_eq!(file.resident_chunk(), Some((0, sendfile.min(big.len()))));
                }
                // Read instead, the same body comes in read chunks.
                let frame = file.frame().await.unwrap().unwrap();
                assert_eq!(frame.into_data().unwrap(), &big[..read]);
            }
        });
    }

    #[test]
    fn files_from_sendfile_min_size_are_cached_open_and_byte_exact() {
        let dir = TempDir::new();
        let big = noise(40_000);
        dir.write("big.bin", &big);
        dir.write("small.bin", &big[..1000]);
        run(async {
            let files = dir.files().revalidate_after(Duration::from_secs(3600));
            for _ in 0..2 {
                assert_eq!(
                    fetch(&files, "/big.bin").await,
                    (StatusCode::OK, big.clone())
                );
                assert_eq!(fetch(&files, "/small.bin").await.1, &big[..1000]);
            }
            assert_eq!(cached_as_file(&files, "/big.bin"), Some(true));
            assert_eq!(cached_as_file(&files, "/small.bin"), Some(false));
            assert_eq!(files.cache.borrow().open_files, 1);
            // The entry costs the budget its bookkeeping, not the file.
            assert!(files.cache.borrow().total < 2 * 1000 + 4 * ENTRY_OVERHEAD);

            // Ranges and HEAD from the open file.
            let resp = files
                .serve(&get(&[("range", "bytes=1000-29999")]), "/big.bin")
                .await;
            assert_eq!(resp.status(), StatusCode::PARTIAL_CONTENT);
            assert_eq!(header(&resp, "content-range"), "bytes 1000-29999/40000");
            assert!(resp.body().is_file());
            assert_eq!(body(resp).await, &big[1000..30_000]);
            let resp = files.serve(&request(Method::HEAD, &[]), "/big.bin").await;
            assert_eq!(header(&resp, "content-length"), "40000");
            assert_eq!(body(resp).await, b"");

            // Over the threshold: bytes in memory again.
            let files = dir.files().sendfile_min_size(u64::MAX);
            assert_eq!(fetch(&files, "/big.bin").await.1, big);
            assert_eq!(cached_as_file(&files, "/big.bin"), Some(false));
        });
    }

    #[test]
    fn open_files_in_the_cache_are_bounded() {
        let dir = TempDir::new();
        for name in ["1", "2", "3", "4"] {
            dir.write(&format!("{name}.bin"), &noise(40_000));
        }
        dir.write("small.bin", b"small");
        run(async {
            let files = dir.files().cache_max_open_files(2);
            assert_eq!(fetch(&files, "/small.bin").await.1, b"small");
            for name in ["1", "2", "3", "4"] {
                assert_eq!(
                    fetch(&files, &format!("/{name}.bin")).await.1,
                    noise(40_000)
                );
                assert!(files.cache.borrow().open_files <= 2);
            }
            // The oldest open files went; the entry with bytes stayed.
            assert_eq!(cached_as_file(&files, "/1.bin"), None);
            assert_eq!(cached_as_file(&files, "/2.bin"), None);
            assert_eq!(cached_as_file(&files, "/3.bin"), Some(true));
            assert_eq!(cached_as_file(&files, "/4.bin"), Some(true));
            assert_eq!(cached_as_file(&files, "/small.bin"), Some(false));
            // Lowering the bound evicts; 0 keeps none, and still serves.
            let files = files.cache_max_open_files(0);
            assert_eq!(files.cache.borrow().open_files, 0);
            assert_eq!(fetch(&files, "/4.bin").await.1, noise(40_000));
            assert_eq!(cached_as_file(&files, "/4.bin"), None);
            assert_eq!(cached_as_file(&files, "/small.bin"), Some(false));
        });
    }

    #[test]
    fn a_cached_open_file_replaced_on_disk_is_served_consistently() {
        let dir = TempDir::new();
        let old = noise(50_000);
        let path = dir.write("f.bin", &old);
        run(async {
            let files = dir.files().revalidate_after(Duration::from_millis(300));
            let resp = files.serve(&get(&[]), "/f.bin").await;
            let old_etag = header(&resp, "etag").to_owned();
            assert_eq!(body(resp).await, old);
            // Replaced the way deployments do it: written aside, renamed over.
            let new: Vec<u8> = noise(70_000).iter().map(|b| b ^ 0x5a).collect();
            let aside = dir.root().join("f.bin.new");
            std::fs::write(&aside, &new).unwrap();
            std::fs::rename(&aside, &path).unwrap();
            // Within the interval: the old file, whole, with its validators.
            let resp = files.serve(&get(&[]), "/f.bin").await;
            assert_eq!(header(&resp, "etag"), old_etag);
            assert_eq!(header(&resp, "content-length"), "50000");
            assert_eq!(body(resp).await, old);
            // After it: the new one, with new validators.
            std::thread::sleep(Duration::from_millis(350));
            let resp = files.serve(&get(&[]), "/f.bin").await;
            assert_ne!(header(&resp, "etag"), old_etag);
            assert_eq!(header(&resp, "content-length"), "70000");
            assert_eq!(body(resp).await, new);
            assert_eq!(files.cache.borrow().open_files, 1);
        });
    }

    #[test]
    fn large_files_stream_in_chunks() {
        let dir = TempDir::new();
        let contents: Vec<u8> = (0..100 * 1024u32).map(|i| (i % 251) as u8).collect();
        dir.write("big.bin", &contents);
        run(async {
            let files = dir.files().cache_max_file_size(1024).chunk_size(4096);
            for (range, expected) in [
                (None, &contents[..]),
                (Some("bytes=5000-20000"), &contents[5000..=20000]),
                (Some("bytes=-10"), &contents[contents.len() - 10..]),
            ] {
                let headers: Vec<(&str, &str)> = range.map(|r| ("range", r)).into_iter().collect();
                let resp = files.serve(&get(&headers), "/big.bin").await;
                assert_eq!(header(&resp, "content-length"), expected.len().to_string());
                let mut body = resp.into_body();
                let mut received = Vec::new();
                let mut frames = 0;
                while let Some(frame) = body.frame().await {
                    let data = frame.unwrap().into_data().unwrap();
                    assert!(data.len() <= 4096, "frame of {} bytes", data.len());
                    received.extend_from_slice(&data);
                    frames += 1;
                }
                assert_eq!(received, expected);
                assert_eq!(frames, expected.len().div_ceil(4096));
            }
            assert!(files.cache.borrow().entries.is_empty());

            // A body dropped half-way (the client went away) just stops.
            let resp = files.serve(&get(&[]), "/big.bin").await;
            let mut body = resp.into_body();
            assert!(body.frame().await.unwrap().is_ok());
            drop(body);
        });
    }

    #[test]
    fn truncated_while_streaming_is_an_error() {
        let dir = TempDir::new();
        let path = dir.write("big.bin", &[1; 10_000]);
        run(async {
            let files = dir.files().cache_max_file_size(0).chunk_size(1000);
            let mut body = files.serve(&get(&[]), "/big.bin").await.into_body();
            assert!(body.frame().await.unwrap().is_ok());
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(1500)
                .unwrap();
            let mut failed = false;
            while let Some(frame) = body.frame().await {
                if frame.is_err() {
                    failed = true;
                    break;
                }
            }
            assert!(failed);
        });
    }

    #[test]
    fn large_file_is_byte_exact_with_and_without_range() {
        let dir = TempDir::new();
        // Past the default cache limit, not a multiple of anything.
        let contents = noise(3 * 1024 * 1024 + 12_345);
        dir.write("large.bin", &contents);
        let len = contents.len();
        let chunk = DEFAULT_CHUNK_SIZE;
        run(async {
            let files = dir.files();
            for (range, start, end) in [
                (None, 0, len - 1),
                (Some("bytes=0-".to_owned()), 0, len - 1),
                (Some("bytes=100001-2500000".into()), 100_001, 2_500_000),
                // Across a chunk boundary, and within one chunk.
                (
                    Some(format!("bytes={}-{}", chunk - 1, chunk + 1)),
                    chunk - 1,
                    chunk + 1,
                ),
                (Some("bytes=70000-70000".into()), 70_000, 70_000),
                (Some("bytes=-77777".into()), len - 77_777, len - 1),
            ] {
                let headers: Vec<(&str, &str)> =
                    range.iter().map(|r| ("range", r.as_str())).collect();
                let resp = files.serve(&get(&headers), "/large.bin").await;
                let expected = &contents[start..=end];
                if range.is_some() {
                    assert_eq!(resp.status(), StatusCode::PARTIAL_CONTENT, "{range:?}");
                    let content_range = format!("bytes {start}-{end}/{len}");
                    assert_eq!(header(&resp, "content-range"), content_range);
                } else {
                    assert_eq!(resp.status(), StatusCode::OK);
                }
                assert_eq!(header(&resp, "content-length"), expected.len().to_string());
                let mut body = resp.into_body();
                let mut received = Vec::new();
                while let Some(frame) = body.frame().await {
                    let data = frame.unwrap().into_data().unwrap();
                    assert!(!data.is_empty() && data.len() <= DEFAULT_CHUNK_SIZE);
                    received.extend_from_slice(&data);
                }
                assert_eq!(received.len(), expected.len(), "{range:?}");
                assert_eq!(digest(&received), digest(expected), "{range:?}");
            }
            assert!(files.cache.borrow().entries.is_empty());
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

    /// Every header of a response, for comparing two of them.
    fn all_headers(resp: &Response<Body>) -> Vec<(String, String)> {
        let mut headers: Vec<_> = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        headers.sort();
        headers
    }

    #[test]
    fn hits_within_the_interval_do_not_touch_the_disk() {
        let dir = TempDir::new();
        let path = dir.write("a.txt", b"hello, cache");
        run(async {
            let files = dir.files(); // the default interval: 1 s
            let first = files.serve(&get(&[]), "/a.txt").await;
            assert_eq!(first.status(), StatusCode::OK);
            let first_headers = all_headers(&first);
            let etag = header(&first, "etag").to_owned();

            // Intended: within the interval the disk is not looked at, so a
            // deleted file is still served, whole and in ranges, with the
            // same headers as before, and so is every other spelling of its
            // path.
            std::fs::remove_file(&path).unwrap();
            for spelling in ["/a.txt", "//a.txt", "/%61.txt", "/a.txt?v=2"] {
                let resp = files.serve(&get(&[]), spelling).await;
                assert_eq!(all_headers(&resp), first_headers, "{spelling}");
                assert_eq!(body(resp).await, b"hello, cache", "{spelling}");
            }
            assert_eq!(files.cache.borrow().entries.len(), 1);

            let resp = files.serve(&get(&[("range", "bytes=7-")]), "/a.txt").await;
            assert_eq!(resp.status(), StatusCode::PARTIAL_CONTENT);
            assert_eq!(header(&resp, "content-range"), "bytes 7-11/12");
            assert_eq!(header(&resp, "content-length"), "5");
            assert_eq!(header(&resp, "etag"), etag);
            assert_eq!(body(resp).await, b"cache");

            let resp = files.serve(&get(&[("range", "bytes=12-")]), "/a.txt").await;
            assert_eq!(resp.status(), StatusCode::RANGE_NOT_SATISFIABLE);
            assert_eq!(header(&resp, "content-range"), "bytes */12");

            let resp = files
                .serve(&get(&[("if-none-match", &etag)]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
            assert_eq!(header(&resp, "etag"), etag);
            assert_eq!(body(resp).await, b"");

            let resp = files.serve(&request(Method::HEAD, &[]), "/a.txt").await;
            assert_eq!(all_headers(&resp), first_headers);
            assert_eq!(body(resp).await, b"");

            // Not cached paths still go to the disk.
            assert_eq!(fetch(&files, "/b.txt").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/.a.txt").await.0, StatusCode::NOT_FOUND);
            assert_eq!(fetch(&files, "/%zz").await.0, StatusCode::BAD_REQUEST);

            // Checking every time notices the deletion at once, and forgets
            // the entry.
            let strict = files.clone().revalidate_after(Duration::ZERO);
            assert_eq!(fetch(&strict, "/a.txt").await.0, StatusCode::NOT_FOUND);
            assert!(files.cache.borrow().entries.is_empty());
            assert_eq!(fetch(&files, "/a.txt").await.0, StatusCode::NOT_FOUND);
        });
    }

    #[test]
    fn changes_are_served_after_the_interval() {
        const INTERVAL: Duration = Duration::from_millis(50);
        let dir = TempDir::new();
        let path = dir.write("a.txt", b"first version");
        let past_the_interval = || tokio::time::sleep(INTERVAL + Duration::from_millis(20));
        run(async {
            let files = dir.files().revalidate_after(INTERVAL);
            let resp = files.serve(&get(&[]), "/a.txt").await;
            let etag = header(&resp, "etag").to_owned();
            assert_eq!(body(resp).await, b"first version");

            // Unchanged: checked again, still the same entry.
            past_the_interval().await;
            let resp = files
                .serve(&get(&[("if-none-match", &etag)]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);

            // New content and length.
            std::fs::write(&path, b"second, longer version").unwrap();
            past_the_interval().await;
            let resp = files
                .serve(&get(&[("if-none-match", &etag)]), "/a.txt")
                .await;
            assert_eq!(resp.status(), StatusCode::OK);
            assert_eq!(header(&resp, "content-length"), "22");
            let etag = header(&resp, "etag").to_owned();
            assert_eq!(body(resp).await, b"second, longer version");

            // Same length, new mtime.
            let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.write_all_at(b"SECOND", 0).unwrap();
            file.set_modified(mtime + Duration::from_secs(10)).unwrap();
            drop(file);
            past_the_interval().await;
            let resp = files.serve(&get(&[]), "/a.txt").await;
            assert_ne!(header(&resp, "etag"), etag);
            assert_eq!(body(resp).await, b"SECOND, longer version");

            // Replaced by another file (new inode) of the same size and mtime.
            let other = dir.write("other.txt", b"THIRD!, longer version");
            let file = std::fs::File::open(&other).unwrap();
            file.set_modified(mtime + Duration::from_secs(10)).unwrap();
            drop(file);
            std::fs::rename(&other, &path).unwrap();
            past_the_interval().await;
            assert_eq!(fetch(&files, "/a.txt").await.1, b"THIRD!, longer version");

            // Deleted.
            std::fs::remove_file(&path).unwrap();
            past_the_interval().await;
            assert_eq!(fetch(&files, "/a.txt").await.0, StatusCode::NOT_FOUND);
            assert!(files.cache.borrow().entries.is_empty());
        });
    }

    #[test]
    fn symlink_swapped_out_of_the_root_is_noticed() {
        const INTERVAL: Duration = Duration::from_millis(50);
        let dir = TempDir::new();
        dir.write("inside.txt", b"inside");
        dir.write("sub/x", b"inside x");
        let link = dir.root().join("link.txt");
        let link_dir = dir.root().join("linkdir");
        std::os::unix::fs::symlink(dir.root().join("inside.txt"), &link).unwrap();
        std::os::unix::fs::symlink(dir.root().join("sub"), &link_dir).unwrap();
        // Replaces `at` atomically with a symlink to `target`.
        let repoint = |at: &Path, target: &Path| {
            let tmp = dir.base.join("new-link");
            std::os::unix::fs::symlink(target, &tmp).unwrap();
            std::fs::rename(&tmp, at).unwrap();
        };
        run(async {
            let files = dir.files().revalidate_after(INTERVAL);
            assert_eq!(fetch(&files, "/link.txt").await.1, b"inside");
            assert_eq!(fetch(&files, "/linkdir/x").await.1, b"inside x");

            repoint(&link, &dir.base.join("secret.txt"));
            repoint(&link_dir, &dir.base);
            tokio::time::sleep(INTERVAL + Duration::from_millis(20)).await;
            for path in ["/link.txt", "/linkdir/x", "/link.txt", "/linkdir/x"] {
                assert_eq!(
                    fetch(&files, path).await,
                    (StatusCode::NOT_FOUND, vec![]),
                    "{path}"
                );
            }
            assert!(files.cache.borrow().entries.is_empty());
        });
    }

    #[test]
    fn clones_do_not_share_the_symlink_setting_through_the_cache() {
        let dir = TempDir::new();
        std::os::unix::fs::symlink(dir.base.join("secret.txt"), dir.root().join("out.txt"))
            .unwrap();
        run(async {
            let strict = dir.files();
            let lax = strict.clone().allow_symlinks_outside_root(true);
            assert_eq!(
                fetch(&lax, "/out.txt").await,
                (StatusCode::OK, SECRET.to_vec())
            );
            assert_eq!(strict.cache.borrow().entries.len(), 1);
            assert_eq!(
                fetch(&strict, "/out.txt").await,
                (StatusCode::NOT_FOUND, vec![])
            );
            assert_eq!(
                fetch(&lax, "/out.txt").await,
                (StatusCode::OK, SECRET.to_vec())
            );
        });
    }

    #[test]
    fn normal_paths_are_their_own_cache_key() {
        // Every string of up to 5 of these characters: whenever `normal_key`
        // takes the shortcut, `parse_path` accepts the path and its key is
        // the path itself.
        const ALPHABET: &[u8] = b"/a.%61?\\";
        let mut paths = vec![String::new()];
        let mut shortcuts = 0;
        for _ in 0..5 {
            paths = paths
                .iter()
                .flat_map(|p| ALPHABET.iter().map(move |&c| format!("{p}{}", c as char)))
                .collect();
            for path in &paths {
                if let Some(normal) = normal_key(path) {
                    shortcuts += 1;
                    let (relative, trailing_slash) = parse_path(path).unwrap();
                    assert_eq!(
                        cache_key(&relative, trailing_slash),
                        normal.as_bytes(),
                        "{path}"
                    );
                }
            }
        }
        assert!(shortcuts > 100, "{shortcuts}");
        for normal in ["/", "/a/b.txt", "/a/", "/a b/c", "/é.txt", "/a.b/c..d"] {
            assert_eq!(normal_key(normal), Some(normal));
        }
        for odd in [
            "", "a", "//a", "/a//b", "/%61", "/a?x", "/a#x", "/.a", "/a/.b", "/a\\b",
        ] {
            assert_eq!(normal_key(odd), None, "{odd}");
        }
        for (odd, key) in [
            ("", "/"),
            ("//a", "/a"),
            ("/%61", "/a"),
            ("/a?x", "/a"),
            ("/a//b/", "/a/b/"),
            ("/a%20b/", "/a b/"),
        ] {
            let (relative, trailing_slash) = parse_path(odd).unwrap();
            assert_eq!(
                cache_key(&relative, trailing_slash),
                key.as_bytes(),
                "{odd}"
            );
        }
    }
}

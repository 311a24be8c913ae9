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
//!   root is `404` unless [`StaticFiles::allow_symlinks_outside_root`] is set.
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
//!   an in-memory cache (bounded in total by
//!   [`StaticFiles::cache_max_total_size`], oldest entries evicted first). Every
//!   request re-checks the file's size, modification time and inode with one
//!   `stat`, so a changed file is reloaded. Ranges of cached files are slices
//!   of the cached buffer (no copy). Larger files are streamed in chunks of
//!   [`StaticFiles::chunk_size`] read on the blocking pool, one chunk at a time;
//!   dropping the response body (the client went away) stops the reads and
//!   closes the file.
//!
//! File system calls run on tokio's blocking thread pool (`spawn_blocking`), so
//! a slow disk never stalls the worker's event loop.
//!
//! This module is Unix-only, like the rest of Brisk.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::Metadata;
use std::future::Future;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use tokio::task::JoinHandle;

use crate::http::Body;

/// Default for [`StaticFiles::cache_max_file_size`]: 2 MiB.
pub const DEFAULT_CACHE_MAX_FILE_SIZE: u64 = 2 * 1024 * 1024;
/// Default for [`StaticFiles::cache_max_total_size`]: 64 MiB.
pub const DEFAULT_CACHE_MAX_TOTAL_SIZE: u64 = 64 * 1024 * 1024;
/// Default for [`StaticFiles::chunk_size`]: 64 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;

/// Bytes charged to the cache budget per entry on top of the file's size, so
/// that many empty files cannot grow the cache without limit.
const ENTRY_OVERHEAD: u64 = 256;

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
///     .chunk_size(128 * 1024);
/// // A request for "/static/css/site.css", mounted at "/static":
/// let below = req.uri().path().strip_prefix("/static").unwrap_or("/");
/// files.serve(&req, below).await
/// # }
/// ```
#[derive(Clone)]
pub struct StaticFiles {
    root: Rc<Path>,
    cache_max_file_size: u64,
    chunk_size: usize,
    allow_symlinks_outside_root: bool,
    cache: Rc<RefCell<Cache>>,
}

impl std::fmt::Debug for StaticFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticFiles")
            .field("root", &self.root)
            .field("cache_max_file_size", &self.cache_max_file_size)
            .field("chunk_size", &self.chunk_size)
            .field(
                "allow_symlinks_outside_root",
                &self.allow_symlinks_outside_root,
            )
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
            chunk_size: DEFAULT_CHUNK_SIZE,
            allow_symlinks_outside_root: false,
            cache: Rc::new(RefCell::new(Cache::new(DEFAULT_CACHE_MAX_TOTAL_SIZE))),
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Files up to this size are served from an in-memory cache that notices
    /// changes (default 2 MiB). `0` caches only empty files.
    pub fn cache_max_file_size(mut self, bytes: u64) -> Self {
        self.cache_max_file_size = bytes;
        self
    }

    /// Bound on the cache's total size (default 64 MiB); when a new file would
    /// exceed it, the oldest entries are evicted. A small file that does not
    /// fit at all is still served from memory, just not kept.
    ///
    /// The cache is shared by clones, so this affects them too.
    pub fn cache_max_total_size(self, bytes: u64) -> Self {
        self.cache.borrow_mut().set_capacity(bytes);
        self
    }

    /// Files larger than [`cache_max_file_size`](Self::cache_max_file_size) are
    /// streamed in chunks of this size (default 64 KiB), so memory stays flat.
    /// `0` is treated as `1`.
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Whether symlinks may point outside the root (default `false`: such
    /// files are `404`).
    pub fn allow_symlinks_outside_root(mut self, allow: bool) -> Self {
        self.allow_symlinks_outside_root = allow;
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

        let (relative, trailing_slash) = match parse_path(path) {
            Ok(parsed) => parsed,
            Err(code) => return status(code),
        };

        let root = self.root.to_path_buf();
        let allow = self.allow_symlinks_outside_root;
        let lookup = blocking(move || lookup(&root, &relative, trailing_slash, allow)).await;
        let (canonical, name, info) = match lookup {
            Ok(Lookup::File {
                canonical,
                name,
                info,
            }) => (canonical, name, info),
            Ok(Lookup::Redirect) => return redirect_with_slash(req),
            Ok(Lookup::NotFound) => return status(StatusCode::NOT_FOUND),
            Err(e) => return io_error(&e, path),
        };
        let content_type = content_type(&name);

        if let Some(code) = check_not_modified(req.headers(), &info) {
            let mut resp = status(code);
            info.validators(resp.headers_mut());
            return resp;
        }

        // Choose the bytes to send before loading anything.
        let mut range = match requested_range(req.headers(), &info) {
            RangeDecision::Full => None,
            RangeDecision::Partial(start, end) => Some((start, end)),
            RangeDecision::Unsatisfiable => {
                let mut resp = status(StatusCode::RANGE_NOT_SATISFIABLE);
                set(
                    resp.headers_mut(),
                    header::CONTENT_RANGE,
                    format!("bytes */{}", info.len),
                );
                resp.headers_mut()
                    .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
                return resp;
            }
        };

        let (info, body) = if head {
            (info, Body::empty())
        } else if info.len <= self.cache_max_file_size {
            match self.load_small(canonical, info.clone()).await {
                Ok((now, bytes)) => {
                    if now != info {
                        // Changed since the stat: the range and validators
                        // were for the old version, so send the new one whole.
                        range = None;
                    }
                    let body = match range {
                        Some((start, end)) => bytes.slice(start as usize..=end as usize),
                        None => bytes,
                    };
                    (now, Body::full(body))
                }
                Err(e) => return io_error(&e, path),
            }
        } else {
            let (start, count) = match range {
                Some((start, end)) => (start, end - start + 1),
                None => (0, info.len),
            };
            match blocking(move || open_regular(&canonical)).await {
                Ok((file, meta)) => {
                    let now = FileInfo::from_metadata(&meta);
                    if now != info {
                        // Changed between the stat and the open: answer for the
                        // new version, in full.
                        let body = FileBody::new(file, 0, now.len, self.chunk_size);
                        return full_response(&now, content_type, Body::new(body), now.len);
                    }
                    let body = FileBody::new(file, start, count, self.chunk_size);
                    (info, Body::new(body))
                }
                Err(e) => return io_error(&e, path),
            }
        };

        match range {
            Some((start, end)) => {
                let mut resp = full_response(&info, content_type, body, end - start + 1);
                *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
                set(
                    resp.headers_mut(),
                    header::CONTENT_RANGE,
                    format!("bytes {start}-{end}/{}", info.len),
                );
                resp
            }
            _ => full_response(&info, content_type, body, info.len),
        }
    }

    /// The contents of a small file: from the cache when its size, mtime and
    /// inode still match, otherwise read (and cached when it fits).
    async fn load_small(
        &self,
        canonical: PathBuf,
        info: FileInfo,
    ) -> io::Result<(FileInfo, Bytes)> {
        if let Some(bytes) = self.cache.borrow().get(&canonical, &info) {
            return Ok((info, bytes));
        }
        let path = canonical.clone();
        let limit = self.cache_max_file_size;
        let (meta, bytes) = blocking(move || read_small(&path, limit)).await?;
        let mut now = FileInfo::from_metadata(&meta);
        if now.len == bytes.len() as u64 {
            self.cache
                .borrow_mut()
                .insert(canonical, now.clone(), bytes.clone());
        } else {
            // Written to while we read it: serve what we read, keep nothing.
            now.len = bytes.len() as u64;
        }
        Ok((now, bytes))
    }
}

/// A file's identity and validators, from its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
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

    fn validators(&self, headers: &mut HeaderMap) {
        set(headers, header::ETAG, self.etag());
        set(headers, header::LAST_MODIFIED, self.last_modified());
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

struct Cache {
    entries: HashMap<PathBuf, Entry>,
    /// Insertion order for eviction: (path, generation). Stale pairs (the
    /// entry was replaced or removed) are skipped.
    order: VecDeque<(PathBuf, u64)>,
    total: u64,
    capacity: u64,
    generation: u64,
}

struct Entry {
    info: FileInfo,
    bytes: Bytes,
    generation: u64,
}

impl Cache {
    fn new(capacity: u64) -> Self {
        Cache {
            entries: HashMap::new(),
            order: VecDeque::new(),
            total: 0,
            capacity,
            generation: 0,
        }
    }

    fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.evict_until(0);
    }

    fn get(&self, path: &Path, info: &FileInfo) -> Option<Bytes> {
        let entry = self.entries.get(path)?;
        (entry.info == *info).then(|| entry.bytes.clone())
    }

    fn cost(bytes: &Bytes) -> u64 {
        bytes.len() as u64 + ENTRY_OVERHEAD
    }

    fn insert(&mut self, path: PathBuf, info: FileInfo, bytes: Bytes) {
        self.remove(&path);
        let cost = Self::cost(&bytes);
        if cost > self.capacity {
            return;
        }
        self.evict_until(cost);
        self.generation += 1;
        let generation = self.generation;
        self.total += cost;
        self.order.push_back((path.clone(), generation));
        self.entries.insert(
            path,
            Entry {
                info,
                bytes,
                generation,
            },
        );
        // Keep the queue from filling up with stale pairs.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(p, g)| entries.get(p).is_some_and(|e| e.generation == *g));
        }
    }

    fn remove(&mut self, path: &Path) {
        if let Some(old) = self.entries.remove(path) {
            self.total -= Self::cost(&old.bytes);
        }
    }

    /// Evicts the oldest entries until `extra` more bytes fit.
    fn evict_until(&mut self, extra: u64) {
        while self.total + extra > self.capacity {
            let Some((path, generation)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&path)
                .is_some_and(|e| e.generation == generation)
            {
                self.remove(&path);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Streaming body

/// A byte range of a file, read in chunks on the blocking pool, one chunk in
/// flight at a time. Dropping it stops reading; the file closes once the read
/// in flight (if any) finishes.
struct FileBody {
    file: Arc<std::fs::File>,
    pos: u64,
    remaining: u64,
    chunk_size: usize,
    pending: Option<JoinHandle<io::Result<Bytes>>>,
}

impl FileBody {
    fn new(file: std::fs::File, start: u64, count: u64, chunk_size: usize) -> Self {
        FileBody {
            file: Arc::new(file),
            pos: start,
            remaining: count,
            chunk_size,
            pending: None,
        }
    }
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(pending) = &mut this.pending {
                let result = ready!(Pin::new(pending).poll(cx));
                this.pending = None;
                let chunk = match result {
                    Ok(Ok(chunk)) => chunk,
                    Ok(Err(e)) => {
                        this.remaining = 0;
                        return Poll::Ready(Some(Err(e)));
                    }
                    Err(e) => {
                        this.remaining = 0;
                        return Poll::Ready(Some(Err(io::Error::other(e))));
                    }
                };
                this.pos += chunk.len() as u64;
                this.remaining -= chunk.len() as u64;
                return Poll::Ready(Some(Ok(Frame::data(chunk))));
            }
            if this.remaining == 0 {
                return Poll::Ready(None);
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                this.remaining = 0;
                return Poll::Ready(Some(Err(io::Error::other(
                    "static file body polled outside a tokio runtime",
                ))));
            };
            let len = this.remaining.min(this.chunk_size as u64) as usize;
            let file = this.file.clone();
            let pos = this.pos;
            this.pending = Some(runtime.spawn_blocking(move || {
                let mut buf = vec![0; len];
                // A file truncated while streaming fails here (UnexpectedEof)
                // rather than sending less than Content-Length promised.
                file.read_exact_at(&mut buf, pos)?;
                Ok(Bytes::from(buf))
            }));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0 && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

// ---------------------------------------------------------------------------
// HTTP semantics

/// `304` when the request's validators match the file, per RFC 9110 §13.2.2:
/// `If-None-Match` first, `If-Modified-Since` only without it.
fn check_not_modified(headers: &HeaderMap, info: &FileInfo) -> Option<StatusCode> {
    if let Some(value) = headers.get(header::IF_NONE_MATCH) {
        let value = value.to_str().ok()?;
        let etag = info.etag();
        let matched = value.trim() == "*" || value.split(',').any(|tag| weak_eq(tag.trim(), &etag));
        return matched.then_some(StatusCode::NOT_MODIFIED);
    }
    let since = headers.get(header::IF_MODIFIED_SINCE)?.to_str().ok()?;
    let since = httpdate::parse_http_date(since).ok()?;
    (info.modified() <= since).then_some(StatusCode::NOT_MODIFIED)
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
fn requested_range(headers: &HeaderMap, info: &FileInfo) -> RangeDecision {
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
            if_range == info.etag()
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

/// A `200` (the caller may change the status) with all the file's headers.
fn full_response(
    info: &FileInfo,
    content_type: HeaderValue,
    body: Body,
    content_length: u64,
) -> Response<Body> {
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(content_length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    info.validators(headers);
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

#[cfg(test)]
mod tests {
    use super::*;
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
            let files = dir.files();
            assert_eq!(fetch(&files, "/a.txt").await.1, b"first version");
            let canonical = std::fs::canonicalize(&path).unwrap();
            assert!(files.cache.borrow().entries.contains_key(&canonical));

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
        run(async {
            let files = dir
                .files()
                .cache_max_total_size(3 * (1000 + ENTRY_OVERHEAD));
            for round in 0..2 {
                for i in 0..10u8 {
                    let (status, bytes) = fetch(&files, &format!("/{i}.bin")).await;
                    assert_eq!((status, bytes), (StatusCode::OK, vec![i; 1000]), "{round}");
                    let cache = files.cache.borrow();
                    assert!(cache.total <= cache.capacity);
                    assert!(cache.entries.len() <= 3);
                    assert!(cache.order.len() <= 2 * cache.entries.len() + 64);
                }
            }
            // Too big for the whole cache: served, not kept.
            let files = dir.files().cache_max_total_size(10);
            assert_eq!(fetch(&files, "/1.bin").await.1, vec![1; 1000]);
            assert!(files.cache.borrow().entries.is_empty());
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

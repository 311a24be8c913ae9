//! Static files under a root directory: [`StaticFiles`].
//!
//! Every web application ends up serving a directory of assets (CSS, scripts,
//! images, downloads). Doing that correctly is fiddly and security-sensitive:
//! the URL path must never escape the root, browsers expect validators
//! (`ETag`, `Last-Modified`) and conditional requests (`304`), media players and
//! download managers expect byte ranges (`206`), and a large file must not be
//! loaded into memory. This module does all of that once, for Brisk's worker
//! model: a [`StaticFiles`] is cheap to clone (an `Arc` inside) and each worker
//! process has its own, so its in-memory cache is only ever used by one thread
//! (it sits behind a lock all the same, uncontended, so that a `StaticFiles`
//! is `Send` and `Sync` and nests in an axum `Router`).
//!
//! Two ways in: [`StaticFiles::serve`], called from a handler with the path
//! below the mount point, or `StaticFiles` as a `tower::Service`, nested
//! where it belongs:
//!
//! ```no_run
//! use brisk::http::static_files::StaticFiles;
//!
//! let files = StaticFiles::new("./public").expect("./public is a readable directory");
//! let app: axum::Router = axum::Router::new().nest_service("/static", files);
//! ```
//!
//! Either way, file bodies are sent with `sendfile(2)` on Brisk's own
//! HTTP/1.1 path (see [`StaticBody`] for how that survives a router).
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

mod cache;
mod conditional;
mod config;
mod lookup;
pub(crate) mod path;
mod precompressed;
mod range;
mod response;
mod service;
#[cfg(test)]
mod testing;
mod validators;

use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::file_body::Chunks;
use crate::http::accept_encoding::{compressible, vary_on_accept_encoding};
use crate::http::Body;
use cache::{Content, Entry, SharedCache};
use lookup::{blocking, lookup, open_regular, read_small, Lookup};
use path::{cache_key, normal_key, parse_path};
use response::{content_type, decide, finish, io_error, redirect_with_slash, respond_from, status};
pub use service::StaticBody;
use validators::{FileInfo, Validators};

/// Default for [`StaticFiles::cache_max_file_size`]: 2 MiB.
pub const DEFAULT_CACHE_MAX_FILE_SIZE: u64 = 2 * 1024 * 1024;
/// Default for [`StaticFiles::cache_max_total_size`]: 64 MiB.
pub const DEFAULT_CACHE_MAX_TOTAL_SIZE: u64 = 64 * 1024 * 1024;
/// Default for [`StaticFiles::chunk_size`]: 128 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = Chunks::DEFAULT.read;
/// Default for [`StaticFiles::sendfile_chunk_size`]: 2 MiB.
pub const DEFAULT_SENDFILE_CHUNK_SIZE: usize = Chunks::DEFAULT.sendfile;
/// Default for [`StaticFiles::revalidate_after`]: 1 second.
pub const DEFAULT_REVALIDATE_AFTER: Duration = Duration::from_secs(1);
/// Default for [`StaticFiles::sendfile_min_size`]: 32 KiB.
pub const DEFAULT_SENDFILE_MIN_SIZE: u64 = 32 * 1024;
/// Default for [`StaticFiles::cache_max_open_files`]: 128.
pub const DEFAULT_CACHE_MAX_OPEN_FILES: usize = 128;

/// Serves files under a root directory.
///
/// Cheap to clone (the cache is shared through an `Arc`). See the
/// [module documentation](self) for exactly what it answers. As a
/// `tower::Service` it answers each request for its whole path (nest it:
/// a router strips the mount point), with a [`StaticBody`].
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
    root: Arc<Path>,
    cache_max_file_size: u64,
    sendfile_min_size: u64,
    chunks: Chunks,
    allow_symlinks_outside_root: bool,
    revalidate_after: Duration,
    cache: Arc<SharedCache>,
    precompressed: bool,
    missing: Arc<precompressed::Missing>,
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
            .field("precompressed", &self.precompressed)
            .finish_non_exhaustive()
    }
}

impl StaticFiles {
    /// Answers `req` for `path`: the URL path below the mount point, still
    /// percent-encoded, e.g. `"/css/site.css"` for a request to
    /// `"/static/css/site.css"` mounted at `"/static"`.
    ///
    /// Never fails: every problem is a status code (see the
    /// [module documentation](self)).
    pub async fn serve<B>(&self, req: &Request<B>, path: &str) -> Response<Body> {
        self.answer(req, path, false).await.map(Body::from)
    }

    /// [`serve`](Self::serve), with a body that is `Send`; `relative_redirect`
    /// for a `Location` that does not need the mount point. Sends a precompressed sibling
    /// when there is one the client accepts (see [`precompressed`](Self::precompressed)).
    async fn answer<B>(
        &self,
        req: &Request<B>,
        path: &str,
        relative_redirect: bool,
    ) -> Response<StaticBody> {
        // The query (`/app.js?v=2`) names no other file.
        let bare = path.split_once('?').map_or(path, |(bare, _)| bare);
        let compresses =
            (mime_guess::from_path(bare).first_raw()).is_some_and(|t| compressible(t.as_bytes()));
        if !self.precompressed || bare.ends_with('/') || !compresses {
            return self.answer_file(req, path, relative_redirect).await;
        }
        let accept = req.headers().get(header::ACCEPT_ENCODING);
        for encoding in precompressed::candidates(accept) {
            let sibling = format!("{bare}{}", precompressed::suffix(encoding));
            if self.missing.recently(&sibling, self.revalidate_after) {
                continue;
            }
            let mut resp = self.answer_file(req, &sibling, relative_redirect).await;
            let status = resp.status();
            let found = status.is_success()
                || status == StatusCode::NOT_MODIFIED
                || status == StatusCode::RANGE_NOT_SATISFIABLE;
            if !found {
                // Missing, a folder, unreadable: the original answers instead.
                self.missing.insert(sibling);
                continue;
            }
            let headers = resp.headers_mut();
            if headers.contains_key(header::CONTENT_TYPE) {
                headers.insert(header::CONTENT_TYPE, content_type(Path::new(bare)));
            }
            headers.insert(
                header::CONTENT_ENCODING,
                HeaderValue::from_static(encoding.token()),
            );
            vary_on_accept_encoding(headers);
            return resp;
        }
        let mut resp = self.answer_file(req, path, relative_redirect).await;
        if resp.status().is_success() || resp.status() == StatusCode::NOT_MODIFIED {
            vary_on_accept_encoding(resp.headers_mut());
        }
        resp
    }

    /// The file at `path` (see [`answer`](Self::answer)).
    async fn answer_file<B>(
        &self,
        req: &Request<B>,
        path: &str,
        relative_redirect: bool,
    ) -> Response<StaticBody> {
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
                    Ok(Lookup::Redirect) => redirect_with_slash(req, relative_redirect),
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
            (validators, StaticBody::empty())
        } else {
            let loaded = if info.len <= self.cache_max_file_size {
                self.load(&key, canonical, &content_type, checked, info.len)
                    .await
            } else {
                let beneath = self.beneath();
                blocking(move || open_regular(&canonical, beneath.as_deref()))
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
    fn serve_fresh<B>(
        &self,
        req: &Request<B>,
        key: &[u8],
        head: bool,
    ) -> Option<Response<StaticBody>> {
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

    /// The root a file must be opened beneath (unless symlinks may lead outside it).
    fn beneath(&self) -> Option<PathBuf> {
        (!self.allow_symlinks_outside_root).then(|| self.root.to_path_buf())
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
        let beneath = self.beneath();
        let (mut now, content) = if len >= self.sendfile_min_size {
            let (file, meta) = blocking(move || open_regular(&path, beneath.as_deref())).await?;
            let now = FileInfo::from_metadata(&meta);
            (now, Content::File(Arc::new(file)))
        } else {
            let (meta, bytes) =
                blocking(move || read_small(&path, limit, beneath.as_deref())).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::static_files::testing::*;
    use crate::http::testing::{digest, noise};
    use http_body_util::BodyExt;

    #[test]
    fn a_precompressed_sibling_is_sent_to_clients_that_accept_it() {
        let dir = TempDir::new();
        dir.write("app.js", b"plain javascript");
        dir.write("app.js.br", b"BROTLI");
        dir.write("app.js.gz", b"GZIP");
        dir.write("style.css", b"plain css");
        dir.write("style.css.gz", b"GZIPPED CSS");
        dir.write("only.txt", b"no siblings");
        dir.write("logo.png", b"PNG");
        dir.write("logo.png.gz", b"should not be used");
        run(async {
            let files = dir.files();
            let ask = |accept: &'static str, path: &'static str| {
                let files = files.clone();
                async move {
                    let resp = files
                        .serve(&get(&[("accept-encoding", accept)]), path)
                        .await;
                    let enc = header(&resp, "content-encoding").to_string();
                    let ty = header(&resp, "content-type").to_string();
                    let vary = header(&resp, "vary").to_string();
                    (enc, ty, vary, body(resp).await)
                }
            };
            let (enc, ty, vary, bytes) = ask("gzip, br", "/app.js").await;
            assert_eq!((enc.as_str(), bytes.as_slice()), ("br", &b"BROTLI"[..]));
            assert!(ty.contains("javascript"), "{ty}");
            assert_eq!(vary, "accept-encoding");
            let (enc, _, _, bytes) = ask("gzip", "/app.js").await;
            assert_eq!((enc.as_str(), bytes.as_slice()), ("gzip", &b"GZIP"[..]));
            // br preferred but missing: the gzip sibling.
            let (enc, ty, _, bytes) = ask("br, gzip", "/style.css").await;
            assert_eq!(
                (enc.as_str(), bytes.as_slice()),
                ("gzip", &b"GZIPPED CSS"[..])
            );
            assert!(ty.starts_with("text/css"), "{ty}");
            // No sibling, or not accepted: the file itself, still varying.
            let (enc, _, vary, bytes) = ask("br, gzip", "/only.txt").await;
            assert_eq!((enc.as_str(), bytes.as_slice()), ("", &b"no siblings"[..]));
            assert_eq!(vary, "accept-encoding");
            let (enc, _, _, bytes) = ask("identity", "/app.js").await;
            assert_eq!(
                (enc.as_str(), bytes.as_slice()),
                ("", &b"plain javascript"[..])
            );
            // Images are compressed already: no sibling is looked for.
            let (enc, _, vary, bytes) = ask("gzip", "/logo.png").await;
            assert_eq!(
                (enc.as_str(), vary.as_str(), bytes.as_slice()),
                ("", "", &b"PNG"[..])
            );
            // A sibling that appears is found after the next check.
            dir.write("only.txt.gz", b"LATE");
            let files = files.clone().revalidate_after(std::time::Duration::ZERO);
            let resp = files
                .serve(&get(&[("accept-encoding", "gzip")]), "/only.txt")
                .await;
            assert_eq!(header(&resp, "content-encoding"), "gzip");
            // Switched off: never.
            let off = files.precompressed(false);
            let resp = off
                .serve(&get(&[("accept-encoding", "br")]), "/app.js")
                .await;
            assert_eq!(body(resp).await, b"plain javascript");
        });
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
}

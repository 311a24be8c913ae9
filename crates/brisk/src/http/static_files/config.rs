//! Building a [`StaticFiles`]: its root and the settings of its cache, its chunks and its
//! symlink policy.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;

use super::cache::SharedCache;
use super::*;

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
            cache: Arc::new(SharedCache::new(DEFAULT_CACHE_MAX_TOTAL_SIZE)),
            precompressed: true,
            missing: Arc::default(),
        })
    }

    /// Whether a precompressed sibling (`app.js.br`, `app.js.gz`) is sent in place of a
    /// file of a type that compresses, to a client whose `Accept-Encoding` allows it
    /// (default on). The sibling is served like any file (validators, ranges, cache) with
    /// the original's `Content-Type`, `Content-Encoding` and `Vary: Accept-Encoding`.
    pub fn precompressed(mut self, on: bool) -> Self {
        self.precompressed = on;
        self
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::static_files::testing::*;

    #[test]
    fn new_rejects_missing_root_and_files() {
        let dir = TempDir::new();
        assert!(StaticFiles::new(dir.base.join("missing")).is_err());
        assert!(StaticFiles::new(dir.base.join("x")).is_err());
        assert!(StaticFiles::new(dir.root()).is_ok());
    }
}

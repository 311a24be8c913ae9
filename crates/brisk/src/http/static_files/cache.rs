//! The per-worker cache of small files, keyed by normalised request path: the bytes of files
//! under `sendfile_min_size` and the open file of larger ones, with their validators and
//! header values, bounded in bytes and in open files, oldest evicted first, and trusted
//! without touching the disk for `revalidate_after` after each check.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use http::HeaderValue;

use super::validators::{FileInfo, Validators};
use super::StaticBody;
use super::DEFAULT_CACHE_MAX_OPEN_FILES;
use crate::http::file_body::{Chunks, FileBody};

/// Bytes charged to the cache budget per entry on top of the file's size and
/// the lengths of its two paths: roughly the entry's own bookkeeping (its
/// cached header values and its slot in the map), so that many empty files
/// cannot grow the cache without limit.
pub(super) const ENTRY_OVERHEAD: u64 = 512;

/// What a cache entry (or a response being prepared) holds of a file.
#[derive(Clone)]
pub(super) enum Content {
    /// Its bytes.
    Bytes(Bytes),
    /// The open file, sent from the page cache.
    File(Arc<std::fs::File>),
}

impl Content {
    /// The body for `range` (`None`: all `len` bytes).
    pub(super) fn body(&self, range: Option<(u64, u64)>, len: u64, chunks: Chunks) -> StaticBody {
        let (start, count) = match range {
            Some((start, end)) => (start, end - start + 1),
            None => (0, len),
        };
        match self {
            Content::Bytes(bytes) => {
                StaticBody::full(bytes.slice(start as usize..(start + count) as usize))
            }
            Content::File(file) => {
                StaticBody::file(FileBody::new(file.clone(), start, count, chunks))
            }
        }
    }

    /// Bytes of memory it holds.
    pub(super) fn memory(&self) -> usize {
        match self {
            Content::Bytes(bytes) => bytes.len(),
            Content::File(_) => 0,
        }
    }
}

/// The cache of one [`StaticFiles`](super::StaticFiles) and its clones, behind a lock so
/// that a `StaticFiles` is `Send` and `Sync` (a `tower::Service` in an axum `Router` has to
/// be). On Brisk's workers one thread uses it, so the lock is never contended: taking it is
/// an atomic operation, not a wait. It is never held across an `.await`.
pub(super) struct SharedCache(Mutex<Cache>);

impl SharedCache {
    pub(super) fn new(capacity: u64) -> Self {
        SharedCache(Mutex::new(Cache::new(capacity)))
    }

    /// The cache, to read.
    pub(super) fn borrow(&self) -> MutexGuard<'_, Cache> {
        // Nothing panics while holding it; if something did, the cache is still consistent
        // enough to serve from (at worst an entry too many or too few).
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache, to change.
    pub(super) fn borrow_mut(&self) -> MutexGuard<'_, Cache> {
        self.borrow()
    }
}

/// Small files by request path ([`cache_key`](super::path::cache_key)). Two paths naming the same
/// file (a symlink, `dir/` and `dir/index.html`) are two entries, each
/// charged to the budget in full (and each holding its own open file).
pub(super) struct Cache {
    pub(super) entries: HashMap<Arc<[u8]>, Entry>,
    /// Insertion order for eviction: (key, generation). Stale pairs (the
    /// entry was replaced or removed) are skipped.
    pub(super) order: VecDeque<(Arc<[u8]>, u64)>,
    pub(super) total: u64,
    pub(super) capacity: u64,
    /// Entries holding an open file, and their bound.
    pub(super) open_files: usize,
    pub(super) max_open_files: usize,
    pub(super) generation: u64,
}

pub(super) struct Entry {
    /// The file the path resolved to. A check that resolves it elsewhere
    /// (a symlink changed) reloads.
    pub(super) canonical: PathBuf,
    /// Whether `canonical` is under the root; if not, only a `StaticFiles`
    /// with `allow_symlinks_outside_root` may serve it from here (clones
    /// share the cache, not that setting).
    pub(super) inside_root: bool,
    pub(super) validators: Validators,
    pub(super) content_type: HeaderValue,
    /// `Content-Length` of the whole file.
    pub(super) content_length: HeaderValue,
    pub(super) content: Content,
    /// When the disk was last looked at for this path (taken before the
    /// look).
    pub(super) checked: Instant,
    pub(super) generation: u64,
}

impl Entry {
    pub(super) fn new(
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
    pub(super) fn new(capacity: u64) -> Self {
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

    pub(super) fn set_max_open_files(&mut self, max: usize) {
        self.max_open_files = max;
        self.evict_files_until(0);
    }

    pub(super) fn set_capacity(&mut self, capacity: u64) {
        self.capacity = capacity;
        self.evict_until(0);
    }

    /// The entry for `key` if a check that started at `checked` found the
    /// same file (`canonical`) with the same size, mtime and inode; it is
    /// then trusted for another interval. A mismatching entry is removed.
    pub(super) fn revalidated(
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

    pub(super) fn insert(&mut self, key: &[u8], mut entry: Entry) {
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
        let key: Arc<[u8]> = Arc::from(key);
        self.order.push_back((key.clone(), self.generation));
        self.entries.insert(key, entry);
        // Keep the queue from filling up with stale pairs.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(k, g)| entries.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    pub(super) fn remove(&mut self, key: &[u8]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::static_files::testing::*;
    use crate::http::testing::noise;
    use std::os::unix::fs::FileExt;
    use std::time::Duration;

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
}

//! Validators: a file's identity (inode, size, modification time) and the strong `ETag` and
//! `Last-Modified` built from it, formatted once per file version so that a cache hit
//! formats nothing.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderValue};

/// A file's identity and validators, from its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileInfo {
    pub(super) len: u64,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) mtime_sec: i64,
    pub(super) mtime_nsec: i64,
}

impl FileInfo {
    pub(super) fn from_metadata(meta: &Metadata) -> Self {
        FileInfo {
            len: meta.len(),
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_sec: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }

    /// Strong ETag: inode, size and mtime in nanoseconds, in hex.
    pub(super) fn etag(&self) -> String {
        let nanos = i128::from(self.mtime_sec) * 1_000_000_000 + i128::from(self.mtime_nsec);
        format!("\"{:x}-{:x}-{:x}\"", self.ino, self.len, nanos)
    }

    /// Modification time truncated to whole seconds (HTTP dates' precision).
    pub(super) fn modified(&self) -> SystemTime {
        if self.mtime_sec >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.mtime_sec as u64)
        } else {
            UNIX_EPOCH
                .checked_sub(Duration::from_secs(self.mtime_sec.unsigned_abs()))
                .unwrap_or(UNIX_EPOCH)
        }
    }

    pub(super) fn last_modified(&self) -> String {
        httpdate::fmt_http_date(self.modified())
    }
}

/// A file's info with its `ETag` and `Last-Modified` header values, built
/// once (a cache entry keeps them, so a hit formats nothing).
#[derive(Clone, Debug)]
pub(super) struct Validators {
    pub(super) info: FileInfo,
    pub(super) etag: HeaderValue,
    pub(super) last_modified: HeaderValue,
}

impl Validators {
    pub(super) fn new(info: FileInfo) -> Self {
        Validators {
            info,
            etag: header_value(info.etag()),
            last_modified: header_value(info.last_modified()),
        }
    }

    pub(super) fn etag(&self) -> &str {
        self.etag.to_str().unwrap_or_default()
    }

    pub(super) fn insert_into(&self, headers: &mut HeaderMap) {
        headers.insert(header::ETAG, self.etag.clone());
        headers.insert(header::LAST_MODIFIED, self.last_modified.clone());
    }
}

/// A header value built from a string; one that is not valid (cannot happen
/// for the ETags and dates built here: printable ASCII) is empty rather than
/// a panic.
fn header_value(value: String) -> HeaderValue {
    HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

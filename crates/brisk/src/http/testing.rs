//! Helpers shared by the HTTP layer's unit tests: scratch directories, runtimes, and
//! pseudo-random file contents.

use std::future::Future;
use std::path::PathBuf;

/// A unique temporary directory, removed on drop.
pub(crate) struct ScratchDir {
    pub(crate) path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ScratchDir {
    /// A new empty directory whose name starts with `brisk-{prefix}-`.
    pub(crate) fn new(prefix: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("brisk-{prefix}-"))
            .tempdir()
            .unwrap();
        ScratchDir {
            path: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    /// Writes `contents` to `rel` under the directory (creating parents); returns its path.
    pub(crate) fn write(&self, rel: &str, contents: &[u8]) -> PathBuf {
        let path = self.path.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }
}

/// Runs `f` to completion on a current-thread runtime, inside a `LocalSet` (as on a worker).
pub(crate) fn run<F: Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

/// `len` pseudo-random bytes (xorshift): no period for a chunk read at
/// the wrong offset to hide in.
pub(crate) fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a: a short, comparable digest of a large body.
pub(crate) fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

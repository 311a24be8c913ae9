//! [`LogFile`]: a log file written by a thread of its own, so that the event loop never
//! waits for the disk.
//!
//! The worker appends lines to a buffer in memory (a short lock, never contended for long:
//! the writer thread only swaps the buffer out); the writer thread takes the buffer every
//! 100 ms, or sooner once 64 KiB are waiting, and writes it. When the disk falls behind and
//! the buffer holds its maximum, new lines are dropped and counted ([`dropped_lines`]), and
//! requests go on at full speed. [`reopen_all`] makes every log file of the process open
//! its path again (after logrotate moved it); [`flush_all`] writes what is waiting (at
//! exit).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Lines dropped by every log file of this process because their writer fell behind.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The log files of this process, for [`reopen_all`] and [`flush_all`].
static OPEN: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// How often the writer thread writes what is waiting.
const WRITE_EVERY: Duration = Duration::from_millis(100);
/// Waiting bytes that wake the writer thread before its time.
const WAKE_AT: usize = 64 << 10;

/// Lines dropped so far in this process because a log writer fell behind.
pub(crate) fn dropped_lines() -> u64 {
    DROPPED.load(Relaxed)
}

/// Makes every log file of this process open its path again, from its next write on.
pub(crate) fn reopen_all() {
    for shared in live() {
        shared.reopen();
    }
}

/// Writes what every log file of this process holds, and waits until it is written.
pub(crate) fn flush_all() {
    for shared in live() {
        shared.flush();
    }
}

fn live() -> Vec<Arc<Shared>> {
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    open.retain(|w| w.strong_count() > 0);
    open.iter().filter_map(Weak::upgrade).collect()
}

/// A log file and its writer thread; cheap to clone. Dropping the last clone writes what is
/// waiting and ends the thread.
#[derive(Clone)]
pub(crate) struct LogFile {
    shared: Arc<Shared>,
    /// Shared by the clones alone: its drop is the last clone's.
    _closer: Arc<Closer>,
}

/// Writes what is waiting and ends the writer thread when dropped. A count of `shared`'s
/// references cannot tell the last clone: [`reopen_all`] and [`flush_all`] hold some too.
struct Closer(Arc<Shared>);

struct Shared {
    path: PathBuf,
    max_buffer: usize,
    state: Mutex<State>,
    wake: Condvar,
    /// Signalled by the writer after each write.
    written: Condvar,
    reopen: AtomicBool,
}

#[derive(Default)]
struct State {
    buffer: Vec<u8>,
    /// Buffers the writer has taken so far; the next take is number `taken + 1`.
    taken: u64,
    /// The number of the last taken buffer that is written, for [`Shared::flush`].
    written: u64,
    closing: bool,
}

impl LogFile {
    /// Opens (creates, appends to) `path` and starts its writer thread. At most
    /// `max_buffer` bytes wait in memory; lines past that are dropped.
    pub(crate) fn open(path: &Path, max_buffer: usize) -> std::io::Result<Self> {
        let file = open(path)?;
        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            max_buffer,
            state: Mutex::default(),
            wake: Condvar::new(),
            written: Condvar::new(),
            reopen: AtomicBool::new(false),
        });
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("brisk-log".into())
            .spawn(move || write_loop(&thread_shared, file))?;
        OPEN.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&shared));
        Ok(LogFile {
            _closer: Arc::new(Closer(shared.clone())),
            shared,
        })
    }

    /// Appends one line (`write` adds the text, this adds the newline). Returns false, and
    /// counts it, if the line was dropped because the buffer is full.
    pub(crate) fn line(&self, write: impl FnOnce(&mut Vec<u8>)) -> bool {
        let mut state = self.shared.lock();
        if state.buffer.len() >= self.shared.max_buffer {
            drop(state);
            DROPPED.fetch_add(1, Relaxed);
            return false;
        }
        write(&mut state.buffer);
        state.buffer.push(b'\n');
        if state.buffer.len() >= WAKE_AT {
            self.shared.wake.notify_one();
        }
        true
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.flush();
        self.0.lock().closing = true;
        self.0.wake.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the path again before the next write, and wakes the writer for it.
    fn reopen(&self) {
        self.reopen.store(true, Relaxed);
        self.wake.notify_one();
    }

    fn flush(&self) {
        let mut state = self.lock();
        // What is waiting goes with the next take; what the writer took already, with its
        // own. A write of an earlier take does not count (it may have been empty).
        let target = if state.buffer.is_empty() {
            state.taken
        } else {
            self.wake.notify_one();
            state.taken + 1
        };
        while state.written < target && !state.closing {
            let (next, timeout) = self
                .written
                .wait_timeout(state, Duration::from_secs(5))
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            if timeout.timed_out() {
                tracing::warn!(path = %self.path.display(), "the log writer did not write within 5 s; going on");
                return;
            }
        }
    }
}

/// Opens `path` to append to, creating it readable by its owner and group only (lines can
/// hold addresses, user agents and the app's own data).
fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

/// The writer thread: takes the buffer and writes it, until the log file is dropped.
fn write_loop(shared: &Shared, mut file: File) {
    let mut spare = Vec::new();
    loop {
        let mut state = shared.lock();
        if state.buffer.is_empty() && !state.closing {
            state = shared
                .wake
                .wait_timeout(state, WRITE_EVERY)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        std::mem::swap(&mut state.buffer, &mut spare);
        state.taken += 1;
        let take = state.taken;
        let closing = state.closing;
        drop(state);
        if shared.reopen.swap(false, Relaxed) {
            match open(&shared.path) {
                Ok(f) => file = f,
                Err(e) => {
                    tracing::error!(path = %shared.path.display(), error = %e, "cannot reopen the log file")
                }
            }
        }
        if !spare.is_empty() {
            if let Err(e) = file.write_all(&spare) {
                tracing::error!(path = %shared.path.display(), error = %e, "cannot write the log file");
            }
            spare.clear();
        }
        let mut state = shared.lock();
        state.written = take;
        shared.written.notify_all();
        if closing && state.buffer.is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_the_file_and_a_reopen_follows_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = LogFile::open(&path, 1 << 20).unwrap();
        assert!(log.line(|b| b.extend_from_slice(b"one")));
        assert!(log.line(|b| b.extend_from_slice(b"two")));
        flush_all();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");

        // logrotate moves the file; lines keep going to it until the reopen.
        let rotated = dir.path().join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.line(|b| b.extend_from_slice(b"three"));
        flush_all();
        reopen_all();
        log.line(|b| b.extend_from_slice(b"four"));
        flush_all();
        assert_eq!(
            std::fs::read_to_string(&rotated).unwrap(),
            "one\ntwo\nthree\n"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "four\n");

        // Dropping the last handle writes what is waiting.
        log.line(|b| b.extend_from_slice(b"five"));
        drop(log);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "four\nfive\n");
    }

    #[test]
    fn a_flush_waits_for_its_line_not_for_a_write_already_under_way() {
        // A reopen wakes the writer with nothing to write; the line that follows must not
        // be taken as written when that empty write ends (CI saw exactly that).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.log");
        let log = LogFile::open(&path, 1 << 20).unwrap();
        let mut expected = String::new();
        for i in 0..2000 {
            // This log's alone: `reopen_all` would reach the other tests' logs too.
            log.shared.reopen();
            log.line(|b| b.extend_from_slice(i.to_string().as_bytes()));
            expected.push_str(&format!("{i}\n"));
            log.shared.flush();
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                expected,
                "line {i}"
            );
        }
    }

    #[test]
    fn the_last_handle_writes_its_lines_while_flush_all_holds_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("last.log");
        let log = LogFile::open(&path, 1 << 20).unwrap();
        let clone = log.clone();
        log.line(|b| b.extend_from_slice(b"last"));
        drop(log);
        // What `flush_all` and `reopen_all` hold while they run.
        let held = live();
        drop(clone);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "last\n");
        drop(held);
    }

    #[test]
    fn a_full_buffer_drops_and_counts_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slow.log");
        // Room for one line: the second is dropped unless the writer took the first in
        // between, so the buffer is filled under its lock first.
        let log = LogFile::open(&path, 8).unwrap();
        let before = dropped_lines();
        let mut state = log.shared.lock();
        state.buffer.extend_from_slice(b"12345678");
        drop(state);
        let mut dropped = 0;
        for _ in 0..1000 {
            if !log.line(|b| b.extend_from_slice(b"line")) {
                dropped += 1;
            }
        }
        assert!(dropped > 0, "a buffer of 8 bytes took 1000 lines");
        assert!(dropped_lines() >= before + dropped);
    }
}

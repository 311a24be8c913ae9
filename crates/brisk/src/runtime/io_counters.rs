//! [`WorkerIo`]: byte counters and a coarse clock for all the connections of one worker whose
//! I/O must be `Send` (hyper requires it, for upgrades), although a worker never leaves its
//! thread; so they are atomics, unlike the rest of [`Stats`](crate::stats::Stats).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Counters shared by a worker's hyper connections.
#[derive(Debug)]
pub(crate) struct WorkerIo {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub started: Instant,
    /// Milliseconds since `started`, as of the last [`tick`](Self::tick): reads and writes
    /// stamp activity with it instead of reading the clock every time.
    now_ms: AtomicU64,
}

impl WorkerIo {
    pub(crate) fn new() -> Self {
        WorkerIo {
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            started: Instant::now(),
            now_ms: AtomicU64::new(0),
        }
    }

    /// Advances the coarse clock; returns the time in milliseconds since the worker started.
    pub(crate) fn tick(&self) -> u64 {
        let now = self.started.elapsed().as_millis() as u64;
        self.now_ms.store(now, Relaxed);
        now
    }

    /// The coarse clock: milliseconds since the worker started, as of the last tick.
    pub(crate) fn now_ms(&self) -> u64 {
        self.now_ms.load(Relaxed)
    }
}

//! What a worker counts, and the read-only snapshots of it: [`WorkerStatus`] (a row of
//! `status`; [`WorkerStatus::current`] takes one on the worker running the caller) and
//! [`ConnectionInfo`] (a row of `connections`).
//!
//! The live counters are plain `Cell`s private to the crate: a worker is single-threaded, so
//! counting costs one add.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

/// Live counters of one worker process.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Connections open now.
    pub(crate) connections: Cell<u64>,
    /// Connections accepted since the worker started.
    pub(crate) accepted: Cell<u64>,
    /// Messages decoded and handed to `on_message` (Workerman's `total_request`).
    pub(crate) total_request: Cell<u64>,
    /// Handler errors and panics (Workerman's `throw_exception`).
    pub(crate) throw_exception: Cell<u64>,
    /// Connections closed for breaking the protocol or the max package size.
    pub(crate) rejected: Cell<u64>,
    /// Times a connection's send buffer filled up.
    pub(crate) buffer_full: Cell<u64>,
    /// Times accepting paused at the max connections.
    pub(crate) accept_paused: Cell<u64>,
    /// Query-cache lookups answered from the cache.
    pub(crate) cache_hits: Cell<u64>,
    /// Query-cache lookups that went to the database.
    pub(crate) cache_misses: Cell<u64>,
    /// Bytes read from peers.
    pub(crate) bytes_in: Cell<u64>,
    /// Bytes written to peers.
    pub(crate) bytes_out: Cell<u64>,
}

impl Stats {
    /// Adds `n` to a counter.
    #[inline]
    pub(crate) fn add(counter: &Cell<u64>, n: u64) {
        counter.set(counter.get().wrapping_add(n));
    }

    /// Subtracts one from a counter, never going under zero.
    #[inline]
    pub(crate) fn dec(counter: &Cell<u64>) {
        counter.set(counter.get().saturating_sub(1));
    }
}

/// One row of `status`: what a worker reports about itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The address of the server this worker serves.
    pub server: String,
    /// The worker's index within its server, from 0.
    pub worker: usize,
    /// Process id.
    pub pid: i32,
    /// Resident memory in KiB.
    pub rss_kib: u64,
    /// Connections open now.
    pub connections: u64,
    /// Connections accepted since start.
    pub accepted: u64,
    /// Messages handled (Workerman's `total_request`).
    pub total_request: u64,
    /// Handler errors and panics (Workerman's `throw_exception`).
    pub throw_exception: u64,
    /// Connections closed for protocol violations or oversized messages.
    pub rejected: u64,
    /// Send-buffer-full events.
    pub buffer_full: u64,
    /// Times the worker stopped accepting because it held its max connections.
    #[serde(default)]
    pub accept_paused: u64,
    /// Access-log lines dropped because the disk fell behind (see `brisk::http::access_log`).
    #[serde(default)]
    pub log_lines_dropped: u64,
    /// Query-cache lookups answered from the cache (`brisk::db::QueryCache`).
    #[serde(default)]
    pub cache_hits: u64,
    /// Query-cache lookups that went to the database.
    #[serde(default)]
    pub cache_misses: u64,
    /// Live timers.
    pub timers: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Seconds since the worker started.
    pub uptime_s: u64,
}

/// One row of `connections`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The address of the server the connection came in on.
    pub server: String,
    /// The worker index holding it.
    pub worker: usize,
    /// The worker's pid.
    pub pid: i32,
    /// Connection id, unique within its worker.
    pub id: u64,
    /// The peer's address.
    pub remote: String,
    /// Bytes received on it.
    pub bytes_in: u64,
    /// Bytes sent on it.
    pub bytes_out: u64,
    /// Seconds since it opened.
    pub age_s: u64,
}

/// Resident set size of this process in KiB, from `/proc/self/statm`.
pub fn self_rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .unwrap_or(4096)
        .max(1) as u64;
    pages * page / 1024
}

/// The counters of workers that have exited (replaced by a reload, or after a crash), which the
/// master keeps so that the app's totals never go backwards. A worker that stops in order reports
/// its final counters; one that is killed counts as of the master's last look at it (at most a
/// second old).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RetiredTotals {
    /// Workers that have exited.
    pub workers: u64,
    /// Connections they accepted.
    pub accepted: u64,
    /// Messages they handled.
    pub total_request: u64,
    /// Their handler errors and panics.
    pub throw_exception: u64,
    /// Connections they closed for protocol violations or oversized messages.
    pub rejected: u64,
    /// Their send-buffer-full events.
    pub buffer_full: u64,
    /// Bytes they received.
    pub bytes_in: u64,
    /// Bytes they sent.
    pub bytes_out: u64,
}

impl RetiredTotals {
    /// Adds the last counters of a worker that exited.
    pub(crate) fn add(&mut self, w: &WorkerStatus) {
        self.workers += 1;
        self.accepted += w.accepted;
        self.total_request += w.total_request;
        self.throw_exception += w.throw_exception;
        self.rejected += w.rejected;
        self.buffer_full += w.buffer_full;
        self.bytes_in += w.bytes_in;
        self.bytes_out += w.bytes_out;
    }
}

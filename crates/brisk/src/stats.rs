//! What a worker counts, and the read-only snapshots of it: [`WorkerStatus`] (a row of
//! `status`; [`WorkerStatus::current`] takes one on the worker running the caller) and
//! [`ConnectionInfo`] (a row of `connections`).
//!
//! The live counters are plain `Cell`s private to the crate: a worker is single-threaded, so
//! counting costs one add.

use std::cell::Cell;

use serde::{Deserialize, Serialize};

pub use crate::db_figures::DbFigures;
use crate::latency::{LatencyTotals, LatencyWindow, Recent};
use crate::response_counts::{self, ResponseCount, ResponseCounts};

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
    /// Messages not sent because the connection's send buffer was full.
    pub(crate) sends_dropped: Cell<u64>,
    /// Connections closed because their peer stopped reading (the send timeout).
    pub(crate) send_timeouts: Cell<u64>,
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
    /// How long HTTP handlers took to produce a response head.
    pub(crate) http_latency: Recent,
    /// How long WebSocket `on_message` callbacks took.
    pub(crate) ws_latency: Recent,
    /// How late the worker's 10 ms tick fired: the event loop's lag.
    pub(crate) loop_lag: Recent,
    /// HTTP responses by request method and status class.
    pub(crate) http_responses: ResponseCounts,
    /// WebSocket messages sent to peers (broadcasts aside).
    pub(crate) ws_sent: Cell<u64>,
    /// Broadcast frames handed to members of a group in this worker.
    pub(crate) broadcast_deliveries: Cell<u64>,
    /// Broadcasts not handed to the master for the other workers: its queue was full.
    pub(crate) broadcasts_dropped: Cell<u64>,
    /// WebSocket connections handed to a new worker, taken from an old one, and those of
    /// endpoints that survive reloads that could not be handed over (closed as a stop closes
    /// them).
    pub(crate) ws_handed_over: Cell<u64>,
    pub(crate) ws_resumed: Cell<u64>,
    pub(crate) ws_handover_skipped: Cell<u64>,
    /// Jobs this worker pushed to a queue.
    pub(crate) jobs_pushed: Cell<u64>,
    /// Jobs this worker ran to the end.
    pub(crate) jobs_done: Cell<u64>,
    /// Jobs this worker saw fail and put back for a retry.
    pub(crate) jobs_retried: Cell<u64>,
    /// Jobs this worker sent to the dead-letter list.
    pub(crate) jobs_dead: Cell<u64>,
    /// Jobs this worker is running now.
    pub(crate) jobs_running: Cell<u64>,
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
    /// Messages not sent because a connection's send buffer was full (a slow consumer's
    /// broadcasts, sends that failed with `BufferFull`).
    #[serde(default)]
    pub sends_dropped: u64,
    /// Connections closed because their queued bytes made no progress for the send timeout
    /// (a peer that stopped reading, whatever it still sent).
    #[serde(default)]
    pub send_timeouts: u64,
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
    /// Peak resident memory in KiB (`VmHWM`).
    #[serde(default)]
    pub rss_peak_kib: u64,
    /// HTTP requests answered since start (their response heads).
    #[serde(default)]
    pub http_requests: u64,
    /// HTTP handler latency over the last 10 complete seconds (to the response head).
    #[serde(default)]
    pub http_latency: LatencyWindow,
    /// WebSocket messages handled since start.
    #[serde(default)]
    pub ws_messages: u64,
    /// WebSocket `on_message` latency over the last 10 complete seconds.
    #[serde(default)]
    pub ws_latency: LatencyWindow,
    /// How late the worker's 10 ms tick fired over the last 10 complete seconds (event-loop
    /// lag; tokio's timer rounds up to the millisecond, so up to 1 ms of it is the timer's).
    #[serde(default)]
    pub loop_lag: LatencyWindow,
    /// HTTP responses since start by request method and status class.
    #[serde(default)]
    pub http_responses: Vec<ResponseCount>,
    /// HTTP handler latency since start (empty with the histograms off).
    #[serde(default)]
    pub http_duration: LatencyTotals,
    /// WebSocket messages sent since start (broadcasts aside).
    #[serde(default)]
    pub ws_sent: u64,
    /// Broadcast frames handed to members of a group in this worker since start.
    #[serde(default)]
    pub broadcast_deliveries: u64,
    /// Broadcasts this worker could not hand to the master (the master was not reading).
    #[serde(default)]
    pub broadcasts_dropped: u64,
    /// WebSocket connections moved through reloads since start.
    #[serde(default)]
    pub ws_handover: HandoverCounts,
    /// Queue jobs: pushed, done, retried, dead-lettered since start, and running now.
    #[serde(default)]
    pub jobs: JobCounts,
    /// History entries, presence counts and queue jobs refused from Redis since start: not
    /// sealed with the app's secret (forged, damaged, or another app's; see
    /// `App::cluster_secret`).
    #[serde(default)]
    pub redis_refused: u64,
    /// The app's own metrics (see [`crate::metrics`]) in this worker.
    #[serde(default)]
    pub app_metrics: Vec<crate::metrics::Sample>,
    /// Its database pools: connections now, waits and timeouts since start.
    #[serde(default)]
    pub db: DbFigures,
}

/// A worker's queue jobs (see `brisk::queue`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobCounts {
    /// Jobs pushed.
    pub pushed: u64,
    /// Jobs run to the end.
    pub done: u64,
    /// Failed runs put back for a retry.
    pub retried: u64,
    /// Jobs sent to the dead-letter list.
    pub dead: u64,
    /// Jobs running now (not added up in the retired totals).
    pub running: u64,
}

/// WebSocket connections of endpoints that survive reloads (`WsEndpoint::survive_reload`),
/// as they move from a stopping worker to its slot's new one.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HandoverCounts {
    /// Handed to the master for the new worker.
    pub handed_over: u64,
    /// Taken over from an old worker and served on.
    pub resumed: u64,
    /// Could not be handed over (a TLS session, a group member, data attached, a handler
    /// still running at the deadline…) or taken over: closed as a stop closes them.
    pub skipped: u64,
}

impl HandoverCounts {
    fn add(&mut self, o: &HandoverCounts) {
        self.handed_over += o.handed_over;
        self.resumed += o.resumed;
        self.skipped += o.skipped;
    }
}

impl JobCounts {
    fn add(&mut self, o: &JobCounts) {
        self.pushed += o.pushed;
        self.done += o.done;
        self.retried += o.retried;
        self.dead += o.dead;
    }
}

impl WorkerStatus {
    /// HTTP requests per second over the last 10 complete seconds (fewer in a worker's first
    /// 10 s; 0 in its first second).
    pub fn http_rate_recent(&self) -> f64 {
        let secs = self.uptime_s.min(crate::latency::WINDOW_S);
        self.http_latency.count() as f64 / secs.max(1) as f64
    }

    /// Messages (of every protocol) per second since start.
    pub fn rate_since_start(&self) -> f64 {
        self.total_request as f64 / self.uptime_s.max(1) as f64
    }

    /// Handler errors per message since start (Workerman's `throw_exception / total_request`).
    pub fn error_rate(&self) -> f64 {
        self.throw_exception as f64 / self.total_request.max(1) as f64
    }
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

/// Peak resident set size of this process in KiB (`VmHWM` in `/proc/self/status`).
pub fn self_rss_peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The system's load averages over 1, 5 and 15 minutes, from `/proc/loadavg`.
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text.split_whitespace().map(|v| v.parse().unwrap_or(0.0));
    [
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
    ]
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
    /// Messages they did not send because a send buffer was full.
    #[serde(default)]
    pub sends_dropped: u64,
    /// Connections they closed because the peer stopped reading (the send timeout).
    #[serde(default)]
    pub send_timeouts: u64,
    /// Bytes they received.
    pub bytes_in: u64,
    /// Bytes they sent.
    pub bytes_out: u64,
    /// Times they stopped accepting at their max connections.
    #[serde(default)]
    pub accept_paused: u64,
    /// Access-log lines they dropped.
    #[serde(default)]
    pub log_lines_dropped: u64,
    /// HTTP requests they answered.
    #[serde(default)]
    pub http_requests: u64,
    /// Their HTTP responses by request method and status class.
    #[serde(default)]
    pub http_responses: Vec<ResponseCount>,
    /// Their HTTP handler latency.
    #[serde(default)]
    pub http_duration: LatencyTotals,
    /// WebSocket messages they handled.
    #[serde(default)]
    pub ws_messages: u64,
    /// WebSocket messages they sent (broadcasts aside).
    #[serde(default)]
    pub ws_sent: u64,
    /// Broadcast frames they handed to group members.
    #[serde(default)]
    pub broadcast_deliveries: u64,
    /// Broadcasts they could not hand to the master.
    #[serde(default)]
    pub broadcasts_dropped: u64,
    /// WebSocket connections they handed over, took over, or could not hand over.
    #[serde(default)]
    pub ws_handover: HandoverCounts,
    /// Their queue jobs.
    #[serde(default)]
    pub jobs: JobCounts,
    /// Values they refused from Redis for a seal that did not match.
    #[serde(default)]
    pub redis_refused: u64,
    /// Their app counters and histograms, by series (gauges end with their worker).
    #[serde(default)]
    pub app_metrics: Vec<crate::metrics::Sample>,
    /// Their database waits and timeouts.
    #[serde(default)]
    pub db: DbFigures,
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
        self.sends_dropped += w.sends_dropped;
        self.send_timeouts += w.send_timeouts;
        self.redis_refused += w.redis_refused;
        self.bytes_in += w.bytes_in;
        self.bytes_out += w.bytes_out;
        self.accept_paused += w.accept_paused;
        self.log_lines_dropped += w.log_lines_dropped;
        self.http_requests += w.http_requests;
        response_counts::merge(&mut self.http_responses, &w.http_responses);
        self.http_duration.merge(&w.http_duration);
        self.ws_messages += w.ws_messages;
        self.ws_sent += w.ws_sent;
        self.broadcast_deliveries += w.broadcast_deliveries;
        self.broadcasts_dropped += w.broadcasts_dropped;
        self.ws_handover.add(&w.ws_handover);
        self.jobs.add(&w.jobs);
        self.db.add_counters(&w.db);
        for s in &w.app_metrics {
            if !matches!(s.value, crate::metrics::Value::Gauge(_)) {
                crate::metrics::merge_into(&mut self.app_metrics, s);
            }
        }
    }
}

/// The cluster bus's counters (`App::cluster`), as `status --json` shows them.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The Redis server's URL, passwords shown as `***`.
    pub url: String,
    /// Whether the subscription is connected now.
    pub connected: bool,
    /// Groups this instance holds members of (and is subscribed to).
    pub groups: usize,
    /// Broadcasts published for the other instances.
    pub published: u64,
    /// Broadcasts that could not be published (Redis down): they reached no other instance.
    pub publish_failed: u64,
    /// Broadcasts published on a second try, on a new connection (the first found the old
    /// one broken).
    pub publish_retried: u64,
    /// Broadcasts received from other instances and handed to this instance's workers.
    pub received: u64,
    /// Broadcasts of other instances missed while the subscription was cut off.
    pub lost: u64,
    /// Times the subscription connected again after losing Redis.
    pub reconnects: u64,
    /// Messages on the app's channels that were not delivered: a wrong HMAC (forged, or
    /// another app's secret), too old or repeated (replayed), or not text in UTF-8 or binary.
    pub rejected: u64,
    /// Why Redis could not be subscribed to or published on, last time it could not (a
    /// refused connection, a certificate not trusted…); cleared once subscribed.
    #[serde(default)]
    pub last_error: Option<String>,
}

//! Run reports: the JSON shapes and the wrk-like human rendering.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use crate::histogram::LatencySummary;
use crate::http::client::HttpConfig;
use crate::http::stats::{ErrorCounts, HttpStats};
use crate::units::{format_bytes, format_micros};
use crate::ws::stats::{WsFailures, WsStats};

/// The outcome of an HTTP load run.
#[derive(Clone, Debug, Serialize)]
pub struct HttpReport {
    /// Target URL.
    pub url: String,
    /// Connections used.
    pub connections: usize,
    /// Threads used.
    pub threads: usize,
    /// Requested constant rate, if any.
    pub target_rate: Option<f64>,
    /// Completed responses (any status).
    pub requests: u64,
    /// Errors by kind.
    pub errors: ErrorCounts,
    /// Completed responses per second.
    pub rps: f64,
    /// Wall-clock length of the run, in seconds.
    pub duration_s: f64,
    /// Bytes read from sockets.
    pub bytes_read: u64,
    /// Bytes read per second.
    pub transfer_bps: f64,
    /// TCP connections opened.
    pub connections_opened: u64,
    /// Latency percentiles in microseconds.
    pub latency_us: LatencySummary,
}

impl HttpReport {
    /// Builds the report from merged statistics.
    pub fn new(config: &HttpConfig, threads: usize, elapsed: Duration, stats: &HttpStats) -> Self {
        let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        Self {
            url: config.target.url(),
            connections: config.connections,
            threads,
            target_rate: config.rate,
            requests: stats.requests,
            errors: stats.errors,
            rps: stats.requests as f64 / secs,
            duration_s: elapsed.as_secs_f64(),
            bytes_read: stats.bytes_read,
            transfer_bps: stats.bytes_read as f64 / secs,
            connections_opened: stats.connections_opened,
            latency_us: stats.latency.summary(),
        }
    }

    /// Renders the report like wrk does.
    pub fn render_human(&self) -> String {
        let mut out = String::new();
        let l = &self.latency_us;
        let _ = writeln!(out, "Running {:.2}s test @ {}", self.duration_s, self.url);
        let _ = writeln!(
            out,
            "  {} threads and {} connections",
            self.threads, self.connections
        );
        if let Some(rate) = self.target_rate {
            let _ = writeln!(
                out,
                "  constant rate {rate:.0} req/s (latency from intended send time)"
            );
        }
        let _ = writeln!(out, "  Latency     Mean      Stdev     Max");
        let _ = writeln!(
            out,
            "            {:<10}{:<10}{:<10}",
            format_micros(l.mean),
            format_micros(l.stdev),
            format_micros(l.max as f64)
        );
        render_distribution(&mut out, l);
        let _ = writeln!(
            out,
            "  {} requests in {:.2}s, {} read, {} connections opened",
            self.requests,
            self.duration_s,
            format_bytes(self.bytes_read as f64),
            self.connections_opened
        );
        let e = &self.errors;
        if e.total > 0 {
            let _ = writeln!(
                out,
                "  Errors: connect {}, read {}, write {}, timeout {}, status {}, parse {} (total {})",
                e.connect, e.read, e.write, e.timeout, e.status, e.parse, e.total
            );
        }
        let _ = writeln!(out, "Requests/sec: {:>12.2}", self.rps);
        let _ = writeln!(out, "Transfer/sec: {:>12}", format_bytes(self.transfer_bps));
        out
    }
}

fn render_distribution(out: &mut String, l: &LatencySummary) {
    let _ = writeln!(out, "  Latency Distribution");
    for (label, value) in [
        ("50%", l.p50),
        ("75%", l.p75),
        ("90%", l.p90),
        ("95%", l.p95),
        ("99%", l.p99),
        ("99.9%", l.p999),
    ] {
        let _ = writeln!(out, "  {label:>7}  {}", format_micros(value as f64));
    }
}

/// Connection outcome of a WebSocket run.
#[derive(Clone, Debug, Serialize)]
pub struct WsConnectionReport {
    /// Connection attempts made (receivers only, not the broadcast sender).
    pub attempted: u64,
    /// Attempts that completed the WebSocket handshake.
    pub succeeded: u64,
    /// Failures by kind (including drops during the hold).
    pub failed: WsFailures,
    /// Successful connections per second during the ramp.
    pub connect_rate: f64,
    /// Time from the first attempt to the last completed attempt, seconds.
    pub ramp_s: f64,
    /// Connections still open when the run ended.
    pub open_at_end: u64,
}

/// Message outcome of a WebSocket echo or broadcast run.
#[derive(Clone, Debug, Serialize)]
pub struct WsMessageReport {
    /// Messages sent (echo: by all connections; broadcast: by the sender).
    pub sent: u64,
    /// Messages expected to arrive (echo: sent; broadcast: sent × receivers).
    pub expected: u64,
    /// Distinct messages received (each (connection, seq) once).
    pub delivered: u64,
    /// Messages received more than once.
    pub duplicates: u64,
    /// Messages a connection received after one sent later (broadcast: from the one
    /// sender; echo: its own).
    pub reordered: u64,
    /// Delivered messages per second over the message phase.
    pub delivered_per_sec: f64,
    /// Length of the message phase, seconds.
    pub phase_s: f64,
    /// Broadcast: whether the sender connection opened.
    pub sender_connected: Option<bool>,
}

/// The outcome of a WebSocket load run.
#[derive(Clone, Debug, Serialize)]
pub struct WsReport {
    /// Target URL.
    pub url: String,
    /// `hold`, `echo` or `broadcast`.
    pub mode: String,
    /// Wall-clock length of the run, in seconds.
    pub duration_s: f64,
    /// Connection outcome.
    pub connections: WsConnectionReport,
    /// Message outcome (absent in hold mode).
    pub messages: Option<WsMessageReport>,
    /// Echo round-trip or broadcast delivery latency, microseconds.
    pub latency_us: LatencySummary,
}

impl WsReport {
    /// Builds the report from merged statistics.
    pub fn new(
        url: String,
        mode: &str,
        elapsed: Duration,
        stats: &WsStats,
        messages: Option<WsMessageReport>,
    ) -> Self {
        let ramp_s = stats.ramp.as_secs_f64();
        Self {
            url,
            mode: mode.to_string(),
            duration_s: elapsed.as_secs_f64(),
            connections: WsConnectionReport {
                attempted: stats.attempted,
                succeeded: stats.succeeded,
                failed: stats.failures,
                connect_rate: if ramp_s > 0.0 {
                    stats.succeeded as f64 / ramp_s
                } else {
                    0.0
                },
                ramp_s,
                open_at_end: stats.open_at_end,
            },
            messages,
            latency_us: stats.latency.summary(),
        }
    }

    /// Renders the report for people.
    pub fn render_human(&self) -> String {
        let mut out = String::new();
        let c = &self.connections;
        let f = &c.failed;
        let _ = writeln!(
            out,
            "WebSocket {} test @ {} ({:.2}s)",
            self.mode, self.url, self.duration_s
        );
        let _ = writeln!(
            out,
            "  Connections: {} attempted, {} succeeded, {} open at end; {:.1} conn/s over {:.2}s",
            c.attempted, c.succeeded, c.open_at_end, c.connect_rate, c.ramp_s
        );
        if f.total > 0 {
            let _ = writeln!(
                out,
                "  Failures: connect {}, handshake {}, timeout {}, closed {} (total {})",
                f.connect, f.handshake, f.timeout, f.closed, f.total
            );
        }
        if let Some(m) = &self.messages {
            let _ = writeln!(
                out,
                "  Messages: {} sent, {} expected, {} delivered, {} duplicates, {} out of order \
                 in {:.2}s",
                m.sent, m.expected, m.delivered, m.duplicates, m.reordered, m.phase_s
            );
            let _ = writeln!(out, "Delivered/sec: {:>12.2}", m.delivered_per_sec);
            render_distribution(&mut out, &self.latency_us);
            let _ = writeln!(
                out,
                "  {:>7}  {}",
                "max",
                format_micros(self.latency_us.max as f64)
            );
        }
        out
    }
}

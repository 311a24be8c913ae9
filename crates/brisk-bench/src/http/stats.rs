//! Counters gathered by HTTP connections: completed requests, bytes read,
//! errors by kind and the latency histogram.

use serde::Serialize;

use crate::histogram::LatencyHistogram;

/// The kinds of per-request failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The TCP connection could not be established.
    Connect,
    /// Reading failed or the peer closed before the response was complete.
    Read,
    /// Writing the request failed.
    Write,
    /// The request did not complete within the per-request timeout.
    Timeout,
    /// The response status was 400 or above.
    Status,
    /// The response could not be framed.
    Parse,
}

/// Error counts by kind, plus their total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// Connection failures.
    pub connect: u64,
    /// Read failures.
    pub read: u64,
    /// Write failures.
    pub write: u64,
    /// Timeouts.
    pub timeout: u64,
    /// Responses with status >= 400.
    pub status: u64,
    /// Unframeable responses.
    pub parse: u64,
    /// Sum of all the above.
    pub total: u64,
}

impl ErrorCounts {
    /// Counts one error of `kind`.
    #[inline]
    pub fn add(&mut self, kind: ErrorKind) {
        let slot = match kind {
            ErrorKind::Connect => &mut self.connect,
            ErrorKind::Read => &mut self.read,
            ErrorKind::Write => &mut self.write,
            ErrorKind::Timeout => &mut self.timeout,
            ErrorKind::Status => &mut self.status,
            ErrorKind::Parse => &mut self.parse,
        };
        *slot += 1;
        self.total += 1;
    }

    /// Adds all counts of `other`.
    pub fn merge(&mut self, other: &ErrorCounts) {
        self.connect += other.connect;
        self.read += other.read;
        self.write += other.write;
        self.timeout += other.timeout;
        self.status += other.status;
        self.parse += other.parse;
        self.total += other.total;
    }
}

/// Everything one shard (thread) measured.
#[derive(Clone, Default)]
pub struct HttpStats {
    /// Completed responses, whatever their status.
    pub requests: u64,
    /// Bytes read from all sockets.
    pub bytes_read: u64,
    /// Errors by kind.
    pub errors: ErrorCounts,
    /// Latency of completed responses, in microseconds.
    pub latency: LatencyHistogram,
    /// TCP connections successfully opened.
    pub connections_opened: u64,
}

impl HttpStats {
    /// Adds everything `other` measured.
    pub fn merge(&mut self, other: &HttpStats) {
        self.requests += other.requests;
        self.bytes_read += other.bytes_read;
        self.errors.merge(&other.errors);
        self.latency.merge(&other.latency);
        self.connections_opened += other.connections_opened;
    }
}

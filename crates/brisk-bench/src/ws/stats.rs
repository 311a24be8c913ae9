//! Counters gathered by WebSocket connections.

use std::time::Duration;

use serde::Serialize;

use crate::histogram::LatencyHistogram;

/// The kinds of WebSocket connection failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsFailureKind {
    /// TCP connect (or source bind) failed.
    Connect,
    /// The WebSocket upgrade was refused or malformed.
    Handshake,
    /// Connect plus handshake exceeded the timeout.
    Timeout,
    /// The connection was dropped before the run ended.
    Closed,
}

/// Connection failures by kind, plus their total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WsFailures {
    /// TCP connect failures.
    pub connect: u64,
    /// Handshake failures.
    pub handshake: u64,
    /// Timeouts.
    pub timeout: u64,
    /// Connections dropped early.
    pub closed: u64,
    /// Sum of all the above.
    pub total: u64,
}

impl WsFailures {
    /// Counts one failure of `kind`.
    pub fn add(&mut self, kind: WsFailureKind) {
        match kind {
            WsFailureKind::Connect => self.connect += 1,
            WsFailureKind::Handshake => self.handshake += 1,
            WsFailureKind::Timeout => self.timeout += 1,
            WsFailureKind::Closed => self.closed += 1,
        }
        self.total += 1;
    }

    /// Adds all counts of `other`.
    pub fn merge(&mut self, other: &WsFailures) {
        self.connect += other.connect;
        self.handshake += other.handshake;
        self.timeout += other.timeout;
        self.closed += other.closed;
        self.total += other.total;
    }
}

/// Everything one shard measured.
#[derive(Clone, Default)]
pub struct WsStats {
    /// Connection attempts.
    pub attempted: u64,
    /// Successful handshakes.
    pub succeeded: u64,
    /// Failures by kind.
    pub failures: WsFailures,
    /// Connections open when the stop signal came.
    pub open_at_end: u64,
    /// Messages sent by these connections.
    pub sent: u64,
    /// Distinct messages received.
    pub delivered: u64,
    /// Repeated messages received.
    pub duplicates: u64,
    /// Messages received after one sent later (on the same connection).
    pub reordered: u64,
    /// Echo or delivery latency, microseconds.
    pub latency: LatencyHistogram,
    /// Ramp length (filled in by the coordinator).
    pub ramp: Duration,
}

impl WsStats {
    /// Adds everything `other` measured.
    pub fn merge(&mut self, other: &WsStats) {
        self.attempted += other.attempted;
        self.succeeded += other.succeeded;
        self.failures.merge(&other.failures);
        self.open_at_end += other.open_at_end;
        self.sent += other.sent;
        self.delivered += other.delivered;
        self.duplicates += other.duplicates;
        self.reordered += other.reordered;
        self.latency.merge(&other.latency);
    }
}

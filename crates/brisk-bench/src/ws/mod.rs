//! WebSocket load generation: holding many connections, echo latency and
//! broadcast fan-out delivery.

pub mod connection;
pub mod payload;
pub mod protocol;
pub mod run;
pub mod source;
pub mod stats;

use std::net::IpAddr;
use std::time::Duration;

use crate::target::Target;

pub use protocol::{WsProtocol, BRISK_CHANNEL, CHANNEL};
pub use run::run_ws;
pub use source::parse_source_ips;

/// What the connections do once open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsMode {
    /// Only open and hold the connections.
    Hold,
    /// Every connection sends timestamped messages and times their echo.
    Echo,
    /// One extra sender publishes; every held connection receives.
    Broadcast,
}

impl WsMode {
    /// The mode's name as used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            WsMode::Hold => "hold",
            WsMode::Echo => "echo",
            WsMode::Broadcast => "broadcast",
        }
    }
}

/// Parameters of one WebSocket load run.
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// The target all load connections open.
    pub target: Target,
    /// Number of load connections (receivers in broadcast mode).
    pub connections: usize,
    /// Connection attempts per second; `None` opens them all at once.
    pub ramp: Option<f64>,
    /// How long the message phase (or the hold) lasts once the ramp is done.
    pub hold: Duration,
    /// Threads (shards) the connections are spread over.
    pub threads: usize,
    /// Source addresses to bind client sockets to, used round-robin.
    pub source_ips: Vec<IpAddr>,
    /// Timeout for TCP connect plus WebSocket handshake.
    pub timeout: Duration,
    /// What the connections do.
    pub mode: WsMode,
    /// Messages per second: total over all connections (echo) or the
    /// sender's rate (broadcast).
    pub rate: f64,
    /// Message size in bytes (at least 16).
    pub size: usize,
    /// Broadcast: number of messages to publish (default: until `hold` ends).
    pub messages: Option<u64>,
    /// Broadcast: the URL the sender connects to (default: `target`).
    pub sender: Option<Target>,
    /// More targets the load connections are spread over, round robin with `target` (e.g.
    /// the other instances of a cluster).
    pub spread: Vec<Target>,
    /// What the connections speak over WebSocket.
    pub protocol: WsProtocol,
    /// How long the connections stay idle between the ramp and the message phase.
    pub settle: Duration,
    /// A file written (with the number of open connections) when the ramp is done and the
    /// settle time begins.
    pub ready_file: Option<std::path::PathBuf>,
    /// A file written (with the number of deliveries in it) when the message phase is over,
    /// before the connections close.
    pub done_file: Option<std::path::PathBuf>,
    /// Longest wait for outstanding messages after the last send.
    pub drain: Duration,
}

impl WsConfig {
    /// A configuration holding 10 connections on `target` for 10 seconds.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            connections: 10,
            ramp: None,
            hold: Duration::from_secs(10),
            threads: 1,
            source_ips: Vec::new(),
            timeout: Duration::from_secs(5),
            mode: WsMode::Hold,
            rate: 100.0,
            size: 64,
            messages: None,
            sender: None,
            spread: Vec::new(),
            protocol: WsProtocol::Plain,
            settle: Duration::ZERO,
            ready_file: None,
            done_file: None,
            drain: Duration::from_secs(2),
        }
    }
}

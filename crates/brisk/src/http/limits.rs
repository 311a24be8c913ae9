//! [`HttpLimits`]: the limits of an HTTP server, each with the status it answers when broken.

use std::time::Duration;

/// HTTP limits. The body limit is the server's max package size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request head (request line and headers) in bytes; over it: 431. Default 16 KiB
    /// (hyper's minimum is 8 KiB).
    pub max_header_bytes: usize,
    /// Most header lines in a request; over it: 431. Default 100.
    pub max_headers: usize,
    /// Time a client has to send a complete request head; then 408 and close (slowloris).
    /// Default 10 s.
    pub header_read_timeout: Duration,
    /// Time a client has to send a request body that a handler waits for, extended by a
    /// second for every [`min_body_rate`](Self::min_body_rate) bytes that arrive meanwhile;
    /// then 408 and close (a body that stops arriving, or trickles in). Default 30 s.
    pub body_read_timeout: Duration,
    /// Bytes a second that earn a slow upload more time (see
    /// [`body_read_timeout`](Self::body_read_timeout)); 0: none, the whole body must come
    /// within the timeout. Default 4096.
    pub min_body_rate: u64,
    /// A keep-alive connection idle this long is closed. Default 75 s.
    pub keep_alive_timeout: Duration,
    /// Close a connection after this many requests (`Connection: close` on the last).
    /// Default: no limit.
    pub max_requests_per_connection: Option<u64>,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            min_body_rate: 4096,
            keep_alive_timeout: Duration::from_secs(75),
            max_requests_per_connection: None,
        }
    }
}

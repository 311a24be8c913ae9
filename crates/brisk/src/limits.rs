//! [`Limits`]: what protects a worker from slow or hostile peers, set on the app and
//! overridden per server.

use std::time::Duration;

/// Limits that protect a worker from slow or hostile peers. Set defaults on the
/// [`App`](crate::App) and override them per server.
///
/// ```
/// let limits = brisk::Limits { max_package_size: 1 << 20, ..Default::default() };
/// assert_eq!(limits.max_send_buffer, 2 << 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one connection may have queued: a message that does not fit beside what is
    /// queued is not sent (`send` fails with `BufferFull`, a broadcast skips the connection,
    /// `on_buffer_full` fires), and one larger than the whole buffer never is (`TooLarge`).
    /// Default 2 MiB.
    pub max_send_buffer: usize,
    /// Largest message a peer may send; a larger one closes the connection. Default 10 MiB.
    pub max_package_size: usize,
    /// Close a connection after this long without receiving anything. Default: off.
    pub idle_timeout: Option<Duration>,
    /// Close a connection whose queued bytes made no progress for this long: its peer has
    /// stopped reading, whatever it still sends (a WebSocket client that pings and never
    /// reads). Counted in `send_timeouts`. Checked each second: such a peer is closed one to
    /// two seconds after the timeout.
    /// Default 60 s (nginx's `send_timeout`); `None` keeps such peers.
    pub send_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_send_buffer: 2 << 20,
            max_package_size: 10 << 20,
            idle_timeout: None,
            send_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// Per-server overrides of the app's [`Limits`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LimitOverrides {
    pub(crate) max_send_buffer: Option<usize>,
    pub(crate) max_package_size: Option<usize>,
    pub(crate) idle_timeout: Option<Option<Duration>>,
    pub(crate) send_timeout: Option<Option<Duration>>,
}

impl LimitOverrides {
    /// The app's `defaults` with this server's overrides applied.
    pub(crate) fn apply(&self, defaults: Limits) -> Limits {
        Limits {
            max_send_buffer: self.max_send_buffer.unwrap_or(defaults.max_send_buffer),
            max_package_size: self.max_package_size.unwrap_or(defaults.max_package_size),
            idle_timeout: self.idle_timeout.unwrap_or(defaults.idle_timeout),
            send_timeout: self.send_timeout.unwrap_or(defaults.send_timeout),
        }
    }
}

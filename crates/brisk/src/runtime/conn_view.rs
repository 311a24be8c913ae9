//! [`ConnView`]: what the worker's registry knows of a connection, whatever its protocol.

use std::any::Any;

use crate::stats::ConnectionInfo;

/// What the registry needs from a connection, whatever its protocol. Protocol-specific
/// checks (an HTTP request head that is overdue) are the protocol's own: its sweep finds its
/// connections with [`as_any`](Self::as_any) and asks them itself.
pub(crate) trait ConnView {
    /// The connection's `connections` row.
    fn info(&self) -> ConnectionInfo;
    /// Graceful stop: finish the handler in progress, flush, close.
    fn drain(&self);
    /// Whether its server can hand it over to another worker (on a reload).
    fn can_hand_over(&self) -> bool {
        false
    }
    /// Reload: move to the slot's new worker at the next chance, if the connection's server
    /// can hand it over; true if it will try (it then reports to its server's hook).
    fn hand_over(&self) -> bool {
        false
    }
    /// Stops trying to move it; true if it had not yet left or stayed.
    fn cancel_hand_over(&self) -> bool {
        false
    }
    /// Seconds since bytes last arrived.
    fn idle_secs(&self, now: u32) -> u32;
    /// Closes at once.
    fn destroy(&self);
    /// A graceful stop's time is up: says the protocol's goodbye if it has one and has not
    /// said it (a WebSocket's close 1001, after what is queued, as far as the kernel takes
    /// it now; nothing waits), then closes at once.
    fn stop_now(&self) {
        self.destroy();
    }
    /// The connection as its own type, for the protocol that made it.
    fn as_any(&self) -> &dyn Any;
    /// Writes bytes already in wire form; false if the connection cannot take them.
    fn send_raw(&self, _bytes: &[u8]) -> bool {
        false
    }
    /// Writes its last bytes, already in wire form (a WebSocket close frame), and closes
    /// after what is queued; false if the connection cannot take them.
    fn send_last(&self, _bytes: &[u8]) -> bool {
        false
    }
    /// Sends the protocol's heartbeat ([`Protocol::heartbeat`](crate::protocol::Protocol::heartbeat)), if it has one.
    fn keepalive(&self) {}
    /// Whether the protocol has a heartbeat (the heartbeat sweep only looks at those).
    fn has_heartbeat(&self) -> bool {
        false
    }
    /// Seconds since the connection opened, while its TLS session or its protocol is still
    /// in its opening handshake.
    fn handshake_age(&self, _now: u32) -> Option<u32> {
        None
    }
    /// Counts a connection closed for bad or missing input.
    fn count_rejected(&self) {}
    /// Whether its queued bytes made no progress for its send timeout (its peer stopped
    /// reading).
    fn send_stalled(&self, _now: u32) -> bool {
        false
    }
    /// Counts a connection closed for its send timeout.
    fn count_send_timeout(&self) {}
}

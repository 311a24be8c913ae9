//! Sweeps: once-per-period walks over a worker's connections that close the idle ones and
//! those stuck in their opening handshake. One task per server instead of a timer per
//! connection. Protocols with deadlines of their own (HTTP heads, WebSocket pings) run their
//! own sweeps with these helpers.

use std::rc::Rc;
use std::time::Duration;

use super::conn_view::ConnView;
use super::context::WorkerCtx;

/// Closes connections that received nothing for `timeout`.
pub(crate) async fn sweep_idle(worker: Rc<WorkerCtx>, timeout: Duration) {
    let limit = timeout.as_secs().max(1) as u32;
    let period = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        close_idle(&worker, limit);
    }
}

/// Closes connections still in their opening handshake (TLS, or the protocol's own) after
/// `timeout`.
pub(crate) async fn sweep_handshakes(worker: Rc<WorkerCtx>, timeout: Duration) {
    let limit = timeout.as_secs().max(1) as u32;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        close_stalled_handshakes(&worker, limit);
    }
}

/// Closes (and counts as rejected) the worker's connections that have been in their opening
/// handshake for `limit_s` seconds or more.
pub(crate) fn close_stalled_handshakes(worker: &WorkerCtx, limit_s: u32) {
    let now = worker.uptime_secs();
    let stalled = |c: &dyn ConnView| c.handshake_age(now).is_some_and(|a| a >= limit_s);
    for c in worker.connections_where(stalled) {
        tracing::debug!("closing a connection that did not finish its opening handshake");
        c.count_rejected();
        c.destroy();
    }
}

/// Closes the worker's connections that received nothing for `limit_s` seconds.
pub(crate) fn close_idle(worker: &WorkerCtx, limit_s: u32) {
    let now = worker.uptime_secs();
    for conn in worker.connections_where(|c| c.idle_secs(now) >= limit_s) {
        tracing::debug!("closing idle connection");
        conn.destroy();
    }
}

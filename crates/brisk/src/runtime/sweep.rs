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

/// Starts the worker's one sweep of send timeouts (each second, every connection judged by
/// its own server's `send_timeout`), if it does not run yet: each server that serves
/// connections calls it as it starts in the worker.
pub(crate) fn enforce_send_timeouts(worker: &Rc<WorkerCtx>) {
    if worker.claim_send_sweep() {
        tokio::task::spawn_local(sweep_stalled_sends(worker.clone()));
    }
}

/// Closes, each second, the connections whose peer stopped reading ([`close_stalled_sends`]).
async fn sweep_stalled_sends(worker: Rc<WorkerCtx>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        close_stalled_sends(&worker);
    }
}

/// Closes at once (and counts in `send_timeouts`) the worker's connections whose queued bytes
/// made no progress for their send timeout: a peer that stopped reading holds a full send
/// buffer of the worker's memory for as long as it is kept, whatever it still sends.
pub(crate) fn close_stalled_sends(worker: &WorkerCtx) {
    let now = worker.uptime_secs();
    for c in worker.connections_where(|c| c.send_stalled(now)) {
        tracing::debug!("closing a connection whose peer stopped reading (send timeout)");
        c.count_send_timeout();
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

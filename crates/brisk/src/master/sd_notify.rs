//! systemd's notification protocol (`sd_notify(3)`), spoken by the master when systemd started
//! it with `Type=notify` (`NOTIFY_SOCKET` set): `READY=1` once the workers are ready,
//! `RELOADING=1` then `READY=1` around a reload, `STOPPING=1` when a stop begins, and
//! `WATCHDOG=1` at half the interval systemd asked for (`WATCHDOG_USEC`) while the master's
//! loop runs. Without `NOTIFY_SOCKET` every call does nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Sends `state` (lines `KEY=VALUE`) to systemd, if it listens; a failure is logged and
/// otherwise ignored (the app runs the same without systemd). Never blocks the master: a
/// listener whose queue is full misses the message.
pub(crate) fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    let sent = (|| {
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        match path.strip_prefix('@') {
            // An abstract socket's name.
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
                socket.send_to_addr(state.as_bytes(), &addr)
            }
            None => socket.send_to(state.as_bytes(), &path),
        }
    })();
    match sent {
        Ok(_) => {}
        // Its queue is full: this message is missed, the next may not be.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            tracing::debug!("systemd's socket {path} is full: {state:?} missed");
        }
        Err(e) => tracing::warn!("cannot notify systemd at {path}: {e}"),
    }
}

/// The master is ready: its workers are.
pub(crate) fn ready() {
    notify(&format!("READY=1\nMAINPID={}", std::process::id()));
}

/// A reload begins (`READY=1` again when it ends).
pub(crate) fn reloading() {
    let now = crate::ipc::clock::monotonic_ns() / 1_000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={now}"));
}

/// A stop begins.
pub(crate) fn stopping() {
    notify("STOPPING=1");
}

/// How often to ping systemd's watchdog: half the interval it asked for, if it asked (for
/// this process: `WATCHDOG_PID` unset or ours).
pub(crate) fn watchdog_period() -> Option<Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim() != std::process::id().to_string() {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

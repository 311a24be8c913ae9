//! systemd socket activation (`sd_listen_fds(3)`): the listening sockets systemd opened for
//! the master (`LISTEN_PID` naming it, `LISTEN_FDS` of them from descriptor 3). Each is used
//! for the listener with its address instead of binding one, so a restart or an upgrade
//! behind systemd never closes the port; one that no listener names stops the start, saying
//! which.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use socket2::{SockRef, Type};

use crate::address::{Address, Endpoint, Scheme};
use crate::error::{Error, Result};
use crate::runtime::listener::Listener;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: i32 = 3;

/// Where an inherited socket listens.
#[derive(Debug, PartialEq, Eq)]
enum Bound {
    Stream(std::net::SocketAddr),
    Datagram(std::net::SocketAddr),
    Unix(PathBuf),
}

/// The sockets systemd passed, until each is taken by its listener.
pub(crate) struct Activated {
    sockets: Vec<(Bound, OwnedFd)>,
}

impl Activated {
    /// The sockets systemd passed to this process, if it did. The variables are removed so
    /// that no child takes the sockets for its own; the sockets are closed on exec unless a
    /// worker is given one.
    pub(crate) fn from_env() -> Result<Self> {
        let pid = std::env::var("LISTEN_PID").ok();
        let count = std::env::var("LISTEN_FDS").ok();
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            std::env::remove_var(name);
        }
        let (Some(pid), Some(count)) = (pid, count) else {
            return Ok(Activated { sockets: vec![] });
        };
        if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
            // For another process (a parent that exec'd us without clearing them).
            return Ok(Activated { sockets: vec![] });
        }
        let count: i32 = count
            .trim()
            .parse()
            .map_err(|_| Error::Config(format!("LISTEN_FDS={count:?}: not a number of sockets")))?;
        let mut sockets = Vec::new();
        for fd in FIRST_FD..FIRST_FD + count {
            // SAFETY: sd_listen_fds(3): systemd passes LISTEN_FDS open sockets from
            // descriptor 3 to the process LISTEN_PID names, this one; nothing else owns them.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let sock = SockRef::from(&owned);
            sock.set_cloexec(true).map_err(|e| inherited(fd, e))?;
            // systemd passes blocking sockets; the workers' event loops need them not to be.
            sock.set_nonblocking(true).map_err(|e| inherited(fd, e))?;
            // A filter a master of another build left on it (dropping handshakes while it
            // stopped) would refuse every connection now: take it off, whatever there is.
            let _ = sock.detach_filter();
            let local = sock.local_addr().map_err(|e| inherited(fd, e))?;
            let bound = match (
                local.as_socket(),
                sock.r#type().map_err(|e| inherited(fd, e))?,
            ) {
                (Some(addr), Type::STREAM) => Bound::Stream(addr),
                (Some(addr), Type::DGRAM) => Bound::Datagram(addr),
                (None, Type::STREAM) => match local.as_pathname() {
                    Some(path) => Bound::Unix(path.to_path_buf()),
                    None => {
                        return Err(Error::Config(format!(
                            "systemd passed descriptor {fd}: a Unix socket without a path"
                        )))
                    }
                },
                (_, ty) => {
                    return Err(Error::Config(format!(
                        "systemd passed descriptor {fd}: a socket of type {ty:?}, which no \
                         listener takes"
                    )))
                }
            };
            sockets.push((bound, owned));
        }
        Ok(Activated { sockets })
    }

    /// The inherited socket for `address`, if systemd passed one.
    pub(crate) fn take(&mut self, address: &Address) -> Option<Listener> {
        let wanted = match (address.endpoint(), address.scheme()) {
            (Endpoint::Unix(path), _) => Bound::Unix(path.clone()),
            (Endpoint::Inet(addr), Scheme::Udp) => Bound::Datagram(*addr),
            (Endpoint::Inet(addr), _) => Bound::Stream(*addr),
        };
        let at = self.sockets.iter().position(|(b, _)| *b == wanted)?;
        let (_, fd) = self.sockets.remove(at);
        let raw = fd.as_raw_fd();
        std::mem::forget(fd);
        // SAFETY: `raw` is the open socket of the kind `address` names (matched above), and
        // its OwnedFd was forgotten: the listener is its only owner.
        Some(unsafe { Listener::from_fd(address.scheme(), raw) })
    }

    /// The inherited TCP socket listening on `addr` (the metrics listener's).
    pub(crate) fn take_tcp(&mut self, addr: std::net::SocketAddr) -> Option<std::net::TcpListener> {
        let at = (self.sockets.iter()).position(|(b, _)| *b == Bound::Stream(addr))?;
        Some(self.sockets.remove(at).1.into())
    }

    /// Fails naming every socket no listener took: systemd's socket units and the app's
    /// listeners disagree.
    pub(crate) fn all_taken(&self) -> Result<()> {
        if self.sockets.is_empty() {
            return Ok(());
        }
        let left: Vec<String> = (self.sockets.iter())
            .map(|(b, _)| match b {
                Bound::Stream(a) => format!("tcp {a}"),
                Bound::Datagram(a) => format!("udp {a}"),
                Bound::Unix(p) => format!("unix {}", p.display()),
            })
            .collect();
        Err(Error::Config(format!(
            "systemd passed sockets no listener names: {} (each listener's address must be \
             the one its socket unit listens on)",
            left.join(", ")
        )))
    }
}

fn inherited(fd: i32, e: std::io::Error) -> Error {
    Error::Config(format!("systemd passed descriptor {fd}: {e}"))
}

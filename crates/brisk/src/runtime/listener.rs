//! Opening listening sockets, and handing them from the master to workers as inherited
//! descriptors.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::Path;

use socket2::{Domain, SockAddr, Socket, Type};

use crate::address::{Endpoint, Scheme};
use crate::listen::ListenConfig;

/// An open listening socket (or bound UDP socket), not yet registered with a runtime.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(std::net::TcpListener),
    Unix(UnixListener),
    Udp(std::net::UdpSocket),
}

impl Listener {
    /// Binds the address of `listen`; with `reuse_port` several processes may bind it at once.
    pub(crate) fn bind(listen: &ListenConfig, reuse_port: bool) -> io::Result<Listener> {
        match listen.address.endpoint() {
            Endpoint::Unix(path) => bind_unix(path, listen.backlog),
            Endpoint::Inet(addr) if listen.address.scheme() == Scheme::Udp => {
                let s = inet_socket(*addr, Type::DGRAM, reuse_port)?;
                s.bind(&(*addr).into())?;
                Ok(Listener::Udp(s.into()))
            }
            Endpoint::Inet(addr) => {
                let s = inet_socket(*addr, Type::STREAM, reuse_port)?;
                s.bind(&(*addr).into())?;
                s.listen(listen.backlog.min(i32::MAX as u32) as i32)?;
                Ok(Listener::Tcp(s.into()))
            }
        }
    }

    /// Fails if anything already listens on the address (checked without SO_REUSEPORT, so
    /// another app's SO_REUSEPORT socket counts too). The probe socket is closed again.
    pub(crate) fn probe(listen: &ListenConfig) -> io::Result<()> {
        Self::bind(listen, false).map(drop)
    }

    /// Takes over an inherited descriptor.
    ///
    /// # Safety
    /// `fd` must be an open socket of the kind `scheme` names, owned by nobody else.
    pub(crate) unsafe fn from_fd(scheme: Scheme, fd: RawFd) -> Listener {
        // SAFETY: the caller passes an open socket that nobody else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        match scheme {
            Scheme::Udp => Listener::Udp(owned.into()),
            Scheme::Unix => Listener::Unix(owned.into()),
            _ => Listener::Tcp(owned.into()),
        }
    }

    pub(crate) fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Udp(l) => l.as_raw_fd(),
        }
    }

    /// The port actually bound (useful with port 0).
    pub(crate) fn local_port(&self) -> Option<u16> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok().map(|a| a.port()),
            Listener::Udp(l) => l.local_addr().ok().map(|a| a.port()),
            Listener::Unix(_) => None,
        }
    }
}

fn inet_socket(addr: SocketAddr, ty: Type, reuse_port: bool) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, None)?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

fn bind_unix(path: &Path, backlog: u32) -> io::Result<Listener> {
    if path.exists() {
        // A socket file nobody answers on is left over from a crash: remove it.
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(io::ErrorKind::AddrInUse.into()),
            Err(_) => std::fs::remove_file(path)?,
        }
    }
    let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    s.bind(&SockAddr::unix(path)?)?;
    s.listen(backlog.min(i32::MAX as u32) as i32)?;
    s.set_nonblocking(true)?;
    Ok(Listener::Unix(s.into()))
}

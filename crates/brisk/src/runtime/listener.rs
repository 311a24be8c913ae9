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

    /// Makes a TCP listener that is about to close for good stop starting handshakes: a
    /// socket filter drops every SYN, so the kernel queues no new connection that closing
    /// the socket would then reset after its client had sent a request. Handshakes already
    /// under way still complete; a client whose SYN was dropped retries it after about a
    /// second and is refused by then. Nothing to do for UDP sockets, nor for Unix ones (the
    /// master removes their file: see `SocketFile`).
    ///
    /// Only for a socket nobody will accept on after the current holders: the filter stays
    /// on the socket (every descriptor of it, in every process) until it closes.
    pub(crate) fn refuse_new_connections(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => socket2::SockRef::from(l).attach_filter(&drop_syn_filter()),
            Listener::Unix(_) | Listener::Udp(_) => Ok(()),
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

/// A classic BPF program for a TCP socket that drops segments with SYN set and ACK clear
/// (a client's first handshake packet) and keeps everything else. A TCP socket's filter
/// sees the segment from its TCP header on, so byte 13 holds the flags.
fn drop_syn_filter() -> [libc::sock_filter; 5] {
    const SYN: u32 = 0x02;
    const ACK: u32 = 0x10;
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    [
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 13),
        op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, SYN | ACK),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 1, SYN),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, 0),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
    ]
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

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::Listener;

    /// What was queued before `refuse_new_connections` is still accepted and carries bytes;
    /// a later client's handshake never completes; closing the socket refuses the retries.
    fn refuses_new_handshakes_only(loopback: &str) {
        let l = TcpListener::bind((loopback, 0)).unwrap();
        let addr = l.local_addr().unwrap();
        let mut queued = TcpStream::connect(addr).unwrap();
        let l = Listener::Tcp(l);
        l.refuse_new_connections().unwrap();

        let late = TcpStream::connect_timeout(&addr, Duration::from_millis(300));
        assert_eq!(
            late.map(|_| ()).map_err(|e| e.kind()),
            Err(ErrorKind::TimedOut),
            "{addr}: a handshake completed after refuse_new_connections"
        );
        let Listener::Tcp(l) = l else { unreachable!() };
        let (mut accepted, _) = l.accept().unwrap();
        queued.write_all(b"ping").unwrap();
        let mut got = [0; 4];
        accepted.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        l.set_nonblocking(true).unwrap();
        assert_eq!(
            l.accept().map(|_| ()).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock),
            "{addr}: the late client was queued after all"
        );
        drop(l);
        assert_eq!(
            TcpStream::connect(addr).map(|_| ()).map_err(|e| e.kind()),
            Err(ErrorKind::ConnectionRefused)
        );
    }

    #[test]
    fn a_refusing_ipv4_listener_keeps_what_is_queued_and_starts_no_new_handshake() {
        refuses_new_handshakes_only("127.0.0.1");
    }

    #[test]
    fn a_refusing_ipv6_listener_keeps_what_is_queued_and_starts_no_new_handshake() {
        refuses_new_handshakes_only("::1");
    }
}

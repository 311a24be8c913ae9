//! One type for the kinds of stream sockets a connection can own: TCP, TLS over TCP, Unix.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpStream, UnixStream};

use super::tcp_read::read_tcp;
use super::tls_stream::TlsSocket;

/// A peer or local address of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAddr {
    /// An IP address and port.
    Inet(SocketAddr),
    /// A Unix socket, with its path when it has one (client sockets usually have none).
    Unix(Option<PathBuf>),
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Inet(a) => write!(f, "{a}"),
            PeerAddr::Unix(Some(p)) => write!(f, "unix:{}", p.display()),
            PeerAddr::Unix(None) => f.write_str("unix:(unnamed)"),
        }
    }
}

/// A connected stream, used through readiness and non-blocking reads and writes (of
/// plaintext, for TLS).
pub(crate) enum Stream {
    Tcp(TcpStream),
    /// Boxed: the TLS session is large, and plain connections should not pay for it.
    Tls(Box<TlsSocket>),
    Unix(UnixStream),
}

impl Stream {
    pub(crate) fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Tls(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
        }
    }

    pub(crate) fn poll_write_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_write_ready(cx),
            Stream::Tls(s) => s.tcp().poll_write_ready(cx),
            Stream::Unix(s) => s.poll_write_ready(cx),
        }
    }

    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => read_tcp(s, buf),
            Stream::Tls(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
        }
    }

    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Tls(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
        }
    }

    /// Whether a TLS handshake is still under way (never, on a plain socket).
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Stream::Tls(s) => s.is_handshaking(),
            _ => false,
        }
    }

    /// Whether bytes already accepted by `try_write` still wait to reach the socket (TLS
    /// records the kernel did not take).
    pub(crate) fn has_pending_output(&self) -> bool {
        match self {
            Stream::Tls(s) => s.has_pending_output(),
            _ => false,
        }
    }

    /// Sends what [`has_pending_output`](Self::has_pending_output) reports. Returns whether
    /// nothing is left.
    pub(crate) fn flush_pending(&self) -> io::Result<bool> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(true),
        }
    }

    /// The peer's address (a Unix peer's path when it has one).
    pub(crate) fn peer_addr(&self) -> PeerAddr {
        let tcp = match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.tcp(),
            Stream::Unix(s) => {
                let path = s
                    .peer_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(Into::into));
                return PeerAddr::Unix(path);
            }
        };
        tcp.peer_addr()
            .map(PeerAddr::Inet)
            .unwrap_or(PeerAddr::Unix(None))
    }

    /// The local address (a Unix socket's path when it has one).
    pub(crate) fn local_addr(&self) -> PeerAddr {
        let tcp = match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.tcp(),
            Stream::Unix(s) => {
                let path = s
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(Into::into));
                return PeerAddr::Unix(path);
            }
        };
        tcp.local_addr()
            .map(PeerAddr::Inet)
            .unwrap_or(PeerAddr::Unix(None))
    }

    /// Sends FIN (after close_notify, for TLS): the peer reads end-of-stream after the bytes
    /// already written.
    pub(crate) fn shutdown_write(&self) {
        let sock = match self {
            Stream::Tcp(s) => socket2::SockRef::from(s),
            Stream::Tls(s) => return s.shutdown_write(),
            Stream::Unix(s) => socket2::SockRef::from(s),
        };
        let _ = sock.shutdown(std::net::Shutdown::Write);
    }

    /// Ends both directions at once (the descriptor itself closes when the stream drops):
    /// the peer sees the end now, whoever still holds the connection's handles.
    pub(crate) fn shutdown_both(&self) {
        let sock = match self {
            Stream::Tcp(s) => socket2::SockRef::from(s),
            Stream::Tls(s) => socket2::SockRef::from(s.tcp()),
            Stream::Unix(s) => socket2::SockRef::from(s),
        };
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }
}

//! One type for the two kinds of stream sockets a connection can own, TCP and Unix.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpStream, UnixStream};

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

/// A connected TCP or Unix stream, used through readiness and non-blocking reads and writes.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(crate) fn poll_read_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
        }
    }

    pub(crate) fn poll_write_ready(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_write_ready(cx),
            Stream::Unix(s) => s.poll_write_ready(cx),
        }
    }

    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read(buf),
            Stream::Unix(s) => s.try_read(buf),
        }
    }

    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(buf),
            Stream::Unix(s) => s.try_write(buf),
        }
    }

    /// Sends FIN: the peer reads end-of-stream after the bytes already written.
    pub(crate) fn shutdown_write(&self) {
        let sock = match self {
            Stream::Tcp(s) => socket2::SockRef::from(s),
            Stream::Unix(s) => socket2::SockRef::from(s),
        };
        let _ = sock.shutdown(std::net::Shutdown::Write);
    }
}

//! [`TlsSocket`]: a rustls server session driven straight over a non-blocking TCP socket, so
//! that TLS connections on the connection runtime (WebSocket, Text, Frame, raw TCP) use the
//! same readiness model, and the same task, as plain ones. HTTP connections run hyper over
//! `tokio-rustls` instead.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::ServerConnection;
use tokio::net::TcpStream;

use super::tcp_read::read_tcp;

/// A TLS server connection over a non-blocking TCP socket, read and written the way the
/// connection runtime uses plain sockets: readiness, then `try_read`/`try_write` of plaintext.
///
/// A read returns would-block only after the socket did, so tokio's readiness stays right;
/// records the socket would not take are kept by rustls and reported by
/// [`has_pending_output`](Self::has_pending_output) until [`flush`](Self::flush) sends them.
pub(crate) struct TlsSocket {
    tcp: TcpStream,
    session: RefCell<ServerConnection>,
}

/// The socket as `io::Read`/`io::Write` for rustls, without blocking.
struct NonBlocking<'a>(&'a TcpStream);

impl Read for NonBlocking<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_tcp(self.0, buf)
    }
}

impl Write for NonBlocking<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}

impl TlsSocket {
    /// Starts the server side of a handshake on a freshly accepted socket.
    pub(crate) fn accept(tcp: TcpStream, config: Arc<rustls::ServerConfig>) -> io::Result<Self> {
        let session = ServerConnection::new(config).map_err(tls_error)?;
        Ok(Self::from_parts(tcp, session))
    }

    /// Continues a session that another layer started (an HTTP upgrade over TLS).
    pub(crate) fn from_parts(tcp: TcpStream, session: ServerConnection) -> Self {
        TlsSocket {
            tcp,
            session: RefCell::new(session),
        }
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Ready at once when rustls holds decrypted bytes the socket will not signal again.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let buffered = match self.session.borrow_mut().process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
            // The next read reports the error.
            Err(_) => true,
        };
        if buffered {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    /// Reads decrypted bytes: `Ok(0)` at the end of the stream (with or without the peer's
    /// close_notify), would-block when the socket has nothing more.
    pub(crate) fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut session = self.session.borrow_mut();
        let mut eof = false;
        loop {
            match session.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && eof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match session.read_tls(&mut NonBlocking(&self.tcp)) {
                Ok(0) => eof = true,
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = session.process_new_packets() {
                // Tell the peer why (the alert rustls queued), then fail the connection.
                let _ = Self::write_pending(&mut session, &self.tcp);
                return Err(tls_error(e));
            }
            // Handshake replies; what the socket does not take now waits for `flush`.
            Self::write_pending(&mut session, &self.tcp)?;
        }
    }

    /// Encrypts what rustls' send buffer takes of `buf` and sends what the socket takes.
    /// Would-block only when rustls' buffer is full.
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut session = self.session.borrow_mut();
        Self::write_pending(&mut session, &self.tcp)?;
        let n = session.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Self::write_pending(&mut session, &self.tcp)?;
        Ok(n)
    }

    /// Whether the TLS handshake is still under way.
    pub(crate) fn is_handshaking(&self) -> bool {
        self.session.borrow().is_handshaking()
    }

    /// Whether encrypted records wait for the socket.
    pub(crate) fn has_pending_output(&self) -> bool {
        self.session.borrow().wants_write()
    }

    /// Sends waiting records. Returns whether none are left.
    pub(crate) fn flush(&self) -> io::Result<bool> {
        Self::write_pending(&mut self.session.borrow_mut(), &self.tcp)
    }

    /// Sends close_notify, then FIN.
    pub(crate) fn shutdown_write(&self) {
        let mut session = self.session.borrow_mut();
        session.send_close_notify();
        let _ = Self::write_pending(&mut session, &self.tcp);
        let _ = socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write);
    }

    fn write_pending(session: &mut ServerConnection, tcp: &TcpStream) -> io::Result<bool> {
        while session.wants_write() {
            match session.write_tls(&mut NonBlocking(tcp)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

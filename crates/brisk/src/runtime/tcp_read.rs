//! Reading a TCP socket without the extra would-block `recv`: after a short read the socket's
//! readiness is cleared at once (tokio polls edge-triggered).

use std::io;

use tokio::net::TcpStream;

/// Reads from a TCP socket; a read shorter than `buf` drained the socket, so its readiness is
/// cleared at once instead of by one more read that would only return would-block.
pub(crate) fn read_tcp(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let n = s.try_read(buf)?;
    if n > 0 && n < buf.len() {
        drained(s);
    }
    Ok(n)
}

/// Marks a socket as not readable until the poller says otherwise: after a short read, the
/// kernel had no more bytes, and new ones raise a new edge (tokio polls edge-triggered).
/// Saves the would-block `recv` a reader would otherwise make before it waits.
pub(crate) fn drained(s: &TcpStream) {
    let _ = s.try_io(tokio::io::Interest::READABLE, || {
        Err::<(), _>(io::ErrorKind::WouldBlock.into())
    });
}

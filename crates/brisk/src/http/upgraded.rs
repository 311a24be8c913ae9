//! The I/O stacks hyper serves HTTP/1.1 on, named once. The connection (`conn.rs`) builds
//! them with [`plain`] and [`tls`]; [`take_upgraded`] takes a connection hyper upgraded (a WebSocket
//! route) apart into the socket under them. A layer added to a stack changes its type here,
//! and `take_upgraded` stops compiling until it takes that layer off too: an upgrade cannot
//! fail at run time because the stack grew.

use std::sync::Arc;

use bytes::BytesMut;
use hyper_util::rt::TokioIo;

use super::activity::Activity;
use super::framing::guard::FramingGuard;
use super::head_timeout::HeadTimeoutIo;
use super::io::HttpIo;
use super::limits::HttpLimits;
use crate::runtime::stream::Stream;
use crate::runtime::tls_stream::TlsSocket;

/// A plaintext connection handed to hyper: the socket under the framing guard.
pub(crate) type PlainStack = TokioIo<FramingGuard<HttpIo>>;

/// An HTTP/1.1 connection over TLS: the TLS stream, the head timeout, the framing guard.
pub(crate) type TlsStack =
    TokioIo<FramingGuard<HeadTimeoutIo<tokio_rustls::server::TlsStream<HttpIo>>>>;

/// The stack of a plaintext connection.
pub(crate) fn plain(io: HttpIo, http: &HttpLimits) -> PlainStack {
    TokioIo::new(guarded(io, http))
}

/// The stack of an HTTP/1.1 connection over TLS.
pub(crate) fn tls(
    stream: tokio_rustls::server::TlsStream<HttpIo>,
    activity: Arc<Activity>,
    http: &HttpLimits,
) -> TlsStack {
    TokioIo::new(guarded(HeadTimeoutIo::new(stream, activity), http))
}

fn guarded<T>(io: T, http: &HttpLimits) -> FramingGuard<T> {
    // hyper's read buffer holds a head of up to `max_buf_size` (see `start.rs`).
    FramingGuard::new(io, http.max_header_bytes.max(8192), http.max_headers)
}

/// The socket under an upgraded HTTP connection (plain or TLS), and the bytes hyper read
/// past the handshake, copied so that hyper's buffer goes. `None` for a connection on no
/// stack of this file (HTTP/2 has no upgrades).
pub(crate) fn take_upgraded(upgraded: hyper::upgrade::Upgraded) -> Option<(Stream, BytesMut)> {
    match upgraded.downcast::<PlainStack>() {
        Ok(parts) => {
            // Bytes hyper read come first, then those the guard held, then any not read yet.
            let (io, held) = parts.io.into_inner().into_parts();
            let (stream, unread) = io.into_parts();
            let mut initial = BytesMut::from(&parts.read_buf[..]);
            initial.extend_from_slice(&held);
            initial.extend_from_slice(&unread);
            Some((Stream::Tcp(stream), initial))
        }
        Err(upgraded) => {
            let parts = upgraded.downcast::<TlsStack>().ok()?;
            let (guarded, held) = parts.io.into_inner().into_parts();
            let (io, session) = guarded.into_inner().into_inner();
            // TLS connections never take Brisk's own HTTP/1.1 path, so nothing was unread.
            let (stream, _) = io.into_parts();
            let tls = TlsSocket::from_parts(stream, session);
            let mut initial = BytesMut::from(&parts.read_buf[..]);
            initial.extend_from_slice(&held);
            Some((Stream::Tls(Box::new(tls)), initial))
        }
    }
}

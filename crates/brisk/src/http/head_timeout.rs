//! The 408 answer for a request head that stalls on an encrypted connection.
//!
//! On plaintext connections the worker's sweep writes `408 Request Timeout` straight to the
//! socket. Under TLS the answer has to go through the TLS session, which hyper's I/O owns, so
//! the connection's reads go through [`HeadTimeoutIo`]: once the sweep flags the connection,
//! the next read writes the 408 through the session and then reports the end of the stream,
//! and hyper closes the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;

/// The answer to a request head that took too long.
pub(super) const TIMEOUT_408: &[u8] =
    b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// A stream that, once its connection is flagged ([`Activity::answer_408`]), answers 408 and
/// then reads as ended. Writes pass through unchanged.
pub(crate) struct HeadTimeoutIo<T> {
    inner: T,
    activity: Arc<Activity>,
    /// Bytes of the 408 written so far.
    sent: usize,
}

impl<T> HeadTimeoutIo<T> {
    pub(super) fn new(inner: T, activity: Arc<Activity>) -> Self {
        HeadTimeoutIo {
            inner,
            activity,
            sent: 0,
        }
    }

    /// The stream underneath (for a WebSocket upgrade, which leaves HTTP behind).
    pub(crate) fn into_inner(self) -> T {
        self.inner
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> HeadTimeoutIo<T> {
    /// Writes and flushes the 408 (hyper is reading a head, so no response is under way).
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < TIMEOUT_408.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &TIMEOUT_408[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadTimeoutIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.activity.owes_408() {
            ready!(this.poll_answer(cx))?;
            // Nothing more is read: hyper sees the stream end and closes the connection.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.activity.decrypted();
        }
        Poll::Ready(Ok(()))
    }
}

super::write_through::write_through!(HeadTimeoutIo);

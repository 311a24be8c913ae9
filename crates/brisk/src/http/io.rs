//! The socket of an HTTP connection as hyper sees it, counting bytes and activity for the
//! worker's stats, `connections` and idle timeout.

use std::cell::Cell;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::activity::Activity;
use super::sys;

pub(crate) use crate::runtime::io_counters::WorkerIo;

/// Where a connection stands with Nagle's algorithm: `TCP_NODELAY` is set before the second
/// send, as nginx does on keep-alive, so that a connection that answers once and closes (no
/// keep-alive) makes one system call fewer. A first send never waits for Nagle: nothing is in
/// flight before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nagle {
    /// Nothing sent yet (or only bytes sent with `MSG_MORE`, which the next send pushes).
    Unsent,
    /// One send went out with Nagle on.
    SentOnce,
    /// `TCP_NODELAY` is set.
    NoDelay,
}

/// A TCP stream implementing hyper's I/O traits through readiness and non-blocking calls.
pub struct HttpIo {
    stream: TcpStream,
    activity: Arc<Activity>,
    worker: Arc<WorkerIo>,
    /// Bytes already received (and counted) that are read again before the socket: what
    /// Brisk's own HTTP/1.1 path hands over to hyper.
    prefix: Bytes,
    nagle: Cell<Nagle>,
}

impl HttpIo {
    pub(crate) fn new(stream: TcpStream, activity: Arc<Activity>, worker: Arc<WorkerIo>) -> Self {
        HttpIo {
            stream,
            activity,
            worker,
            prefix: Bytes::new(),
            nagle: Cell::new(Nagle::Unsent),
        }
    }
}

impl HttpIo {
    /// The socket (with `TCP_NODELAY` set) and any bytes received but not read yet, for an
    /// upgrade to another protocol.
    pub(crate) fn into_parts(self) -> (TcpStream, Bytes) {
        if self.nagle.get() != Nagle::NoDelay {
            let _ = self.stream.set_nodelay(true);
        }
        (self.stream, self.prefix)
    }

    /// Whether `TCP_NODELAY` is set on the socket (for tests).
    #[cfg(test)]
    pub(crate) fn nodelay(&self) -> bool {
        self.stream.nodelay().unwrap_or(false)
    }

    /// Before a send: from the second one on, sends go out without waiting for Nagle.
    fn before_send(&self) {
        if self.nagle.get() == Nagle::SentOnce {
            let _ = self.stream.set_nodelay(true);
            self.nagle.set(Nagle::NoDelay);
        }
    }

    /// After a send of `n` bytes; `more` when it was sent with `MSG_MORE`.
    fn after_send(&self, n: usize, more: bool) {
        if n > 0 && !more && self.nagle.get() == Nagle::Unsent {
            self.nagle.set(Nagle::SentOnce);
        }
    }

    /// Makes `bytes` the next bytes read, before anything from the socket.
    pub(crate) fn unread(&mut self, bytes: Bytes) {
        debug_assert!(self.prefix.is_empty());
        self.prefix = bytes;
    }
}

impl HttpIo {
    /// Waits until the socket is readable (or bytes were unread), without reading.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            return Poll::Ready(Ok(()));
        }
        self.stream.poll_read_ready(cx).map_ok(drop)
    }

    /// Receives into `dst` without initializing it first.
    pub(crate) fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
        dst: &mut [MaybeUninit<u8>],
    ) -> Poll<io::Result<usize>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(dst.len());
            let src = self.prefix.split_to(n);
            // SAFETY: `n` fits both `src` and `dst`, which do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast(), n) };
            return Poll::Ready(Ok(n));
        }
        loop {
            ready!(self.stream.poll_read_ready(cx))?;
            let fd = self.stream.as_raw_fd();
            let r = self.stream.try_io(Interest::READABLE, || {
                // SAFETY: recv writes at most `dst.len()` bytes into `dst`, and callers only
                // treat the `n` bytes it reports as initialized.
                let n = unsafe { libc::recv(fd, dst.as_mut_ptr().cast(), dst.len(), 0) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(n) => {
                    if n < dst.len() {
                        crate::runtime::tcp_read::drained(&self.stream);
                    }
                    if n > 0 {
                        self.activity.received(n as u64, self.worker.now_ms());
                        self.worker.bytes_in.fetch_add(n as u64, Relaxed);
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn count_out(&self, n: usize) {
        self.activity.sent(n as u64, self.worker.now_ms());
        self.worker.bytes_out.fetch_add(n as u64, Relaxed);
    }

    /// Sends from `bufs` (vectored when there are several); returns how many bytes went.
    pub(crate) fn poll_send(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_sendmsg(cx, bufs, 0)
    }

    /// Sends from `bufs` like [`poll_send`](Self::poll_send), telling the kernel
    /// that more follows at once (`MSG_MORE`): a response head sent this way
    /// leaves in the same packet as the start of the body sent after it.
    pub(crate) fn poll_send_more(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_sendmsg(cx, bufs, libc::MSG_MORE)
    }

    /// One `send` (or `sendmsg` for several buffers) with `flags`, once writable.
    fn poll_sendmsg(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
        flags: libc::c_int,
    ) -> Poll<io::Result<usize>> {
        let fd = self.stream.as_raw_fd();
        let more = flags & libc::MSG_MORE != 0;
        let flags = flags | libc::MSG_NOSIGNAL;
        self.poll_write_with(cx, more, || {
            let n = match bufs {
                // SAFETY: `one` is valid for reads of its length during the call.
                // SAFETY: `one` is a live buffer of `one.len()` bytes for the whole call.
                [one] => unsafe { libc::send(fd, one.as_ptr().cast(), one.len(), flags) },
                _ => {
                    // SAFETY: an all-zero msghdr is valid; it then points at `bufs`
                    // (IoSlice has iovec's layout), which outlive the call.
                    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
                    msg.msg_iovlen = bufs.len() as _;
                    // SAFETY: `msg` points at `bufs`, which outlive the call.
                    unsafe { libc::sendmsg(fd, &msg, flags) }
                }
            };
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        })
    }

    /// Sends up to `len` bytes of `file` from `*offset` with `sendfile(2)`,
    /// advancing `*offset`; returns how many bytes went (0: the file ends
    /// before `*offset + len`). Waits for the socket to be writable; the
    /// caller makes sure reading the file cannot wait for the disk.
    pub(crate) fn poll_sendfile(
        &self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: &mut u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        let fd = self.stream.as_raw_fd();
        self.poll_write_with(cx, false, || sys::sendfile(fd, file, offset, len))
    }

    /// Runs `send` (one non-blocking send of some kind; `more`: with `MSG_MORE`) once the
    /// socket is writable, again after each would-block; counts what went.
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        more: bool,
        mut send: impl FnMut() -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            self.before_send();
            match self.stream.try_io(Interest::WRITABLE, &mut send) {
                Ok(n) => {
                    self.after_send(n, more);
                    self.count_out(n);
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Sends FIN: nothing more will be written.
    pub(crate) fn shutdown(&self) {
        let _ = socket2::SockRef::from(&self.stream).shutdown(std::net::Shutdown::Write);
    }
}

impl hyper::rt::Read for HttpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: poll_recv only writes into the buffer, never reads uninitialized bytes.
        let n = ready!(self.get_mut().poll_recv(cx, unsafe { buf.as_mut() }))?;
        // SAFETY: recv filled exactly `n` bytes.
        unsafe { buf.advance(n) };
        Poll::Ready(Ok(()))
    }
}

/// The same socket for `tokio-rustls`, which HTTPS runs on.
impl tokio::io::AsyncRead for HttpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // SAFETY: poll_recv only writes into the buffer, never reads uninitialized bytes.
        let n = ready!(self.get_mut().poll_recv(cx, unsafe { buf.unfilled_mut() }))?;
        // SAFETY: recv initialized exactly `n` bytes.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

/// The write half, the same for hyper's I/O traits and tokio's (under `tokio-rustls`): every
/// write is a non-blocking `send`, vectored when given several buffers; nothing is buffered,
/// so flushing has nothing to do.
macro_rules! impl_write {
    ($trait:path) => {
        impl $trait for HttpIo {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.poll_send(cx, &[io::IoSlice::new(buf)])
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                self.poll_send(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.shutdown();
                Poll::Ready(Ok(()))
            }
        }
    };
}

impl_write!(hyper::rt::Write);
impl_write!(tokio::io::AsyncWrite);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::io::Read;

    /// Runs `f` on a current-thread runtime with the server side of a loopback connection as
    /// an `HttpIo`, its activity counters, and the client side; returns what `f` returns.
    pub(crate) fn with_io<R>(
        f: impl AsyncFnOnce(HttpIo, Arc<Activity>, std::net::TcpStream) -> R,
    ) -> R {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let stream = TcpStream::from_std(server).unwrap();
            let activity = Arc::new(Activity::default());
            let io = HttpIo::new(stream, activity.clone(), Arc::new(WorkerIo::new()));
            f(io, activity, client).await
        })
    }

    impl HttpIo {
        /// The socket's descriptor, to act on it behind tokio's back.
        pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
            self.stream.as_raw_fd()
        }
    }

    async fn send(io: &HttpIo, bytes: &[u8], more: bool) {
        let bufs = [io::IoSlice::new(bytes)];
        let n = match more {
            true => poll_fn(|cx| io.poll_send_more(cx, &bufs)).await,
            false => poll_fn(|cx| io.poll_send(cx, &bufs)).await,
        };
        assert_eq!(n.unwrap(), bytes.len());
    }

    #[test]
    fn nodelay_is_set_before_the_second_send_and_not_for_one() {
        with_io(async |io, _, mut client| {
            assert!(!io.nodelay());
            send(&io, b"HTTP/1.1 200 OK\r\n", true).await;
            assert!(
                !io.nodelay(),
                "a send with MSG_MORE is not a send of its own"
            );
            send(&io, b"content-length: 0\r\n\r\n", false).await;
            assert!(!io.nodelay(), "one response, one send: no setsockopt");
            send(&io, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", false).await;
            assert!(io.nodelay(), "the second send goes out without Nagle");
            let mut got = [0; 96];
            let mut n = 0;
            while n < 76 {
                n += client.read(&mut got[n..]).unwrap();
            }
            assert!(got[..n].ends_with(b"content-length: 0\r\n\r\n"));
        });
    }

    #[test]
    fn an_upgraded_socket_has_nodelay() {
        with_io(async |io, _, _client| {
            send(&io, b"HTTP/1.1 101 Switching Protocols\r\n\r\n", false).await;
            let (stream, _) = io.into_parts();
            assert!(stream.nodelay().unwrap());
        });
    }
}

//! The socket of an HTTP connection as hyper sees it, counting bytes and activity for the
//! worker's stats, `connections` and idle timeout.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Byte counters of all HTTP connections of one worker. Atomic because hyper requires its
/// I/O to be `Send` (for upgrades), although a worker never leaves its thread.
#[derive(Debug)]
pub(crate) struct WorkerIo {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub started: Instant,
}

impl WorkerIo {
    pub(crate) fn new() -> Self {
        WorkerIo {
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    fn uptime_secs(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }
}

/// Per-connection counters shared between the socket adapter and the registry.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub last_active: AtomicU32,
    /// Bytes arrived since the last request head was handed to the service: a header
    /// timeout with this set means a client stalled mid-request (answer 408).
    pub partial: AtomicBool,
}

/// A TCP stream implementing hyper's I/O traits through readiness and non-blocking calls.
pub struct HttpIo {
    stream: TcpStream,
    activity: Arc<Activity>,
    worker: Arc<WorkerIo>,
}

impl HttpIo {
    pub(crate) fn new(stream: TcpStream, activity: Arc<Activity>, worker: Arc<WorkerIo>) -> Self {
        HttpIo {
            stream,
            activity,
            worker,
        }
    }
}

impl HttpIo {
    /// The socket, for an upgrade to another protocol.
    pub(crate) fn into_stream(self) -> TcpStream {
        self.stream
    }
}

impl hyper::rt::Read for HttpIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.stream.poll_read_ready(cx))?;
            let fd = this.stream.as_raw_fd();
            // SAFETY: recv writes at most `len` bytes into the uninitialized tail of `buf`,
            // and we advance it by exactly what recv reports.
            let dst = unsafe { buf.as_mut() };
            let r = this.stream.try_io(Interest::READABLE, || {
                let n = unsafe { libc::recv(fd, dst.as_mut_ptr().cast(), dst.len(), 0) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(n) => {
                    unsafe { buf.advance(n) };
                    if n > 0 {
                        let a = &this.activity;
                        a.bytes_in.fetch_add(n as u64, Relaxed);
                        this.worker.bytes_in.fetch_add(n as u64, Relaxed);
                        a.last_active.store(this.worker.uptime_secs(), Relaxed);
                        a.partial.store(true, Relaxed);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl HttpIo {
    fn count_out(&self, n: usize) {
        let a = &self.activity;
        a.bytes_out.fetch_add(n as u64, Relaxed);
        self.worker.bytes_out.fetch_add(n as u64, Relaxed);
        // A long response (a download, an event stream) keeps the connection active.
        a.last_active.store(self.worker.uptime_secs(), Relaxed);
    }
}

impl hyper::rt::Write for HttpIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write(buf) {
                Ok(n) => {
                    self.count_out(n);
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write_vectored(bufs) {
                Ok(n) => {
                    self.count_out(n);
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let _ = socket2::SockRef::from(&self.stream).shutdown(std::net::Shutdown::Write);
        Poll::Ready(Ok(()))
    }
}

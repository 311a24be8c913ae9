//! The buffers of Brisk's HTTP/1.1 path: the staging buffer responses are written into
//! ([`Output`]), and the per-worker pools that lend read and write buffers to busy
//! connections only, so that an idle keep-alive connection holds none.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};

use super::READ_CHUNK;
use crate::http::io::HttpIo;

/// Body chunks under this size are copied next to the head (one send); larger ones are
/// sent from where they are (vectored).
const COPY_UNDER: usize = 16 * 1024;

/// Bytes waiting to be sent: a staging buffer, then at most one chunk sent from where it
/// is.
#[derive(Default)]
pub(super) struct Output {
    buf: Vec<u8>,
    /// How much of `buf` was sent.
    sent: usize,
    tail: Bytes,
}

impl Output {
    /// The staging buffer; the caller appends to it. Only valid while nothing follows it
    /// (see [`make_room`](Self::make_room)).
    pub(in crate::http::h1) fn stage(&mut self) -> &mut Vec<u8> {
        debug_assert!(self.tail.is_empty());
        if self.buf.capacity() == 0 {
            self.buf = pool::take_write();
        }
        &mut self.buf
    }

    /// Whether a tail is staged (nothing may be staged after it until it is sent).
    pub(in crate::http::h1) fn has_tail(&self) -> bool {
        !self.tail.is_empty()
    }

    /// Bytes staged and not sent.
    pub(in crate::http::h1) fn staged(&self) -> usize {
        self.buf.len() - self.sent + self.tail.len()
    }

    /// Stages `data`: copied when small, else kept as the tail (the caller then calls
    /// [`make_room`](Self::make_room) before staging more).
    pub(in crate::http::h1) fn push(&mut self, data: Bytes) {
        if data.len() < COPY_UNDER {
            self.stage().extend_from_slice(&data);
        } else {
            self.tail = data;
        }
    }

    /// Sends the tail, if any, so more can be staged after it.
    pub(in crate::http::h1) async fn make_room(&mut self, io: &HttpIo) -> io::Result<()> {
        if self.tail.is_empty() {
            return Ok(());
        }
        self.flush(io).await
    }

    pub(in crate::http::h1) async fn flush(&mut self, io: &HttpIo) -> io::Result<()> {
        poll_fn(|cx| self.poll_flush(io, cx)).await
    }

    /// [`flush`](Self::flush), telling the kernel that more follows at once (`MSG_MORE`).
    pub(in crate::http::h1) async fn flush_more(&mut self, io: &HttpIo) -> io::Result<()> {
        poll_fn(|cx| self.poll_send_all(io, cx, true)).await
    }

    pub(in crate::http::h1) fn poll_flush(
        &mut self,
        io: &HttpIo,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_send_all(io, cx, false)
    }

    fn poll_send_all(
        &mut self,
        io: &HttpIo,
        cx: &mut Context<'_>,
        more: bool,
    ) -> Poll<io::Result<()>> {
        loop {
            let head = &self.buf[self.sent..];
            let slices = [io::IoSlice::new(head), io::IoSlice::new(&self.tail)];
            let bufs = match (head.is_empty(), self.tail.is_empty()) {
                (true, true) => {
                    self.buf.clear();
                    self.sent = 0;
                    return Poll::Ready(Ok(()));
                }
                (false, true) => &slices[..1],
                (true, false) => &slices[1..],
                (false, false) => &slices[..],
            };
            let n = if more {
                ready!(io.poll_send_more(cx, bufs))?
            } else {
                ready!(io.poll_send(cx, bufs))?
            };
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let from_head = n.min(head.len());
            self.sent += from_head;
            self.tail.advance(n - from_head);
        }
    }

    /// Gives the staging buffer back to the pool (everything was sent).
    pub(in crate::http::h1) fn release(&mut self) {
        debug_assert_eq!(self.staged(), 0);
        pool::put_write(std::mem::take(&mut self.buf));
        self.sent = 0;
    }
}

/// Per-worker buffers for connections that are busy right now: idle connections hold none,
/// and a busy one rarely allocates.
pub(super) mod pool {
    use std::thread::LocalKey;

    use super::*;

    /// Buffers kept per worker and kind; more are freed. A request's read buffer stays taken
    /// while its handler runs (the request's headers point into it), so as many are taken as
    /// requests wait on a database at once: with 32 kept, 256 such connections allocated and
    /// freed a 4 KiB buffer for most requests. Kept only after being in use together.
    const KEEP: usize = 256;
    /// Of those, how many may have grown past [`READ_CHUNK`] (up to [`KEEP_CAPACITY`], for
    /// pipelined batches): at most 32 × 64 KiB + 224 × 4 KiB, under 3 MiB per kind.
    const KEEP_GROWN: usize = 32;
    /// Larger buffers (a big pipelined batch) are freed instead of kept.
    const KEEP_CAPACITY: usize = 64 * 1024;

    type Pool<T> = LocalKey<RefCell<Vec<T>>>;

    thread_local! {
        /// A cache of emptied buffers, per thread as any allocator cache is.
        static READ: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
        static WRITE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer that can be emptied and reused.
    trait Reusable {
        fn capacity(&self) -> usize;
        fn clear(&mut self);
    }

    impl Reusable for BytesMut {
        fn capacity(&self) -> usize {
            BytesMut::capacity(self)
        }
        fn clear(&mut self) {
            BytesMut::clear(self)
        }
    }

    impl Reusable for Vec<u8> {
        fn capacity(&self) -> usize {
            Vec::capacity(self)
        }
        fn clear(&mut self) {
            Vec::clear(self)
        }
    }

    fn take<T>(pool: &'static Pool<T>, new: impl FnOnce() -> T) -> T {
        pool.with(|p| p.borrow_mut().pop()).unwrap_or_else(new)
    }

    fn put<T: Reusable>(pool: &'static Pool<T>, mut buf: T) {
        if buf.capacity() == 0 || buf.capacity() > KEEP_CAPACITY {
            return;
        }
        buf.clear();
        pool.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP_GROWN || (p.len() < KEEP && buf.capacity() <= READ_CHUNK) {
                p.push(buf);
            }
        });
    }

    pub(in crate::http::h1) fn take_read() -> BytesMut {
        take(&READ, || BytesMut::with_capacity(READ_CHUNK))
    }

    pub(in crate::http::h1) fn put_read(buf: BytesMut) {
        put(&READ, buf)
    }

    pub(in crate::http::h1) fn take_write() -> Vec<u8> {
        take(&WRITE, || Vec::with_capacity(READ_CHUNK))
    }

    pub(in crate::http::h1) fn put_write(buf: Vec<u8>) {
        put(&WRITE, buf)
    }
}

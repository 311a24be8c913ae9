//! [`FileBody`]: a byte range of an open file as a response body, and the unit Brisk's
//! HTTP/1.1 writer sends with `sendfile(2)`.
//!
//! It sits in the HTTP layer, not in the file server, because two sides use it: the file
//! server (`static_files`) and anyone calling [`Body::file`]
//! build one, and the writers consume one, reading it in chunks as a body (hyper, TLS) or
//! sending its chunks straight from the page cache (Brisk's own HTTP/1.1 path). The system
//! calls behind both ways are in [`sys`].
//!
//! [`Body::file`]: super::Body::file

use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::task::JoinHandle;

use super::sys;

/// How much of a file one step sends: a read chunk (held in memory) or a
/// `sendfile` chunk (not).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunks {
    /// Bytes read (and held) at a time.
    pub(crate) read: usize,
    /// Bytes sent with `sendfile` between two yields.
    pub(crate) sendfile: usize,
}

impl Chunks {
    /// 128 KiB read chunks and 2 MiB `sendfile` chunks: see `StaticFiles::chunk_size` and
    /// `StaticFiles::sendfile_chunk_size` for how they were chosen.
    pub(crate) const DEFAULT: Chunks = Chunks {
        read: 128 * 1024,
        sendfile: 2 * 1024 * 1024,
    };
}

/// A byte range of a file, read or sent in chunks.
///
/// A chunk is read on the worker thread with `preadv2(RWF_NOWAIT)` when its
/// pages are in the page cache; only a chunk that would wait for the disk
/// (`EAGAIN`) is read on the blocking pool, one read in flight at a time. A
/// file on which `RWF_NOWAIT` is refused is read on the pool from then on.
/// Between two chunks read on the worker thread the body yields once (wakes
/// itself and returns `Pending`), as a read on the pool does: without that a
/// download whose client keeps up would keep the worker to itself (the
/// connection writes until the socket is full) and starve the other
/// connections. Dropping the body stops reading; the file closes once the read
/// in flight (if any) finishes (and once no cache entry holds it).
///
/// Brisk's own HTTP/1.1 path does not read it through `poll_frame` when it
/// can help it: it sends each chunk whose pages are all in the page cache
/// ([`resident_chunk`](Self::resident_chunk)) straight from the file to the
/// socket with `sendfile(2)`, and reads through `poll_frame` only the chunks
/// that are not (see `h1`'s `send_file`).
pub(crate) struct FileBody {
    file: Arc<std::fs::File>,
    /// File offset of the next byte to read.
    pos: u64,
    /// Bytes of the range not read yet.
    remaining: u64,
    chunks: Chunks,
    /// The read that does not wait for the disk; `None` once it was refused.
    nowait: Option<NowaitRead>,
    /// Whether a range of the file is all in the page cache.
    resident: Resident,
    /// A chunk was read (or sent) on this thread since the body last returned
    /// `Pending`: yield before reading another.
    read_now: bool,
    pending: Option<JoinHandle<io::Result<Bytes>>>,
    /// Shared with a [`FileClaim`]: whether this body was read, or dropped, since.
    watch: Option<Arc<AtomicU8>>,
}

/// Reads at most `len` bytes at an offset, appending them to the buffer,
/// without waiting for the disk: `WouldBlock` when it would have to.
pub(crate) type NowaitRead = fn(&std::fs::File, &mut Vec<u8>, usize, u64) -> io::Result<usize>;

/// Whether the `len` bytes at an offset of a file are all in the page cache:
/// `false` when they are not, or when that cannot be known.
pub(crate) type Resident = fn(&std::fs::File, u64, u64) -> bool;

impl FileBody {
    /// The `count` bytes of `file` from `start`, in `chunks`.
    pub(crate) fn new(file: Arc<std::fs::File>, start: u64, count: u64, chunks: Chunks) -> Self {
        FileBody {
            file,
            pos: start,
            remaining: count,
            chunks,
            nowait: sys::preadv2_exists().then_some(sys::read_nowait as NowaitRead),
            resident: sys::in_page_cache,
            read_now: false,
            pending: None,
            watch: None,
        }
    }

    /// A [`FileClaim`] on this body's range, to travel in its response's extensions.
    pub(crate) fn claim(&mut self) -> FileClaim {
        let state = Arc::new(AtomicU8::new(UNTOUCHED));
        self.watch = Some(state.clone());
        FileClaim {
            file: self.file.clone(),
            start: self.pos,
            count: self.remaining,
            chunks: self.chunks,
            state,
        }
    }

    /// The same body with other page-cache checks and reads (tests).
    #[cfg(test)]
    pub(crate) fn with_seams(mut self, resident: Resident, nowait: Option<NowaitRead>) -> Self {
        self.resident = resident;
        self.nowait = nowait;
        self
    }

    /// The open file.
    pub(crate) fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// Bytes of the range not sent yet.
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The next chunk as (offset, length) when its pages are all in the page
    /// cache, so that sending it from the file cannot wait for the disk;
    /// `None` when it is not (or this cannot be known, or a read is in
    /// flight): [`poll_frame`](http_body::Body::poll_frame) then reads it.
    pub(crate) fn resident_chunk(&self) -> Option<(u64, usize)> {
        if self.remaining == 0 || self.pending.is_some() {
            return None;
        }
        let len = self.remaining.min(self.chunks.sendfile as u64);
        (self.resident)(&self.file, self.pos, len).then_some((self.pos, len as usize))
    }

    /// `n` bytes at the current offset were sent by the caller (`sendfile`);
    /// `chunk_done` when that finished a chunk (the body yields before the
    /// next one).
    pub(crate) fn sent(&mut self, n: u64, chunk_done: bool) {
        debug_assert!(n <= self.remaining && self.pending.is_none());
        self.pos += n;
        self.remaining -= n;
        self.read_now |= chunk_done;
    }

    /// Yields once (wakes itself, `Pending`) if a chunk was produced on this
    /// thread since the last yield: the fairness step between two chunks.
    pub(crate) fn poll_yield(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::take(&mut self.read_now) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(())
    }

    /// The next chunk if it can be read without waiting for the disk:
    /// `Ok(None)` when it cannot (the caller reads it on the blocking pool).
    fn try_read_now(&mut self, len: usize) -> io::Result<Option<Bytes>> {
        let Some(read) = self.nowait else {
            return Ok(None);
        };
        let mut buf = Vec::with_capacity(len);
        match read(&self.file, &mut buf, len, self.pos) {
            // A truncated file: fail rather than send less than
            // Content-Length promised.
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            // Possibly short: the rest is read next time.
            Ok(_) => Ok(Some(Bytes::from(buf))),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR)) => Ok(None),
            // Refused (EOPNOTSUPP from a file system without RWF_NOWAIT,
            // EINVAL, ENOSYS, a seccomp filter...). A real I/O error shows
            // up again on the blocking read.
            Err(e) => {
                tracing::debug!(error = %e, "static file: RWF_NOWAIT reads refused, using the blocking pool");
                self.nowait = None;
                Ok(None)
            }
        }
    }

    /// The next chunk: read now when it is in memory, else on the blocking
    /// pool (one read in flight).
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<io::Result<Bytes>>> {
        let pending = match &mut self.pending {
            Some(pending) => pending,
            None => {
                if self.remaining == 0 {
                    return Poll::Ready(None);
                }
                ready!(self.poll_yield(cx));
                let len = self.remaining.min(self.chunks.read as u64) as usize;
                if let Some(chunk) = self.try_read_now(len).transpose() {
                    self.read_now = true;
                    return Poll::Ready(Some(chunk));
                }
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return Poll::Ready(Some(Err(io::Error::other(
                        "static file body polled outside a tokio runtime",
                    ))));
                };
                let (file, pos) = (self.file.clone(), self.pos);
                self.pending
                    .insert(runtime.spawn_blocking(move || read_exact(&file, len, pos)))
            }
        };
        let result = ready!(Pin::new(pending).poll(cx));
        self.pending = None;
        Poll::Ready(Some(result.unwrap_or_else(|e| Err(io::Error::other(e)))))
    }
}

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(watch) = this.watch.take() {
            watch.store(TOUCHED, Relaxed);
        }
        let chunk = ready!(this.poll_chunk(cx));
        Poll::Ready(chunk.map(|chunk| match chunk {
            Ok(chunk) => {
                this.pos += chunk.len() as u64;
                this.remaining -= chunk.len() as u64;
                Ok(Frame::data(chunk))
            }
            Err(e) => {
                this.remaining = 0;
                Err(e)
            }
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0 && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

impl Drop for FileBody {
    fn drop(&mut self) {
        if let Some(watch) = &self.watch {
            watch.store(TOUCHED, Relaxed);
        }
    }
}

/// [`FileClaim::state`]: the body was neither read nor dropped.
const UNTOUCHED: u8 = 0;
/// [`FileClaim::state`]: the body was read (by whatever wraps it) or dropped.
const TOUCHED: u8 = 1;

/// A response extension saying "this response's body is this file range, as yet unread",
/// so that the range can still be sent with `sendfile(2)` after a framework has boxed the
/// body into a type of its own.
///
/// An axum `Router` turns every response body into `axum::body::Body`, a boxed trait object
/// that cannot be looked into; extensions pass through. `StaticFiles` as a `tower::Service`
/// puts a claim beside each file body, and [`HttpServer::service`] takes the file back from
/// the claim ([`take`](Self::take)) and drops the framework's body, when that body is
/// evidently the same range untouched: never read nor dropped (a layer that replaced or
/// read it would have), the same exact length, and no `Content-Encoding` (a compression
/// layer sets one). A layer that rewrote the bytes in place but kept their length and
/// encoding would go unnoticed: there is none among the usual ones (tower-http's).
///
/// [`HttpServer::service`]: super::HttpServer::service
#[derive(Clone)]
pub(crate) struct FileClaim {
    file: Arc<std::fs::File>,
    start: u64,
    count: u64,
    chunks: Chunks,
    /// [`UNTOUCHED`] or [`TOUCHED`], set by the body.
    state: Arc<AtomicU8>,
}

impl FileClaim {
    /// The file range back, to send in place of `body` (the response's body now, with
    /// `headers`), if `body` is evidently the claimed body untouched (see above).
    pub(crate) fn take(
        self,
        body: &impl http_body::Body,
        headers: &http::HeaderMap,
    ) -> Option<FileBody> {
        let untouched = self.state.load(Relaxed) == UNTOUCHED;
        let same_length = body.size_hint().exact() == Some(self.count);
        let encoded = headers.contains_key(http::header::CONTENT_ENCODING);
        (untouched && same_length && !encoded)
            .then(|| FileBody::new(self.file, self.start, self.count, self.chunks))
    }
}

/// Exactly `len` bytes at `pos`, waiting for the disk (on the blocking pool).
fn read_exact(file: &std::fs::File, len: usize, pos: u64) -> io::Result<Bytes> {
    let mut buf = vec![0; len];
    // A file truncated while streaming fails here (UnexpectedEof) rather
    // than sending less than Content-Length promised.
    file.read_exact_at(&mut buf, pos)?;
    Ok(Bytes::from(buf))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::http::sys::read_nowait;
    use crate::http::testing::{digest, noise, run, ScratchDir};
    use http_body_util::BodyExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// 10,000-byte chunks, read or sent: a file of a few tens of kilobytes
    /// takes several.
    pub(crate) const SMALL_CHUNKS: Chunks = Chunks {
        read: 10_000,
        sendfile: 10_000,
    };

    thread_local! {
        /// Calls of the fake [`NowaitRead`]s below on this thread.
        static NOWAIT_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Counts a call; returns how many came before it.
    fn count_call() -> usize {
        NOWAIT_CALLS.with(|calls| calls.replace(calls.get() + 1))
    }

    /// Every chunk would wait for the disk.
    fn would_block(_: &std::fs::File, _: &mut Vec<u8>, _: usize, _: u64) -> io::Result<usize> {
        count_call();
        Err(io::Error::from_raw_os_error(libc::EAGAIN))
    }

    /// A read that succeeds as a cached one would, whatever the file system.
    pub(in crate::http) fn read_at(
        file: &std::fs::File,
        buf: &mut Vec<u8>,
        len: usize,
        pos: u64,
    ) -> io::Result<usize> {
        let mut read = vec![0; len];
        let n = file.read_at(&mut read, pos)?;
        buf.extend_from_slice(&read[..n]);
        Ok(n)
    }

    /// Every other chunk would wait for the disk.
    fn every_other(
        file: &std::fs::File,
        buf: &mut Vec<u8>,
        len: usize,
        pos: u64,
    ) -> io::Result<usize> {
        if count_call() % 2 == 0 {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        read_at(file, buf, len, pos)
    }

    /// Only part of every chunk is in memory.
    fn short(file: &std::fs::File, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<usize> {
        count_call();
        read_at(file, buf, len.min(1000), pos)
    }

    /// A file system without `RWF_NOWAIT`.
    fn refused(_: &std::fs::File, _: &mut Vec<u8>, _: usize, _: u64) -> io::Result<usize> {
        count_call();
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }

    /// The real read, counting the chunks that would have waited.
    fn counted_real(
        file: &std::fs::File,
        buf: &mut Vec<u8>,
        len: usize,
        pos: u64,
    ) -> io::Result<usize> {
        let result = read_nowait(file, buf, len, pos);
        if result.is_err() {
            count_call();
        }
        result
    }

    /// The bytes `[start, start + count)` of `path` through a [`FileBody`]
    /// reading with `nowait`, and how often `nowait` was called.
    async fn stream(
        path: &Path,
        start: u64,
        count: u64,
        nowait: NowaitRead,
    ) -> (io::Result<Vec<u8>>, usize) {
        NOWAIT_CALLS.with(|calls| calls.set(0));
        let file = std::fs::File::open(path).unwrap();
        let mut body = FileBody::new(Arc::new(file), start, count, SMALL_CHUNKS);
        body.nowait = Some(nowait);
        let mut received = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    let data = frame.into_data().unwrap();
                    assert!(!data.is_empty() && data.len() <= 10_000);
                    received.extend_from_slice(&data);
                }
                Err(e) => return (Err(e), NOWAIT_CALLS.with(|c| c.get())),
            }
        }
        assert!(http_body::Body::is_end_stream(&body));
        (Ok(received), NOWAIT_CALLS.with(|c| c.get()))
    }

    #[test]
    fn chunks_that_would_wait_are_read_on_the_pool_at_the_same_offsets() {
        let dir = ScratchDir::new("file-body");
        let contents = noise(100_000);
        let path = dir.write("big.bin", &contents);
        run(async {
            // 2 chunks ... 9 chunks, starting anywhere.
            for (start, count) in [(0, 100_000), (1, 99_999), (12_345, 50_001), (99_000, 1000)] {
                let expected = &contents[start..start + count];
                let (start, count) = (start as u64, count as u64);
                let chunks = count.div_ceil(10_000) as usize;
                // One call per chunk, or per 1000 bytes for `short`.
                for (nowait, calls) in [
                    (would_block as NowaitRead, chunks),
                    (every_other, chunks),
                    (short, count.div_ceil(1000) as usize),
                    // Refused once, then never tried again.
                    (refused, 1),
                ] {
                    let (received, called) = stream(&path, start, count, nowait).await;
                    let received = received.unwrap();
                    assert_eq!(received.len(), expected.len());
                    assert_eq!(digest(&received), digest(expected), "{start} {count}");
                    assert_eq!(called, calls, "{start} {count}");
                }
            }

            // A cached file (just written) needs no pool at all where the
            // file system supports RWF_NOWAIT (then no call fails).
            let (received, failed) = stream(&path, 0, 100_000, counted_real).await;
            assert_eq!(received.unwrap(), contents);
            let probe = read_nowait(&std::fs::File::open(&path).unwrap(), &mut Vec::new(), 1, 0);
            if probe.is_ok() {
                assert_eq!(failed, 0);
            }

            // Truncated under the pool read: an error, not a short body.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(50_000)
                .unwrap();
            for nowait in [would_block as NowaitRead, short, counted_real] {
                let (received, _) = stream(&path, 0, 100_000, nowait).await;
                let e = received.unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
            }
        });
    }

    #[test]
    fn yields_between_chunks_read_on_the_worker() {
        struct CountWakes(AtomicUsize);
        impl std::task::Wake for CountWakes {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let dir = ScratchDir::new("file-body");
        let contents = noise(35_000);
        let path = dir.write("big.bin", &contents);
        let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let mut body = FileBody::new(
            Arc::new(std::fs::File::open(&path).unwrap()),
            0,
            35_000,
            SMALL_CHUNKS,
        );
        body.nowait = Some(read_at);
        let mut received = Vec::new();
        let mut yields = 0;
        loop {
            match http_body::Body::poll_frame(Pin::new(&mut body), &mut cx) {
                Poll::Ready(Some(frame)) => {
                    received.extend_from_slice(&frame.unwrap().into_data().unwrap());
                }
                Poll::Ready(None) => break,
                Poll::Pending => {
                    // Woken at once: the connection is polled again after
                    // the worker's other tasks.
                    yields += 1;
                    assert_eq!(wakes.0.load(Ordering::Relaxed), yields);
                }
            }
        }
        assert_eq!(received, contents);
        // Once between each two of the 4 chunks, not after the last.
        assert_eq!(yields, 3);
    }
}

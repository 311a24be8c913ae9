//! Brisk's own HTTP/1.1 path for plaintext connections: the requests servers see most
//! (HTTP/1.1 or 1.0, no body or a small one with a `Content-Length`) are parsed with `httparse` and
//! answered here, with buffers taken from a per-worker pool only while a request is in
//! flight, so an idle keep-alive connection holds no buffer at all.
//!
//! The first request this path does not take — a chunked or large body, `Expect`, an upgrade,
//! `CONNECT`, or anything `httparse` or the `http` types reject, or a head over
//! the size or count limits — hands the connection, with every byte not yet answered, to
//! hyper, which serves it from then on as it serves every HTTPS connection. Every error
//! answer (400, 413, 431) and every request-smuggling defence is therefore hyper's.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;

use super::file_body::FileBody;
use super::io::HttpIo;
use super::respond::{respond, until_sent};
use super::response_head::{self, has_token, Framing, HeadContext};
use super::state::{HttpConn, HttpShared};
use super::{Body, HttpLimits, RequestBody};
use crate::stats::Stats;

/// How Brisk's HTTP/1.1 path ended.
pub(crate) enum Exit {
    /// The connection is done: closed by either side, failed, or drained.
    Closed,
    /// hyper takes over; the socket's unread bytes come first.
    Handover(HttpIo),
}

/// Bytes asked of each `recv`.
const READ_CHUNK: usize = 4096;
/// Header slots on the stack; a higher `max_headers` limit parses into a heap array.
const STACK_HEADERS: usize = 128;
/// Pipelined responses are sent once this many bytes are staged.
const FLUSH_AT: usize = 64 * 1024;
/// Request bodies up to this size (and the max package size) are read here, whole; larger
/// ones stream through hyper.
const BODY_MAX: usize = 64 * 1024;
/// Body chunks under this size are copied next to the head (one send); larger ones are
/// sent from where they are (vectored).
const COPY_UNDER: usize = 16 * 1024;

/// Serves requests on `io` until the connection ends or needs hyper.
pub(crate) async fn serve(shared: &HttpShared, conn: &HttpConn, mut io: HttpIo) -> Exit {
    let mut input = BytesMut::new();
    let mut out = Output::default();
    loop {
        // Answer every complete request received so far, in order.
        let mut data = input.split().freeze();
        let mut handover = false;
        while !data.is_empty() {
            let (req, close) = match parse(&data, &shared.http, shared.limits.max_package_size) {
                Parsed::Partial => break,
                Parsed::AwaitingBody => {
                    // Bytes now are the body's: a body that trickles in is not a slow head.
                    conn.activity.head_done();
                    break;
                }
                Parsed::Handover => {
                    handover = true;
                    break;
                }
                Parsed::Request { req, len, close } => {
                    data.advance(len);
                    (req, close)
                }
            };
            // Boxed: the handler's and the writer's state exist only while a request is in
            // flight, so an idle connection's task does not carry their space.
            let sent = Box::pin(answer(shared, conn, &io, &mut out, req, close)).await;
            match sent {
                Ok(Keep::Open) if out.staged() < FLUSH_AT || data.is_empty() => {}
                Ok(Keep::Open) => {
                    if out.flush(&io).await.is_err() {
                        return Exit::Closed;
                    }
                }
                Ok(Keep::Close) => {
                    // Closing the socket sends FIN after the response: no shutdown call.
                    let _ = out.flush(&io).await;
                    return Exit::Closed;
                }
                Err(_) => return Exit::Closed,
            }
        }
        if out.flush(&io).await.is_err() {
            return Exit::Closed;
        }
        if handover {
            io.unread(data);
            return Exit::Handover(io);
        }
        out.release();
        // Keep what is left (part of a head) and read more; an idle connection keeps no
        // buffer.
        let spare = std::mem::take(&mut input);
        if data.is_empty() {
            drop(data);
            pool::put_read(spare);
        } else {
            // Once the spare capacity is let go, the rest is usually the only user of its
            // buffer and becomes the input without a copy.
            drop(spare);
            input = data
                .try_into_mut()
                .unwrap_or_else(|data| BytesMut::from(&data[..]));
        }
        match read_more(&mut io, &conn.draining, &mut input).await {
            Ok(Some(n)) if n > 0 => {}
            // End of stream, drained, or failed: hyper would close too (a partial head at
            // the end is an incomplete message, with nobody to answer).
            _ => {
                pool::put_read(input);
                return Exit::Closed;
            }
        }
    }
}

/// Waits for bytes and appends them to `input` (buffer from the pool, taken only once the
/// socket is readable). `None` when the worker drains a connection between requests.
async fn read_more(
    io: &mut HttpIo,
    draining: &Cell<bool>,
    input: &mut BytesMut,
) -> io::Result<Option<usize>> {
    poll_fn(|cx| {
        if draining.get() && input.is_empty() {
            return Poll::Ready(Ok(None));
        }
        ready!(io.poll_read_ready(cx))?;
        if input.capacity() == 0 {
            *input = pool::take_read();
        }
        input.reserve(READ_CHUNK);
        let received = io.poll_recv(cx, input.spare_capacity_mut());
        if received.is_pending() && input.is_empty() {
            // Readable, yet nothing came (a new connection's first wake-up often is): wait
            // without the buffer, or every connection in a burst would hold one.
            pool::put_read(std::mem::take(input));
        }
        let n = ready!(received)?;
        // SAFETY: recv initialized the first `n` bytes of the spare capacity.
        unsafe { input.set_len(input.len() + n) };
        Poll::Ready(Ok(Some(n)))
    })
    .await
}

/// What parsing the start of the received bytes found.
// The request is moved once, straight to the handler: boxing it would allocate per request.
#[allow(clippy::large_enum_variant)]
enum Parsed {
    /// A complete request (head and body), `len` bytes long.
    Request {
        req: Request<RequestBody>,
        len: usize,
        /// The client asked for `Connection: close`.
        close: bool,
    },
    /// The head is not complete yet.
    Partial,
    /// The head is complete, its body is not.
    AwaitingBody,
    /// This request is hyper's (see the module documentation).
    Handover,
}

/// Parses the request at the start of `data`; bodies over `max_body` are hyper's (413).
fn parse(data: &Bytes, limits: &HttpLimits, max_body: usize) -> Parsed {
    let slots = limits.max_headers;
    if slots <= STACK_HEADERS {
        let mut headers = [const { MaybeUninit::uninit() }; STACK_HEADERS];
        parse_into(data, limits, max_body, &mut headers[..slots])
    } else {
        let mut headers = Vec::with_capacity(slots);
        headers.resize_with(slots, MaybeUninit::uninit);
        parse_into(data, limits, max_body, &mut headers)
    }
}

fn parse_into<'b>(
    data: &'b Bytes,
    limits: &HttpLimits,
    max_body: usize,
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
) -> Parsed {
    let mut head = httparse::Request::new(&mut []);
    let len = match head.parse_with_uninit_headers(data, slots) {
        Ok(httparse::Status::Complete(len)) if len <= limits.max_header_bytes => len,
        Ok(httparse::Status::Partial) if data.len() <= limits.max_header_bytes => {
            return Parsed::Partial
        }
        // Too long, too many headers, or malformed: hyper answers 431 or 400.
        _ => return Parsed::Handover,
    };
    let http10 = match head.version {
        Some(1) => false,
        Some(0) => true,
        _ => return Parsed::Handover,
    };
    let (Some(method), Some(path)) = (head.method, head.path) else {
        return Parsed::Handover;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Handover;
    };
    if method == Method::CONNECT {
        return Parsed::Handover;
    }
    let Ok(uri) = Uri::from_maybe_shared(data.slice_ref(path.as_bytes())) else {
        return Parsed::Handover;
    };
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    let mut close = false;
    let mut keep_alive = false;
    let mut body_len: Option<usize> = None;
    for h in head.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return Parsed::Handover;
        };
        let Ok(value) = HeaderValue::from_maybe_shared(data.slice_ref(h.value)) else {
            return Parsed::Handover;
        };
        match name {
            // One length, digits only, small enough to hold; anything else is hyper's.
            header::CONTENT_LENGTH => match (body_len, parse_length(h.value)) {
                (None, Some(n)) if n <= BODY_MAX.min(max_body) => body_len = Some(n),
                _ => return Parsed::Handover,
            },
            header::TRANSFER_ENCODING | header::EXPECT | header::UPGRADE => {
                return Parsed::Handover
            }
            header::CONNECTION => {
                if has_token(h.value, "upgrade") {
                    return Parsed::Handover;
                }
                close |= has_token(h.value, "close");
                keep_alive |= has_token(h.value, "keep-alive");
            }
            _ => {}
        }
        headers.append(name, value);
    }
    let body = match body_len {
        None | Some(0) => RequestBody::empty(),
        Some(n) if data.len() - len < n => return Parsed::AwaitingBody,
        Some(n) => RequestBody::full(data.slice(len..len + n)),
    };
    let mut req = Request::new(body);
    if http10 {
        // HTTP/1.0 keeps the connection only when asked to.
        close |= !keep_alive;
        *req.version_mut() = Version::HTTP_10;
    }
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let len = len + body_len.unwrap_or(0);
    Parsed::Request { req, len, close }
}

/// A `Content-Length` value: 1 to 19 digits.
fn parse_length(value: &[u8]) -> Option<usize> {
    if value.is_empty() || value.len() > 19 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Whether the connection stays open after a response.
enum Keep {
    Open,
    Close,
}

/// Runs the handler for one request and stages (or sends) its response.
async fn answer(
    shared: &HttpShared,
    conn: &HttpConn,
    io: &HttpIo,
    out: &mut Output,
    req: Request<RequestBody>,
    close: bool,
) -> io::Result<Keep> {
    let method = req.method().clone();
    let http10 = req.version() == Version::HTTP_10;
    let resp = respond(shared, conn, req).await;
    let cx = HeadContext {
        method: &method,
        close_requested: close,
        http10,
        body_len: None,
    };
    // A file range stays one (for `sendfile`): it reads no request body, so the connection is
    // simply idle again once it is sent.
    if !resp.body().is_file() {
        let resp = until_sent(resp, &conn.activity);
        return write_response(io, out, resp, cx, shared).await;
    }
    let sent = write_response(io, out, resp, cx, shared).await;
    conn.activity.busy.store(false, Relaxed);
    sent
}

/// Stages (and, for streamed bodies, sends) one response.
async fn write_response(
    io: &HttpIo,
    out: &mut Output,
    resp: Response<Body>,
    mut cx: HeadContext<'_>,
    shared: &HttpShared,
) -> io::Result<Keep> {
    let stats = &shared.worker.stats;
    let (parts, mut body) = resp.into_parts();
    let (status, headers) = if parts.status.is_informational() {
        // As hyper: a 1xx cannot be the final answer.
        tracing::warn!(status = %parts.status, "handler answered with a 1xx status; sent 500");
        Stats::add(&stats.throw_exception, 1);
        body = Body::empty();
        (StatusCode::INTERNAL_SERVER_ERROR, HeaderMap::new())
    } else {
        (parts.status, parts.headers)
    };
    cx.body_len = body.size_hint().exact();
    out.make_room(io).await?;
    let head = response_head::encode(out.stage(), status, &headers, &cx);
    let streaming = body.is_streaming();
    let mut writer = BodyWriter::new(head.framing);
    if let (Framing::Length(len), Some(file)) = (head.framing, body.as_file_mut()) {
        if file.remaining() == len {
            let complete = send_file(io, out, file).await?;
            return Ok(if head.close || !complete {
                Keep::Close
            } else {
                Keep::Open
            });
        }
    }
    if head.framing != Framing::NoBody {
        loop {
            let frame = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
                Poll::Ready(frame) => Poll::Ready(Ok(frame)),
                // Send what is staged (the head, at least) while the body waits.
                Poll::Pending => match out.poll_flush(io, cx) {
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    _ => Poll::Pending,
                },
            })
            .await?;
            match frame {
                None => break,
                Some(Err(e)) => {
                    Stats::add(&stats.throw_exception, 1);
                    tracing::warn!(error = %e, "response body failed; closing the connection");
                    return Ok(Keep::Close);
                }
                Some(Ok(frame)) => {
                    // Trailers are dropped, as hyper does unless the client asked for them.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    out.make_room(io).await?;
                    writer.data(out, data);
                    if streaming {
                        out.flush(io).await?;
                    }
                }
            }
        }
    }
    out.make_room(io).await?;
    let complete = writer.finish(out);
    Ok(if head.close || !complete {
        Keep::Close
    } else {
        Keep::Open
    })
}

/// Sends what is staged (a response head, at least), then the file range: each chunk whose
/// pages are in the page cache with `sendfile(2)`, from the file to the socket; any other
/// chunk read through the body (on the blocking pool when it would wait for the disk) and
/// written. Yields between chunks, as the body does when read. Returns whether the whole
/// range went: a file that ends early (truncated since its length was taken) leaves the
/// response short, and the connection must close.
async fn send_file(io: &HttpIo, out: &mut Output, file: &mut FileBody) -> io::Result<bool> {
    let mut first = true;
    while file.remaining() > 0 {
        poll_fn(|cx| file.poll_yield(cx)).await;
        let Some((mut pos, len)) = file.resident_chunk() else {
            // Not (known to be) in memory: read it as the body would be read.
            out.flush(io).await?;
            first = false;
            match poll_fn(|cx| Pin::new(&mut *file).poll_frame(cx)).await {
                Some(Ok(frame)) => {
                    let data = frame.into_data().unwrap_or_default();
                    if data.is_empty() {
                        continue;
                    }
                    out.push(data);
                    out.flush(io).await?;
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "static file failed while sent; closing the connection");
                    return Ok(false);
                }
                None => return Ok(false),
            }
            continue;
        };
        if std::mem::take(&mut first) {
            // The head goes with the start of the file.
            out.flush_more(io).await?;
        }
        let end = pos + len as u64;
        while pos < end {
            let want = (end - pos) as usize;
            let n = poll_fn(|cx| io.poll_sendfile(cx, file.file(), &mut pos, want)).await?;
            if n == 0 {
                tracing::warn!(
                    missing = file.remaining(),
                    "static file ended before its content-length; closing the connection"
                );
                return Ok(false);
            }
            file.sent(n as u64, pos == end);
        }
    }
    // Whatever is still staged (nothing, unless the range was empty).
    out.flush(io).await?;
    Ok(true)
}

/// Frames body data as the head promised.
struct BodyWriter {
    framing: Framing,
    sent: u64,
    /// More data came than `content-length` allowed (dropped).
    overflow: bool,
}

impl BodyWriter {
    fn new(framing: Framing) -> Self {
        BodyWriter {
            framing,
            sent: 0,
            overflow: false,
        }
    }

    /// Stages one chunk of data. `out` must have room (no unsent data after its stage).
    fn data(&mut self, out: &mut Output, mut data: Bytes) {
        if data.is_empty() {
            return;
        }
        match self.framing {
            Framing::NoBody => return,
            Framing::Length(len) => {
                let room = len - self.sent;
                if data.len() as u64 > room {
                    data.truncate(room as usize);
                    self.overflow = true;
                }
            }
            Framing::Chunked => {
                let buf = out.stage();
                if self.sent > 0 {
                    buf.extend_from_slice(b"\r\n");
                }
                let mut hex = [0u8; 16];
                buf.extend_from_slice(hex_len(data.len(), &mut hex));
                buf.extend_from_slice(b"\r\n");
            }
            Framing::UntilClose => {}
        }
        self.sent += data.len() as u64;
        out.push(data);
    }

    /// Stages the end of the body; returns whether the body matched its framing (when not,
    /// the connection must close: the client cannot tell where the next response starts).
    fn finish(self, out: &mut Output) -> bool {
        match self.framing {
            Framing::Chunked if self.sent > 0 => out.stage().extend_from_slice(b"\r\n0\r\n\r\n"),
            Framing::Chunked => out.stage().extend_from_slice(b"0\r\n\r\n"),
            Framing::Length(len) if len != self.sent || self.overflow => {
                tracing::warn!(
                    declared = len,
                    sent = self.sent,
                    "response body did not match its content-length; closing the connection"
                );
                return false;
            }
            _ => {}
        }
        true
    }
}

/// `n` in lower-case hexadecimal.
fn hex_len(mut n: usize, buf: &mut [u8; 16]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Bytes waiting to be sent: a staging buffer, then at most one chunk sent from where it
/// is.
#[derive(Default)]
struct Output {
    buf: Vec<u8>,
    /// How much of `buf` was sent.
    sent: usize,
    tail: Bytes,
}

impl Output {
    /// The staging buffer; the caller appends to it. Only valid while nothing follows it
    /// (see [`make_room`](Self::make_room)).
    fn stage(&mut self) -> &mut Vec<u8> {
        debug_assert!(self.tail.is_empty());
        if self.buf.capacity() == 0 {
            self.buf = pool::take_write();
        }
        &mut self.buf
    }

    /// Bytes staged and not sent.
    fn staged(&self) -> usize {
        self.buf.len() - self.sent + self.tail.len()
    }

    /// Stages `data`: copied when small, else kept as the tail (the caller then calls
    /// [`make_room`](Self::make_room) before staging more).
    fn push(&mut self, data: Bytes) {
        if data.len() < COPY_UNDER {
            self.stage().extend_from_slice(&data);
        } else {
            self.tail = data;
        }
    }

    /// Sends the tail, if any, so more can be staged after it.
    async fn make_room(&mut self, io: &HttpIo) -> io::Result<()> {
        if self.tail.is_empty() {
            return Ok(());
        }
        self.flush(io).await
    }

    async fn flush(&mut self, io: &HttpIo) -> io::Result<()> {
        poll_fn(|cx| self.poll_flush(io, cx)).await
    }

    /// [`flush`](Self::flush), telling the kernel that more follows at once (`MSG_MORE`).
    async fn flush_more(&mut self, io: &HttpIo) -> io::Result<()> {
        poll_fn(|cx| self.poll_send_all(io, cx, true)).await
    }

    fn poll_flush(&mut self, io: &HttpIo, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
    fn release(&mut self) {
        debug_assert_eq!(self.staged(), 0);
        pool::put_write(std::mem::take(&mut self.buf));
        self.sent = 0;
    }
}

/// Per-worker buffers for connections that are busy right now: idle connections hold none,
/// and a busy one rarely allocates.
mod pool {
    use std::thread::LocalKey;

    use super::*;

    /// Buffers kept per worker and kind; more are freed.
    const KEEP: usize = 32;
    /// Larger buffers (a big pipelined batch) are freed instead of kept.
    const KEEP_CAPACITY: usize = 64 * 1024;

    type Pool<T> = LocalKey<RefCell<Vec<T>>>;

    thread_local! {
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
            if p.len() < KEEP {
                p.push(buf);
            }
        });
    }

    pub(super) fn take_read() -> BytesMut {
        take(&READ, || BytesMut::with_capacity(READ_CHUNK))
    }

    pub(super) fn put_read(buf: BytesMut) {
        put(&READ, buf)
    }

    pub(super) fn take_write() -> Vec<u8> {
        take(&WRITE, || Vec::with_capacity(READ_CHUNK))
    }

    pub(super) fn put_write(buf: Vec<u8>) {
        put(&WRITE, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &str) -> Parsed {
        let limits = HttpLimits::default();
        parse(&Bytes::copy_from_slice(raw.as_bytes()), &limits, 1 << 20)
    }

    #[test]
    fn simple_requests_are_taken_with_their_length_and_close() {
        let raw =
            "GET /a?b=1 HTTP/1.1\r\nHost: x\r\nConnection: Close\r\nX-A: 1\r\nX-A: 2\r\n\r\nGET /";
        let Parsed::Request { req, len, close } = parsed(raw) else {
            panic!("not taken")
        };
        assert_eq!(len, raw.len() - "GET /".len());
        assert!(close);
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().path(), "/a");
        assert_eq!(req.uri().query(), Some("b=1"));
        assert_eq!(req.headers().get_all("x-a").iter().count(), 2);
        assert!(matches!(parsed("GET / HTTP/1.1\r\nHost"), Parsed::Partial));
        assert!(matches!(
            parsed("DELETE /x HTTP/1.1\r\nContent-Length: 00\r\n\r\n"),
            Parsed::Request { close: false, .. }
        ));
    }

    #[test]
    fn http_1_0_is_taken_and_keeps_the_connection_only_when_asked() {
        let Parsed::Request { req, close, .. } = parsed("GET / HTTP/1.0\r\n\r\n") else {
            panic!("not taken")
        };
        assert_eq!(req.version(), Version::HTTP_10);
        assert!(close, "HTTP/1.0 closes by default");
        let raw = "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n";
        let Parsed::Request { req, close, .. } = parsed(raw) else {
            panic!("not taken")
        };
        assert_eq!(req.version(), Version::HTTP_10);
        assert!(!close);
        let Parsed::Request { req, .. } = parsed("GET / HTTP/1.1\r\n\r\n") else {
            panic!("not taken")
        };
        assert_eq!(req.version(), Version::HTTP_11);
    }

    #[test]
    fn small_bodies_with_a_length_are_taken_whole() {
        let raw = "POST /e HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET";
        let Parsed::Request { req, len, .. } = parsed(raw) else {
            panic!("not taken")
        };
        assert_eq!(len, raw.len() - 3);
        let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(
            req.into_body(),
        ));
        assert_eq!(&body.unwrap().unwrap().to_bytes()[..], b"hello");
        let head = "POST /e HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel";
        assert!(matches!(parsed(head), Parsed::AwaitingBody));
    }

    #[test]
    fn anything_else_goes_to_hyper() {
        for raw in [
            "POST / HTTP/1.1\r\nContent-Length: 65537\r\n\r\nabc",
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd",
            "PUT / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
            "GARBAGE\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header: v\r\n\r\n",
        ] {
            assert!(matches!(parsed(raw), Parsed::Handover), "{raw:?}");
        }
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(20_000));
        assert!(
            matches!(parsed(&big), Parsed::Handover),
            "over the head limit"
        );
        let many: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(
            matches!(parsed(&many), Parsed::Handover),
            "over the header count"
        );
    }

    #[test]
    fn a_reader_woken_with_nothing_to_read_waits_without_a_buffer() {
        use std::io::Write;

        use crate::http::io::tests::with_io;

        with_io(async |mut io, _, mut client| {
            let raw = io.raw_fd();
            // A byte makes the socket readable; taking it behind tokio's back leaves it
            // marked readable with nothing to read.
            client.write_all(b"x").unwrap();
            poll_fn(|cx| io.poll_read_ready(cx)).await.unwrap();
            let mut byte = 0u8;
            // SAFETY: one byte into `byte`, on the test's own socket.
            let n = unsafe { libc::recv(raw, (&raw mut byte).cast(), 1, 0) };
            assert_eq!(n, 1);
            let draining = Cell::new(false);
            let mut input = BytesMut::new();
            let waited =
                futures_util::FutureExt::now_or_never(read_more(&mut io, &draining, &mut input));
            assert!(waited.is_none(), "nothing to read yet");
            assert_eq!(input.capacity(), 0, "waits holding a buffer");
            client.write_all(b"GET").unwrap();
            let n = read_more(&mut io, &draining, &mut input).await.unwrap();
            assert_eq!((n, &input[..]), (Some(3), &b"GET"[..]));
        });
    }

    mod sendfile {
        use std::cell::Cell;
        use std::io::Read;
        use std::sync::Arc;

        use super::*;
        use crate::http::file_body::tests::SMALL_CHUNKS;
        use crate::http::file_body::{tests as file_body, NowaitRead, Resident};
        use crate::http::io::tests::with_io;
        use crate::http::sys::in_page_cache;
        use crate::http::testing::noise;

        thread_local! {
            /// Chunks the fakes below were asked about / read.
            static ASKED: Cell<usize> = const { Cell::new(0) };
            static READ: Cell<usize> = const { Cell::new(0) };
        }

        fn always(_: &std::fs::File, _: u64, _: u64) -> bool {
            ASKED.with(|c| c.set(c.get() + 1));
            true
        }

        fn never(_: &std::fs::File, _: u64, _: u64) -> bool {
            ASKED.with(|c| c.set(c.get() + 1));
            false
        }

        fn every_other(_: &std::fs::File, _: u64, _: u64) -> bool {
            ASKED.with(|c| {
                c.set(c.get() + 1);
                c.get() % 2 == 0
            })
        }

        /// A read as from the page cache, counted.
        fn read_at(
            file: &std::fs::File,
            buf: &mut Vec<u8>,
            len: usize,
            pos: u64,
        ) -> io::Result<usize> {
            READ.with(|c| c.set(c.get() + 1));
            file_body::read_at(file, buf, len, pos)
        }

        /// Sends "HEAD" then `count` bytes of `path` from `start` through [`send_file`] to a
        /// loopback client; returns what the client received, whether `send_file` reported
        /// the range complete, the bytes counted out, and the chunks read through the body.
        fn send(
            path: &std::path::Path,
            start: u64,
            count: u64,
            resident: Resident,
        ) -> (Vec<u8>, bool, u64, usize) {
            let (reader, complete, out_bytes) = with_io(async |io, activity, mut client| {
                let reader = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    client.read_to_end(&mut got).unwrap();
                    got
                });
                READ.with(|c| c.set(0));
                let file = std::fs::File::open(path).unwrap();
                let mut body = FileBody::new(Arc::new(file), start, count, SMALL_CHUNKS)
                    .with_seams(resident, Some(read_at as NowaitRead));
                let mut out = Output::default();
                out.stage().extend_from_slice(b"HEAD");
                let complete = send_file(&io, &mut out, &mut body).await.unwrap();
                // Dropping `io` closes the socket, which ends the reader.
                (reader, complete, activity.bytes_out.load(Relaxed))
            });
            (
                reader.join().unwrap(),
                complete,
                out_bytes,
                READ.with(Cell::get),
            )
        }

        #[test]
        fn file_ranges_are_byte_exact_with_sendfile_or_read_when_not_in_memory() {
            let dir =
                std::env::temp_dir().join(format!("brisk-h1-sendfile-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("f.bin");
            let contents = noise(123_457);
            std::fs::write(&path, &contents).unwrap();
            for (start, count) in [
                (0u64, 123_457u64),
                (1, 99_999),
                (12_345, 10_001),
                (123_000, 457),
            ] {
                let chunks = count.div_ceil(10_000) as usize;
                for (resident, reads) in [
                    (always as Resident, 0),
                    (never, chunks),
                    (every_other, chunks.div_ceil(2)),
                ] {
                    ASKED.with(|c| c.set(0));
                    let (got, complete, out, read) = send(&path, start, count, resident);
                    let range = &contents[start as usize..(start + count) as usize];
                    assert!(complete);
                    assert_eq!(&got[..4], b"HEAD");
                    assert!(got[4..] == *range, "{start} {count}: {} bytes", got.len());
                    assert_eq!(out, count + 4);
                    assert_eq!(read, reads, "{start} {count}");
                    assert_eq!(ASKED.with(Cell::get), chunks);
                }
            }
            // The real check: the file was just written, so it is in the page cache (where
            // cachestat is available) and nothing is read.
            let file = std::fs::File::open(&path).unwrap();
            if in_page_cache(&file, 0, contents.len() as u64) {
                let (got, complete, _, read) = send(&path, 0, 123_457, in_page_cache);
                assert!(complete && got[4..] == contents[..]);
                assert_eq!(read, 0);
            }
            // A file shorter than promised: what it has, then "incomplete" (the caller
            // closes the connection), whichever way its chunks go.
            for resident in [always as Resident, never, in_page_cache] {
                let (got, complete, _, _) = send(&path, 100_000, 30_000, resident);
                assert!(!complete);
                assert!(got.len() <= 4 + 23_457);
                assert!(got[4..] == contents[100_000..100_000 + got.len() - 4]);
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn chunk_sizes_are_hex() {
        let mut b = [0u8; 16];
        assert_eq!(hex_len(0, &mut b), b"0");
        assert_eq!(hex_len(255, &mut b), b"ff");
        assert_eq!(hex_len(65536, &mut b), b"10000");
    }
}
